package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
	"github.com/affido/affido/agent/jobs"
)

// echo answers every prompt with its text.
type echo struct{}

func (echo) Stream(_ context.Context, req durable.ModelRequest, _ func(string)) (durable.ModelResponse, error) {
	return durable.ModelResponse{Text: "echo: " + req.Messages[len(req.Messages)-1].Content}, nil
}

// clock is a settable harness clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

func open(t *testing.T, path string, c *clock) *durable.Harness {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	h, err := durable.Open(ctx, st, durable.Options{Model: echo{}, DefaultModel: "m", Now: c.Now, Tools: jobs.Tools(),
		Kinds: map[string]durable.TaskKind{jobs.Kind: jobs.Task{}}})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func runs(t *testing.T, h *durable.Harness) []map[string]any {
	t.Helper()
	p, err := h.Store().Entries(context.Background(), durable.RootConversation, durable.Scan{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, e := range p.Items {
		if e.Kind == durable.JobRunEntry {
			var d map[string]any
			_ = json.Unmarshal(e.Data, &d)
			out = append(out, d)
		}
	}
	return out
}

// A job missed three times while everything was down (the store closed,
// the clock moved on) runs once on reopen and re-arms after now; its prompt
// is answered once.
func TestMissedJobRunsOnceAndRearms(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "session.db")
	start := time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC)
	c := &clock{now: start}
	h := open(t, path, c)
	task, err := jobs.New(ctx, h.Store(), durable.RootConversation, jobs.Spec{Cron: "* * * * *", Prompt: "tick"}, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 12, 2, 10, 1, 0, 0, time.UTC); !task.Deadline.Equal(want) {
		t.Fatalf("first time %v, want %v", task.Deadline, want)
	}
	if _, err := h.AddTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	c.Set(start.Add(3*time.Minute + 10*time.Second)) // 10:03:40: 10:01, 10:02, 10:03 passed
	h = open(t, path, c)
	defer h.Close()
	if err := h.Resume(); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := h.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	got := runs(t, h)
	if len(got) != 1 {
		t.Fatalf("%d runs recorded, want 1: %v", len(got), got)
	}
	if got[0]["missed"].(float64) != 2 || got[0]["late_ms"].(float64) != 160000 {
		t.Errorf("run record %v: want 2 missed and 160000 ms late", got[0])
	}
	list, err := jobs.List(ctx, h.Store())
	if err != nil || len(list) != 1 {
		t.Fatalf("jobs %v, %v", list, err)
	}
	if want := time.Date(2026, 12, 2, 10, 4, 0, 0, time.UTC); !list[0].Next.Equal(want) || list[0].Runs != 1 {
		t.Errorf("job after the run: next %v runs %d, want %v and 1", list[0].Next, list[0].Runs, want)
	}
	subs, err := h.Store().Submissions(ctx, nil, durable.Scan{Limit: 10})
	if err != nil || len(subs.Items) != 1 || subs.Items[0].Status != durable.Done || subs.Items[0].Input.Text != "tick" {
		t.Fatalf("submissions %+v, %v: want one answered 'tick'", subs.Items, err)
	}
	if due, _ := h.NextDueAt(ctx); !due.Equal(*list[0].Next) {
		t.Errorf("next due %v, want the job's next time %v", due, list[0].Next)
	}
}

// Paused jobs wait for nothing (they do not wake the sandbox); resumed ones
// are armed after now; cancelled ones are gone.
func TestPauseResumeCancel(t *testing.T) {
	ctx := context.Background()
	c := &clock{now: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)}
	h := open(t, filepath.Join(t.TempDir(), "session.db"), c)
	defer h.Close()
	task, err := jobs.New(ctx, h.Store(), durable.RootConversation, jobs.Spec{Cron: "0 9 * * 1-5", TZ: "Europe/Paris", Prompt: "standup"}, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	// 09:00 in Paris in December is 08:00 UTC; 10:00 UTC on Wednesday 2 Dec has passed it.
	if want := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC); !task.Deadline.Equal(want) {
		t.Fatalf("first time %v, want %v", task.Deadline, want)
	}
	task, err = h.AddTask(ctx, task)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Commit(ctx, durable.Writes{Tasks: []durable.Task{jobs.Paused(task)}}); err != nil {
		t.Fatal(err)
	}
	if due, _ := h.NextDueAt(ctx); !due.IsZero() {
		t.Errorf("a paused job still wakes the agent at %v", due)
	}
	pt, j, err := jobs.Get(ctx, h.Store(), task.ID)
	if err != nil || j.State != "paused" || j.Next != nil {
		t.Fatalf("paused job %+v, %v", j, err)
	}
	c.Set(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC))
	rt, err := jobs.Resumed(pt, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC); !rt.Deadline.Equal(want) {
		t.Errorf("resumed at %v, want %v", rt.Deadline, want)
	}
	if err := h.Commit(ctx, durable.Writes{Tasks: []durable.Task{jobs.Cancelled(rt, c.Now())}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := jobs.Get(ctx, h.Store(), task.ID); !errors.Is(err, jobs.ErrNoJob) {
		t.Errorf("cancelled job: %v, want ErrNoJob", err)
	}
}

// What was tried: every malformed spec is refused with ErrInvalid.
func TestInvalidSpecs(t *testing.T) {
	for _, s := range []jobs.Spec{
		{Cron: "* * * * *"},                                  // no prompt
		{Cron: "not cron", Prompt: "x"},                      // unparseable
		{Cron: "* * * * * *", Prompt: "x"},                   // six fields (seconds are not offered)
		{Cron: "61 * * * *", Prompt: "x"},                    // out of range
		{Cron: "CRON_TZ=UTC * * * * *", Prompt: "x"},         // zone in the expression
		{Cron: "* * * * *", TZ: "Mars/Olympus", Prompt: "x"}, // unknown zone
		{Cron: "0 0 30 2 *", Prompt: "x"},                    // 30 February never comes
	} {
		err := s.Validate()
		if err == nil {
			_, err = jobs.New(context.Background(), nil, 1, s, time.Now())
		}
		if !errors.Is(err, jobs.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", s, err)
		}
	}
}

// asker is a policy under which every tool asks the owner.
type asker struct{}

func (asker) Check(context.Context, durable.PolicyQuery) (durable.Verdict, error) {
	return durable.Verdict{Effect: durable.Ask, Reason: "asks"}, nil
}

// callsTool answers every prompt with a call of "poke".
type callsTool struct{}

func (callsTool) Stream(_ context.Context, req durable.ModelRequest, _ func(string)) (durable.ModelResponse, error) {
	if req.Messages[len(req.Messages)-1].Role == "tool" {
		return durable.ModelResponse{Text: "poked"}, nil
	}
	return durable.ModelResponse{ToolCalls: []durable.ToolCall{{ID: "c1", Name: "poke", Arguments: json.RawMessage(`{}`)}}}, nil
}

// A job whose run waits for the owner skips its later times instead of
// queueing runs behind it, and leaves nothing due now, so the sandbox may
// sleep until its next time (what was tried: three times pass while the
// first run waits).
func TestJobSkipsWhileItsRunWaits(t *testing.T) {
	ctx := context.Background()
	c := &clock{now: time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC)}
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "session.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	poke := durable.Tool{Name: "poke", Execute: func(context.Context, durable.ToolCallContext, json.RawMessage) (durable.ToolResult, error) {
		return durable.ToolResult{Output: "ok"}, nil
	}}
	h, err := durable.Open(ctx, st, durable.Options{Model: callsTool{}, DefaultModel: "m", Now: c.Now, Tools: []durable.Tool{poke},
		Policy: asker{}, Kinds: map[string]durable.TaskKind{jobs.Kind: jobs.Task{}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Resume(); err != nil {
		t.Fatal(err)
	}
	task, err := jobs.New(ctx, st, durable.RootConversation, jobs.Spec{Cron: "* * * * *", Prompt: "poke it"}, c.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AddTask(ctx, task); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for minute := 1; minute <= 3; minute++ {
		c.Set(time.Date(2026, 12, 2, 10, minute, 1, 0, time.UTC))
		h.Wake()
		for {
			if len(runs(t, h)) >= minute {
				break
			}
			select {
			case <-wctx.Done():
				t.Fatalf("minute %d: the job did not step", minute)
			case <-h.Changed():
			case <-time.After(50 * time.Millisecond):
			}
		}
		if err := h.WaitIdle(wctx); err != nil {
			t.Fatal(err)
		}
	}
	got := runs(t, h)
	if got[0]["skipped"] != nil || got[1]["skipped"] != true || got[2]["skipped"] != true {
		t.Fatalf("runs %v: want the first to run and the next two skipped", got)
	}
	subs, _ := st.Submissions(ctx, nil, durable.Scan{Limit: 10})
	if len(subs.Items) != 1 {
		t.Fatalf("%d submissions, want the one run waiting", len(subs.Items))
	}
	due, _ := h.NextDueAt(ctx)
	if want := time.Date(2026, 12, 2, 10, 4, 0, 0, time.UTC); !due.Equal(want) {
		t.Fatalf("next due %v, want the job's next time %v (nothing due now while the run waits)", due, want)
	}
}
