package host

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"github.com/affido/affido/agent/agents"
)

// Status is the sandbox as GET /status shows it, kept in a file beside the
// session database so it answers while storage is closed.
type Status struct {
	User           string     `json:"user"`
	StorageOpen    bool       `json:"storage_open"`
	Model          string     `json:"model"`
	ConversationID int64      `json:"conversation_id,omitempty"`
	EntryCount     int64      `json:"entry_count"`
	NextWakeAt     *time.Time `json:"next_wake_at,omitempty"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

func (s *Host) statusPath() string {
	return filepath.Join(filepath.Dir(s.cfg.SessionDB), "status.json")
}

func (s *Host) readStatus() (Status, error) {
	var st Status
	b, err := os.ReadFile(s.statusPath())
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// writeStatus records the cache. Caller holds s.mu.
func (s *Host) writeStatus(ctx context.Context, open bool) {
	st := Status{User: s.cfg.User(), StorageOpen: open, Model: s.cfg.DefaultModel, UpdatedAt: time.Now().UTC()}
	if main := s.runtimes()[agents.Main]; main != nil {
		h := main.Harness
		if conv, err := CurrentConversation(ctx, h); err == nil {
			st.ConversationID = conv
			st.EntryCount, _ = h.Store().EntryCount(ctx, conv)
			if c, err := h.Store().Conversation(ctx, conv); err == nil && c.Settings["model"] != "" {
				st.Model = c.Settings["model"]
			}
		}
		if due, err := s.nextDueAt(ctx); err == nil && !due.IsZero() {
			st.NextWakeAt = &due
		}
	} else if old, err := s.readStatus(); err == nil {
		st.ConversationID, st.EntryCount, st.NextWakeAt = old.ConversationID, old.EntryCount, old.NextWakeAt
	}
	b, _ := json.Marshal(st)
	tmp := s.statusPath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err == nil {
		_ = os.Rename(tmp, s.statusPath())
	}
}

// Status is what the status cache says, refreshed from storage first while
// storage is open anyway (that opens nothing).
func (s *Host) Status(ctx context.Context) Status {
	s.mu.Lock()
	open := s.runtimes() != nil
	if open {
		s.writeStatus(ctx, true)
	}
	s.mu.Unlock()
	st, err := s.readStatus()
	if err != nil {
		st = Status{User: s.cfg.User(), Model: s.cfg.DefaultModel}
	}
	st.StorageOpen = open
	return st
}
