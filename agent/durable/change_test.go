package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
)

// gated is a task kind whose step tells started and then waits for
// release before it re-arms itself an hour on with an entry, as a job's
// step does.
type gated struct{ started, release chan struct{} }

func (g gated) Step(ctx context.Context, sc *durable.StepContext, t durable.Task) (durable.StepResult, error) {
	close(g.started)
	select {
	case <-g.release:
	case <-ctx.Done():
		return durable.StepResult{}, ctx.Err()
	}
	id, err := sc.Harness().Store().MintID()
	if err != nil {
		return durable.StepResult{}, err
	}
	next := sc.Harness().Now().Add(time.Hour)
	t.State, t.Deadline = durable.Sleeping, &next
	return durable.StepResult{Task: t, Entries: []durable.Entry{{ID: id, ConversationID: t.ConversationID,
		Kind: durable.ReminderEntry, Text: "the step ran", At: sc.Harness().Now(), RunID: t.ID}}}, nil
}

// waitIdle waits until no invocation is in flight. An invocation's end
// notifies after it leaves the busy set; watch before looking, so that
// notification cannot slip between the two.
func waitIdle(t *testing.T, h *durable.Harness) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for changed := h.Changed(); h.Busy(); changed = h.Changed() {
		select {
		case <-changed:
		case <-timeout:
			t.Fatal("the step's invocation never ended")
		}
	}
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
			g := gated{started: make(chan struct{}), release: make(chan struct{})}
			e := newEnv(t, durable.Options{Kinds: map[string]durable.TaskKind{"gated": g}})
			tk, err := e.h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "gated", State: durable.Pending, Checkpoint: json.RawMessage(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-g.started:
			case <-time.After(30 * time.Second):
				t.Fatal("the step never started")
			}
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
	g := gated{started: make(chan struct{}), release: make(chan struct{})}
	var target int64
	cancel := durable.Tool{Name: "cancel_it", Execute: func(ctx context.Context, c durable.ToolCallContext, _ json.RawMessage) (durable.ToolResult, error) {
		tk, err := c.Store.Task(ctx, target)
		if err != nil {
			return durable.ToolResult{}, err
		}
		return durable.ToolResult{Output: "cancelled", Updates: []durable.Task{cancelled(tk)}}, nil
	}}
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			return durable.ModelResponse{Text: "done"}, nil
		}
		return durable.ModelResponse{ToolCalls: []durable.ToolCall{{ID: "c1", Name: "cancel_it", Arguments: json.RawMessage(`{}`)}}}, nil
	})
	e := newEnv(t, durable.Options{Model: model, DefaultModel: "m", Tools: []durable.Tool{cancel},
		Kinds: map[string]durable.TaskKind{"gated": g}})
	tk, err := e.h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "gated", State: durable.Pending, Checkpoint: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	target = tk.ID
	select {
	case <-g.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the step never started")
	}
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
	timeout := time.After(30 * time.Second)
	for changed := h.Changed(); ; changed = h.Changed() {
		var got durable.Task
		if !db.armed.Load() { // the harness's read has failed: this one may not
			if got, err = s.Task(ctx, tk.ID); err == nil && got.State == durable.Terminal && !h.Busy() {
				break
			}
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("the task after a failed read: %+v, %v; busy %v; failure still armed %v", got, err, h.Busy(), db.armed.Load())
		}
	}
}
