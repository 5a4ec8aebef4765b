package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
)

// waitHarness waits, up to 30 s, until done holds, looking again at every
// change h signals. An invocation's end signals after it leaves the busy
// set; the watch starts before each look, so no signal slips between.
func waitHarness(t *testing.T, h *durable.Harness, what string, done func() bool) {
	t.Helper()
	if err := untilChanged(h, done); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// untilChanged is waitHarness for a caller that is not the test goroutine.
func untilChanged(h *durable.Harness, done func() bool) error {
	timeout := time.After(30 * time.Second)
	for changed := h.Changed(); !done(); changed = h.Changed() {
		select {
		case <-changed:
		case <-timeout:
			return errors.New("not within 30 s")
		}
	}
	return nil
}

// waitIdle waits until no invocation is in flight.
func waitIdle(t *testing.T, h *durable.Harness) {
	t.Helper()
	waitHarness(t, h, "the step's invocation never ended", func() bool { return !h.Busy() })
}

func cancelled(t durable.Task) durable.Task {
	now := time.Now().UTC()
	t.State, t.Outcome, t.Error, t.Deadline, t.EndedAt = durable.Terminal, durable.Aborted, "cancelled", nil, &now
	return t
}

// The owner ends a task (cancels a job) while its step runs. Tried: the
// change through Update, through Commit, and as a tool's Updates in another
// task's step; each time the step then finishes and would re-arm the task.
// The cancel must stand and nothing of the dropped step be stored. Before
// the harness ordered these commits, the task came back sleeping.
func TestTaskEndedDuringItsStepStaysEnded(t *testing.T) {
	ways := map[string]func(t *testing.T, h *durable.Harness, id int64){
		"Update": func(t *testing.T, h *durable.Harness, id int64) {
			got, err := h.Update(ctx, id, func(tk durable.Task) (*durable.Task, error) {
				if tk.State != durable.Running {
					t.Errorf("Update read the task %s, want running", tk.State)
				}
				c := cancelled(tk)
				return &c, nil
			})
			if err != nil || got.State != durable.Terminal {
				t.Fatalf("Update: %+v, %v", got, err)
			}
		},
		"Commit": func(t *testing.T, h *durable.Harness, id int64) {
			tk, err := h.Store().Task(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Commit(ctx, durable.Writes{Tasks: []durable.Task{cancelled(tk)}}); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, end := range ways {
		t.Run(name, func(t *testing.T) {
			g := newGated()
			e := newEnv(t, durable.Options{Kinds: map[string]durable.TaskKind{"gated": g}})
			tk := startGated(t, e, g)
			end(t, e.h, tk.ID)
			close(g.release)
			waitIdle(t, e.h)
			got, err := e.store.Task(ctx, tk.ID)
			if err != nil || got.State != durable.Terminal || got.Outcome != durable.Aborted {
				t.Fatalf("after the step: %+v, %v; want it still cancelled", got, err)
			}
			for _, en := range e.entries(1) {
				if en.Text == "the step ran" {
					t.Fatalf("the dropped step's entry was stored: %+v", en)
				}
			}
		})
	}
}

// A tool in one task's step cancels another task whose step is running
// (cancel_job while the job fires): the cancel stands.
func TestToolCancelDuringTheOtherTasksStep(t *testing.T) {
	g := newGated()
	var target int64
	cancel := durable.Tool{Name: "cancel_it", Execute: func(ctx context.Context, c durable.ToolCallContext, _ json.RawMessage) (durable.ToolResult, error) {
		tk, err := c.Store.Task(ctx, target)
		if err != nil {
			return durable.ToolResult{}, err
		}
		return durable.ToolResult{Output: "cancelled", Updates: []durable.TaskUpdate{{Read: tk, Write: cancelled(tk)}}}, nil
	}}
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return durable.ModelResponse{Text: "done"}, nil
		}
		return durable.ModelResponse{ToolCalls: []durable.ToolCall{{ID: "c1", Name: "cancel_it", Arguments: json.RawMessage(`{}`)}}}, nil
	})
	e := newEnv(t, durable.Options{Model: model, DefaultModel: "m", Tools: []durable.Tool{cancel},
		Kinds: map[string]durable.TaskKind{"gated": g}})
	tk := startGated(t, e, g)
	target = tk.ID
	sub, err := e.h.Submit(ctx, 1, durable.Input{Text: "cancel it"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.h.WaitSubmission(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	waitIdle(t, e.h)
	got, err := e.store.Task(ctx, tk.ID)
	if err != nil || got.State != durable.Terminal || got.Outcome != durable.Aborted {
		t.Fatalf("after the step: %+v, %v; want it still cancelled", got, err)
	}
	for _, en := range e.entries(1) {
		if en.Text == "the step ran" {
			t.Fatalf("the dropped step's entry was stored: %+v", en)
		}
	}
}

// fires is a task kind whose step waits for release and then ends the
// task completed with an entry, as a reminder fires.
type fires struct{ release chan struct{} }

func (k fires) Step(ctx context.Context, sc *durable.StepContext, t durable.Task) (durable.StepResult, error) {
	select {
	case <-k.release:
	case <-ctx.Done():
		return durable.StepResult{}, ctx.Err()
	}
	id, err := sc.Harness().Store().MintID()
	if err != nil {
		return durable.StepResult{}, err
	}
	t.State, t.Outcome = durable.Terminal, durable.Completed
	return durable.StepResult{Task: t, Entries: []durable.Entry{{ID: id, ConversationID: t.ConversationID,
		Kind: durable.ReminderEntry, Text: "fired", At: sc.Harness().Now(), RunID: t.ID}}}, nil
}

// A tool reads a task to cancel it (cancel_reminder), and the task fires
// and ends before the tool's result is committed. Tried: the tool returns
// its update from the copy it read. The update must not be written over the
// fired task; the call runs again, reads the task ended and says so. Before,
// the stale copy was written and the fired task was stored as cancelled.
func TestToolUpdateFromAStaleReadRunsAgain(t *testing.T) {
	k := fires{release: make(chan struct{})}
	var (
		e      *env
		target int64
		calls  atomic.Int32
	)
	cancel := durable.Tool{Name: "cancel_it", Safe: true, Execute: func(ctx context.Context, c durable.ToolCallContext, _ json.RawMessage) (durable.ToolResult, error) {
		tk, err := c.Store.Task(ctx, target)
		if err != nil {
			return durable.ToolResult{}, err
		}
		if calls.Add(1) == 1 { // the first call: the task fires after this read
			close(k.release)
			if err := untilChanged(e.h, func() bool {
				now, err := c.Store.Task(ctx, target)
				return err == nil && !now.Live()
			}); err != nil {
				return durable.ToolResult{}, fmt.Errorf("the task never fired: %w", err)
			}
		}
		if !tk.Live() {
			return durable.ToolResult{Output: "already ended: " + tk.Outcome}, nil
		}
		return durable.ToolResult{Output: "cancelled", Updates: []durable.TaskUpdate{{Read: tk, Write: cancelled(tk)}}}, nil
	}}
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		for _, m := range req.Messages { // the fired task's entry may come after the result
			if m.Role == "tool" {
				return durable.ModelResponse{Text: "tool said: " + m.Content}, nil
			}
		}
		return durable.ModelResponse{ToolCalls: []durable.ToolCall{{ID: "c1", Name: "cancel_it", Arguments: json.RawMessage(`{}`)}}}, nil
	})
	e = newEnv(t, durable.Options{Model: model, DefaultModel: "m", Tools: []durable.Tool{cancel},
		Kinds: map[string]durable.TaskKind{"fires": k}})
	tk, err := e.h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "fires", State: durable.Pending, Checkpoint: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	target = tk.ID
	sub := e.ask(1, durable.Input{Text: "cancel it"})
	if sub.Status != durable.Done {
		t.Fatalf("submission %+v", sub)
	}
	got, err := e.store.Task(ctx, tk.ID)
	if err != nil || got.State != durable.Terminal || got.Outcome != durable.Completed {
		t.Fatalf("the fired task: %+v, %v; want it completed, not cancelled", got, err)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("the tool ran %d times, want 2 (once more after its update went stale)", n)
	}
	var results []string
	for _, en := range e.entries(1) {
		if en.Kind == durable.ToolResultEntry {
			results = append(results, en.Text)
		}
	}
	if strings.Join(results, "|") != "already ended: completed" {
		t.Fatalf("tool results %q, want the one from the second call only", results)
	}
}

// gated is a task kind whose step from the checkpoint {} tells started,
// waits for release and then re-arms itself an hour on with an entry, as a
// job's step does; a step from {"again":true} ends the task with another
// entry.
type gated struct{ started, release chan struct{} }

func newGated() gated { return gated{started: make(chan struct{}), release: make(chan struct{})} }

// startGated adds a pending task of kind "gated" (g, in e's options) and
// waits until its step runs.
func startGated(t *testing.T, e *env, g gated) durable.Task {
	t.Helper()
	tk, err := e.h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "gated", State: durable.Pending, Checkpoint: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the step never started")
	}
	return tk
}

func (k gated) Step(ctx context.Context, sc *durable.StepContext, t durable.Task) (durable.StepResult, error) {
	var cp struct{ Again bool }
	_ = json.Unmarshal(t.Checkpoint, &cp)
	id, err := sc.Harness().Store().MintID()
	if err != nil {
		return durable.StepResult{}, err
	}
	entry := durable.Entry{ID: id, ConversationID: t.ConversationID, Kind: durable.ReminderEntry, At: sc.Harness().Now(), RunID: t.ID}
	if cp.Again {
		t.State, t.Outcome = durable.Terminal, durable.Completed
		entry.Text = "ran from the new checkpoint"
		return durable.StepResult{Task: t, Entries: []durable.Entry{entry}}, nil
	}
	close(k.started)
	select {
	case <-k.release:
	case <-ctx.Done():
		return durable.StepResult{}, ctx.Err()
	}
	next := sc.Harness().Now().Add(time.Hour)
	t.State, t.Deadline = durable.Sleeping, &next
	entry.Text = "the step ran"
	return durable.StepResult{Task: t, Entries: []durable.Entry{entry}}, nil
}

// An outside change that leaves the task ready (here: a new checkpoint,
// pending) drops the running step's work, and the task then runs again
// from what the change stored.
func TestTaskChangedDuringItsStepRunsFromTheChange(t *testing.T) {
	k := newGated()
	e := newEnv(t, durable.Options{Kinds: map[string]durable.TaskKind{"gated": k}})
	tk := startGated(t, e, k)
	if _, err := e.h.Update(ctx, tk.ID, func(tk durable.Task) (*durable.Task, error) {
		tk.State, tk.Checkpoint = durable.Pending, json.RawMessage(`{"again":true}`)
		return &tk, nil
	}); err != nil {
		t.Fatal(err)
	}
	close(k.release)
	var got durable.Task
	waitHarness(t, e.h, "the changed task never ran again", func() bool {
		var err error
		got, err = e.store.Task(ctx, tk.ID)
		return err == nil && got.State == durable.Terminal && !e.h.Busy()
	})
	if got.Outcome != durable.Completed {
		t.Fatalf("ended %s, want completed", got.Outcome)
	}
	var texts []string
	for _, en := range e.entries(1) {
		texts = append(texts, en.Text)
	}
	if strings.Join(texts, "|") != "ran from the new checkpoint" {
		t.Fatalf("entries %q, want only the run from the new checkpoint", texts)
	}
}

// Update of a task that is not there writes nothing and says so; a change
// that returns nil writes nothing; a change's error is returned as is.
func TestUpdateBadInput(t *testing.T) {
	e := newEnv(t, durable.Options{})
	if _, err := e.h.Update(ctx, 424242, func(tk durable.Task) (*durable.Task, error) {
		t.Error("change called for a missing task")
		return nil, nil
	}); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("missing task: %v, want ErrNotFound", err)
	}
	due := time.Now().Add(time.Hour).UTC()
	tk, err := e.h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "nothing", State: durable.Sleeping, Deadline: &due, Checkpoint: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.h.Update(ctx, tk.ID, func(durable.Task) (*durable.Task, error) { return nil, nil }); err != nil || got.State != durable.Sleeping {
		t.Fatalf("no change: %+v, %v", got, err)
	}
	boom := errors.New("refused")
	if _, err := e.h.Update(ctx, tk.ID, func(tk durable.Task) (*durable.Task, error) {
		c := cancelled(tk)
		return &c, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("change's error: %v", err)
	}
	if got, _ := e.store.Task(ctx, tk.ID); got.State != durable.Sleeping {
		t.Fatalf("a refused change was written: %+v", got)
	}
}

// failTaskRead fails the next read of one task by ID once armed.
type failTaskRead struct {
	durable.DB
	armed atomic.Bool
}

func (f *failTaskRead) Get(ctx context.Context, sql string, args ...any) (durable.Row, error) {
	if strings.HasPrefix(sql, "SELECT record FROM tasks WHERE id") && f.armed.CompareAndSwap(true, false) {
		return nil, errors.New("injected read failure")
	}
	return f.DB.Get(ctx, sql, args...)
}

// done is a task kind that ends at its first step.
type done struct{}

func (done) Step(ctx context.Context, sc *durable.StepContext, t durable.Task) (durable.StepResult, error) {
	t.State, t.Outcome = durable.Terminal, durable.Completed
	return durable.StepResult{Task: t}, nil
}

// An invocation whose first read of its task fails (tried: one injected
// read error) gives the task back to the scheduler, which runs it again.
// Before, the failed read left the task marked in flight for good: it never
// ran, and the harness said it was busy for ever.
func TestTaskRunsAfterItsReadFailed(t *testing.T) {
	db := &failTaskRead{DB: openDB(t, filepath.Join(t.TempDir(), "session.db"))}
	s, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	h, err := durable.Open(ctx, s, durable.Options{Model: echo, DefaultModel: "test/echo", Kinds: map[string]durable.TaskKind{"done": done{}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if err := h.Resume(); err != nil {
		t.Fatal(err)
	}
	db.armed.Store(true)
	tk, err := h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "done", State: durable.Pending, Checkpoint: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	waitHarness(t, h, "the task never ran after its failed read", func() bool {
		if db.armed.Load() { // the harness's read has not failed yet: this one would
			return false
		}
		got, err := s.Task(ctx, tk.ID)
		return err == nil && got.State == durable.Terminal && !h.Busy()
	})
}
