// Package host hosts the named agents of one sandbox. It opens their
// storage (each agent's harness over a database of its own) on first use
// and closes it on pause, keeps the board of their next due times, delivers
// messages between them (agents.Hub), changes the registry of agents, and
// keeps the status cache a sandbox with closed storage answers from. It
// speaks no HTTP: agent/server is the API in front of it.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/citations"
	"github.com/affido/affido/agent/corpus"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/policy"
)

// Config is what the host needs.
type Config struct {
	// User is whom the sandbox belongs to now ("" before the claim), for
	// the status cache.
	User      func() string
	SessionDB string // main's database; its directory also holds the status cache and the other agents' storage
	// Storage, if set, may hold the agents' databases instead of SQLite
	// files under SessionDB's directory (agent/storage: the user's
	// Postgres); UseStorage makes it the default for a data directory that
	// holds none yet. Where they are is StorageKind's to say.
	Storage      Storage
	UseStorage   bool
	Model        durable.Model
	DefaultModel string
	Harness      durable.Options // Model and DefaultModel are filled from above
	Log          *slog.Logger
	// Corpus holds the owner's documents: an owner agent's corpus_search
	// and citation gate read it.
	Corpus *corpus.Corpus
	// WorkerTools and WorkerSystem are the worker agent's tools (web tools:
	// none of the owner's data) and system prompt.
	WorkerTools  []durable.Tool
	WorkerSystem string
	// OwnAgentTools, if set, are more tools of one of the owner's agents,
	// made for it by name (the browser's: a tab per agent), known to its
	// rules like the configured ones.
	OwnAgentTools func(agent string) []durable.Tool
	// AgentTools, if set, gives the tools of one of the owner's agents that
	// come and go (its connectors, which the manager holds): the harness's
	// MoreTools. The worker gets none.
	AgentTools func(agent string) func(ctx context.Context) ([]durable.Tool, error)
	// OnApproval returns tasks to commit with a new approval of agent
	// (the owner's notification).
	OnApproval func(agent string, a durable.Approval, proposal *policy.Rule) []durable.Task
	// OnAnswer returns tasks to commit with a run's answer of agent.
	OnAnswer func(agent string, in durable.Input, answer durable.Entry) []durable.Task
	// MessageTimeout bounds how long send_message and delegate wait for a
	// reply (default 10 min).
	MessageTimeout time.Duration
}

// Storage opens and removes agents' databases held elsewhere than in
// SQLite files on the data volume.
type Storage interface {
	// Open opens agent a's database, its schema brought to this build's.
	Open(ctx context.Context, a agents.Agent) (durable.DB, error)
	// Remove deletes a deleted agent's database.
	Remove(ctx context.Context, a agents.Agent) error
}

// Errors the host's callers branch on.
var (
	// ErrUnavailable wraps the error of storage that does not open.
	ErrUnavailable = errors.New("the session database could not be opened")
	// ErrClosedMeanwhile is returned by a change of the registry when
	// storage closed between opening it and taking the lock; try again.
	ErrClosedMeanwhile = errors.New("storage closed meanwhile; try again")
)

// Host hosts the sandbox's agents.
type Host struct {
	cfg      Config
	tools    []durable.Tool // an owner agent's tools: the configured ones and corpus_search
	registry agents.Registry
	deltas   deltaHub // replies as they stream, to the subscribers

	// mu is held while storage opens or closes (all agents at once) and
	// guards wakeTimer. rtMu guards rts alone, so a tool delivering a
	// message never waits on mu, which a closing harness's steps would.
	mu        sync.Mutex
	wakeTimer *time.Timer
	closing   atomic.Bool
	rtMu      sync.RWMutex
	rts       map[string]*Runtime // by agent name; nil while storage is closed

	dues      dueBoard
	migrating atomic.Bool // MigrateStorage runs (Pause answers busy)
}

var _ agents.Hub = (*Host)(nil)

// New returns a host. If the status cache says storage was open when the
// process last stopped (a crash), storage opens at once so unfinished work
// resumes without waiting for a request.
func New(cfg Config) *Host {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.User == nil {
		cfg.User = func() string { return "" }
	}
	if cfg.Corpus == nil {
		cfg.Corpus = &corpus.Corpus{Dir: filepath.Join(filepath.Dir(cfg.SessionDB), "corpus")}
	}
	if cfg.MessageTimeout <= 0 {
		cfg.MessageTimeout = 10 * time.Minute
	}
	s := &Host{cfg: cfg}
	s.tools = append(append([]durable.Tool(nil), cfg.Harness.Tools...), citations.Tool(cfg.Corpus))
	s.dues.report = cfg.Harness.OnScheduled
	if st, err := s.readStatus(); err == nil && st.StorageOpen {
		if _, err := s.storage(context.Background(), agents.Main); err != nil {
			cfg.Log.Error("reopen storage after an unclean stop", "err", err)
		}
	}
	return s
}

// Runtime returns the runtime of the agent called name, opening every
// agent's storage first if it is closed: agents.ErrNoAgent for no such
// agent, an error wrapping ErrUnavailable when storage does not open.
func (s *Host) Runtime(ctx context.Context, name string) (*Runtime, error) {
	rt, err := s.storage(ctx, name)
	if err != nil && !errors.Is(err, agents.ErrNoAgent) {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return rt, err
}

// storage returns the runtime of the agent called name, opening every
// agent's storage first if it is closed (agents.ErrNoAgent for no such agent).
func (s *Host) storage(ctx context.Context, name string) (*Runtime, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropLostLocked()
	if s.runtimes() == nil {
		if err := s.openAll(ctx); err != nil {
			return nil, err
		}
	}
	rt := s.runtimes()[name]
	if rt == nil {
		return nil, fmt.Errorf("agent %q: %w", name, agents.ErrNoAgent)
	}
	return rt, nil
}

// dropLostLocked closes every agent's storage if one's was lost (its
// lease taken, or a commit's outcome unknown: durable.Fatal), so the next
// call opens them again and recovers from the last commit, as a restarted
// process would; a newer process holding the lease makes that open fail
// instead (ErrLocked), never take it back. Caller holds s.mu.
func (s *Host) dropLostLocked() {
	rts := s.runtimes()
	lost := false
	for _, rt := range rts {
		select {
		case <-rt.Harness.Store().Failed():
			lost = true
			s.cfg.Log.Warn("an agent's storage was lost: closing and reopening every agent's", "agent", rt.Agent.Name, "err", rt.Harness.Store().Err())
		default:
		}
	}
	if !lost {
		return
	}
	s.setRuntimes(nil)
	for _, rt := range rts {
		if err := rt.Harness.Close(); err != nil {
			s.cfg.Log.Error("close an agent after its storage was lost", "agent", rt.Agent.Name, "err", err)
		}
	}
}

// closeStorage closes every agent's harness and records the status cache;
// it returns the next due time of the work they leave behind. Caller holds s.mu.
func (s *Host) closeStorage(ctx context.Context) (time.Time, error) {
	rts := s.runtimes()
	if rts == nil {
		st, _ := s.readStatus()
		if st.NextWakeAt != nil {
			return *st.NextWakeAt, nil
		}
		return time.Time{}, nil
	}
	due, err := s.nextDueAt(ctx)
	if err != nil {
		return time.Time{}, err
	}
	s.writeStatus(ctx, true) // counts while still open
	s.closing.Store(true)
	defer s.closing.Store(false)
	var errs []error
	for _, rt := range rts {
		if err := rt.Harness.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close agent %s: %w", rt.Agent.Name, err))
		}
	}
	s.setRuntimes(nil)
	s.writeStatus(ctx, false)
	if err := errors.Join(errs...); err != nil {
		return time.Time{}, err
	}
	s.cfg.Log.Info("storage closed")
	return due, nil
}

// Close closes storage (on shutdown).
func (s *Host) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.closeStorage(context.Background())
	return err
}
