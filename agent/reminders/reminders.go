// Package reminders gives the agent reminders that fire on time even when
// its sandbox sleeps: a reminder is a sleeping task whose deadline is
// stored, so the host (the manager) can wake the sandbox for it. When due it
// writes a reminder entry in its conversation, then hands a notification to
// the gateway (at least once: the entry is written first, the hand-off is
// retried with stored backoff).
package reminders

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/internal/gatewayapi"
)

// Kind is the task kind name.
const Kind = "reminder"

// Notifier hands a notification to the manager. Its key makes it idempotent.
type Notifier func(ctx context.Context, n gatewayapi.Notification) error

type checkpoint struct {
	// Key names the notification: random and stored with the reminder, so
	// it stays unique after a reset starts task ids again.
	Key     string    `json:"key,omitempty"`
	Text    string    `json:"text"`
	Due     time.Time `json:"due"`
	Kind    string    `json:"kind,omitempty"`  // gatewayapi's Kind constants ("" before kinds)
	Agent   string    `json:"agent,omitempty"` // the agent it is from, if known
	Phase   string    `json:"phase"`           // "wait", then "notify"
	Late    bool      `json:"late,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
}

// Task runs reminders.
type Task struct {
	Notify Notifier
	// MaxAttempts bounds hand-offs to the gateway (default 10, backoff 2 s doubling to 5 min).
	MaxAttempts int
}

// Step fires the reminder, then notifies.
func (k Task) Step(ctx context.Context, sc *durable.StepContext, t durable.Task) (durable.StepResult, error) {
	h := sc.Harness()
	var cp checkpoint
	if err := json.Unmarshal(t.Checkpoint, &cp); err != nil {
		return durable.StepResult{}, err
	}
	now := h.Now()
	switch cp.Phase {
	case "wait":
		id, err := h.Store().MintID()
		if err != nil {
			return durable.StepResult{}, err
		}
		text := "Reminder: " + cp.Text
		data, _ := json.Marshal(map[string]any{"task_id": t.ID, "due": cp.Due, "fired": now, "late_ms": now.Sub(cp.Due).Milliseconds()})
		cp.Phase = "notify"
		t.State, t.Deadline = durable.Running, nil
		t.Checkpoint, _ = json.Marshal(cp)
		return durable.StepResult{Task: t, Entries: []durable.Entry{{ID: id, ConversationID: t.ConversationID,
			Kind: durable.ReminderEntry, Text: text, At: now, RunID: t.ID, Data: data}}}, nil
	case "notify":
		key := cp.Key
		if key == "" { // stored by an agent before keys were random
			key = fmt.Sprintf("reminder-%d", t.ID)
		}
		err := k.Notify(ctx, gatewayapi.Notification{Key: key, Text: cp.Text, DueAt: &cp.Due, Kind: cp.Kind, Agent: cp.Agent})
		if err == nil {
			t.State, t.Outcome, t.Deadline = durable.Terminal, durable.Completed, nil
			return durable.StepResult{Task: t}, nil
		}
		if ctx.Err() != nil {
			return durable.StepResult{}, ctx.Err()
		}
		max := k.MaxAttempts
		if max == 0 {
			max = 10
		}
		cp.Attempt++
		if cp.Attempt >= max {
			t.State, t.Outcome, t.Error = durable.Terminal, durable.Failed, "notification not handed over: "+err.Error()
			return durable.StepResult{Task: t}, nil
		}
		delay := min(2*time.Second<<(cp.Attempt-1), 5*time.Minute)
		due := now.Add(delay)
		t.State, t.Deadline = durable.Sleeping, &due
		t.Checkpoint, _ = json.Marshal(cp)
		return durable.StepResult{Task: t}, nil
	}
	return durable.StepResult{}, fmt.Errorf("reminder: unknown phase %q", cp.Phase)
}

// ParseWhen reads an "at" time (RFC 3339) or an "after" duration (Go
// syntax, e.g. 20s, 90m, 1h30m) into an absolute time.
func ParseWhen(now time.Time, at, after string) (time.Time, error) {
	switch {
	case at != "" && after != "":
		return time.Time{}, errors.New("give either at or after, not both")
	case at != "":
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return time.Time{}, fmt.Errorf("at must be an RFC 3339 time such as 2026-12-01T15:00:00Z: %v", err)
		}
		return t.UTC(), nil
	case after != "":
		d, err := time.ParseDuration(after)
		if err != nil {
			return time.Time{}, fmt.Errorf("after must be a duration such as 20s, 15m or 2h: %v", err)
		}
		if d < 0 {
			return time.Time{}, errors.New("after must not be negative")
		}
		return now.Add(d).UTC(), nil
	}
	return time.Time{}, errors.New("give at (a time) or after (a duration)")
}

// Tools returns set_reminder, list_reminders and cancel_reminder.
func Tools() []durable.Tool {
	return []durable.Tool{
		{
			Name:        "set_reminder",
			Description: "Set a reminder for a time (at, RFC 3339) or after a duration (after, e.g. 20m). It fires even if the sandbox sleeps, and notifies the owner.",
			Parameters:  durable.Schema(`"text":{"type":"string"},"at":{"type":"string"},"after":{"type":"string"}`, "text"),
			Execute: func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
				var a struct{ Text, At, After string }
				if err := json.Unmarshal(args, &a); err != nil {
					return durable.ToolResult{}, fmt.Errorf("invalid arguments: %w", err)
				}
				if strings.TrimSpace(a.Text) == "" {
					return durable.ToolResult{}, errors.New("text is required")
				}
				due, err := ParseWhen(c.Now, a.At, a.After)
				if err != nil {
					return durable.ToolResult{}, err
				}
				cp := checkpoint{Key: newKey("reminder"), Text: a.Text, Due: due, Kind: gatewayapi.KindReminder, Phase: "wait", Late: due.Before(c.Now)}
				raw, _ := json.Marshal(cp)
				out := fmt.Sprintf("Reminder set for %s: %s", due.Format(time.RFC3339), a.Text)
				if cp.Late {
					out = fmt.Sprintf("%s is in the past, so the reminder fires now: %s", due.Format(time.RFC3339), a.Text)
				}
				return durable.ToolResult{Output: out, Tasks: []durable.Task{{Kind: Kind, State: durable.Sleeping, Deadline: &due, Checkpoint: raw, Background: true}}}, nil
			},
		},
		{
			Name:        "list_reminders",
			Description: "List the reminders that have not fired yet.",
			Parameters:  durable.Schema(""),
			Safe:        true,
			ReadOnly:    true,
			Execute: func(ctx context.Context, c durable.ToolCallContext, _ json.RawMessage) (durable.ToolResult, error) {
				list, err := Pending(ctx, c.Store)
				if err != nil {
					return durable.ToolResult{}, err
				}
				var b strings.Builder
				for _, r := range list {
					fmt.Fprintf(&b, "%d\t%s\t%s\n", r.ID, r.Due.Format(time.RFC3339), r.Text)
				}
				if b.Len() == 0 {
					return durable.ToolResult{Output: "no pending reminders"}, nil
				}
				return durable.ToolResult{Output: "id\tdue\ttext\n" + b.String()}, nil
			},
		},
		{
			Name:        "cancel_reminder",
			Description: "Cancel a pending reminder by its id (from list_reminders).",
			Parameters:  durable.Schema(`"id":{"type":"string"}`, "id"),
			// Its one effect, the update, is committed with its result: run
			// again, it cancels what is stored then.
			Safe: true,
			Execute: func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
				id, err := durable.IDArgument(args, "a reminder id from list_reminders")
				if err != nil {
					return durable.ToolResult{}, err
				}
				read, t, text, err := Cancel(ctx, c.Store, id, c.Now)
				if err != nil {
					return durable.ToolResult{}, err
				}
				return durable.ToolResult{Output: fmt.Sprintf("cancelled reminder %d: %s", id, text),
					Updates: []durable.TaskUpdate{{Read: read, Write: t}}}, nil
			},
		},
	}
}

// Reminder is one reminder that has not fired.
type Reminder struct {
	ID             int64     `json:"id"`
	ConversationID int64     `json:"conversation_id"`
	Due            time.Time `json:"due"`
	Text           string    `json:"text"`
}

// Pending lists the reminders that have not fired, oldest first.
func Pending(ctx context.Context, s *durable.Store) ([]Reminder, error) {
	live, err := s.LiveTasks(ctx)
	if err != nil {
		return nil, err
	}
	out := []Reminder{}
	for _, t := range live {
		var cp checkpoint
		if t.Kind != Kind || json.Unmarshal(t.Checkpoint, &cp) != nil || cp.Phase != "wait" {
			continue
		}
		out = append(out, Reminder{ID: t.ID, ConversationID: t.ConversationID, Due: cp.Due, Text: cp.Text})
	}
	return out, nil
}

// Ended lists up to limit reminders that fired or were cancelled, the
// newest first, each with how it ended ("fired" or "cancelled") and when:
// the Reminders page's history.
func Ended(ctx context.Context, s *durable.Store, limit int) ([]EndedReminder, error) {
	p, err := s.Tasks(ctx, []durable.TaskState{durable.Terminal}, durable.Scan{Order: durable.Desc, Limit: 1000})
	if err != nil {
		return nil, err
	}
	out := []EndedReminder{}
	for _, t := range p.Items {
		var cp checkpoint
		if t.Kind != Kind || json.Unmarshal(t.Checkpoint, &cp) != nil || !strings.HasPrefix(cp.Key, "reminder-") {
			continue // not a reminder (an approval's or a job's notice)
		}
		how := "fired"
		if t.Outcome == durable.Aborted {
			how = "cancelled"
		}
		e := EndedReminder{Reminder: Reminder{ID: t.ID, ConversationID: t.ConversationID, Due: cp.Due, Text: cp.Text}, Ended: how}
		if t.EndedAt != nil {
			e.At = *t.EndedAt
		}
		if out = append(out, e); len(out) >= limit {
			break
		}
	}
	return out, nil
}

// EndedReminder is a reminder that fired or was cancelled.
type EndedReminder struct {
	Reminder
	Ended string    `json:"ended"` // "fired" or "cancelled"
	At    time.Time `json:"at"`
}

// ErrNoReminder is returned by Cancel for an id that is no reminder.
var ErrNoReminder = errors.New("no such pending reminder")

// ErrReminderDone is returned by Cancel for a reminder that has already
// fired (or was cancelled): there is nothing left to cancel.
var ErrReminderDone = errors.New("the reminder has already fired or was cancelled")

// Cancel reads reminder id's task and returns it as read, ended as
// cancelled (to commit), and its text; ErrNoReminder when there is no such
// pending reminder.
func Cancel(ctx context.Context, s *durable.Store, id int64, now time.Time) (read, cancelled durable.Task, text string, err error) {
	read, err = s.Task(ctx, id)
	if errors.Is(err, durable.ErrNotFound) {
		return read, cancelled, "", fmt.Errorf("reminder %d: %w", id, ErrNoReminder)
	} else if err != nil {
		return read, cancelled, "", err
	}
	cancelled, text, err = Cancelled(read, now)
	return read, cancelled, text, err
}

// Cancelled returns reminder task t ended as cancelled (to commit) and its
// text; ErrNoReminder when t is no pending reminder.
func Cancelled(t durable.Task, now time.Time) (durable.Task, string, error) {
	var cp checkpoint
	if t.Kind != Kind || json.Unmarshal(t.Checkpoint, &cp) != nil || !strings.HasPrefix(cp.Key, "reminder-") {
		return durable.Task{}, "", fmt.Errorf("reminder %d: %w", t.ID, ErrNoReminder)
	}
	if t.State != durable.Sleeping || cp.Phase != "wait" {
		return durable.Task{}, "", fmt.Errorf("reminder %d: %w", t.ID, ErrReminderDone)
	}
	t.State, t.Outcome, t.Error, t.Deadline, t.EndedAt = durable.Terminal, durable.Aborted, "cancelled", nil, &now
	return t, cp.Text, nil
}

// newKey returns a notification key no other reminder of this sandbox, before
// or after a reset, will have.
func newKey(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// Notice returns a task that hands one notification of kind (gatewayapi's
// Kind constants) from agent to the gateway, with the same stored retries
// as a reminder's (for an approval waiting on the owner, for example). Its
// key is random, so it is delivered once.
func Notice(kind, agent, text string, at time.Time) durable.Task {
	raw, _ := json.Marshal(checkpoint{Key: newKey("notice"), Text: text, Due: at, Kind: kind, Agent: agent, Phase: "notify"})
	return durable.Task{Kind: Kind, State: durable.Pending, Checkpoint: raw, Background: true}
}
