package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
)

// fnModel is a model scripted by a function of the request.
type fnModel func(req durable.ModelRequest) (durable.ModelResponse, error)

func (f fnModel) Stream(ctx context.Context, req durable.ModelRequest, _ func(string)) (durable.ModelResponse, error) {
	return f(req)
}

func lastUser(req durable.ModelRequest) string {
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			return req.Messages[i].Content
		}
	}
	return ""
}

func lastMsg(req durable.ModelRequest) durable.Message { return req.Messages[len(req.Messages)-1] }

// echo answers "echo: <text>" and calls the tool named in "call <tool> <json>".
var echo = fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
	last := lastMsg(req)
	if last.Role == "tool" {
		return durable.ModelResponse{Text: "tool said: " + last.Content, Usage: durable.TokenUsage{InputTokens: 7, OutputTokens: 3}}, nil
	}
	text := lastUser(req)
	if i := strings.Index(text, "] call "); i >= 0 {
		name, args, _ := strings.Cut(text[i+7:], " ")
		return durable.ModelResponse{ToolCalls: []durable.ToolCall{{ID: "c1", Name: name, Arguments: json.RawMessage(args)}}}, nil
	}
	_, body, _ := strings.Cut(text, "] ")
	return durable.ModelResponse{Text: "echo: " + body, Usage: durable.TokenUsage{InputTokens: 5, OutputTokens: 2}}, nil
})

type env struct {
	t     *testing.T
	path  string
	opts  durable.Options
	h     *durable.Harness
	store *durable.Store
}

func newEnv(t *testing.T, opts durable.Options) *env {
	e := &env{t: t, path: filepath.Join(t.TempDir(), "session.db"), opts: opts}
	e.open()
	t.Cleanup(func() { e.h.Close() })
	return e
}

func (e *env) open() {
	e.t.Helper()
	s, err := durable.OpenStore(ctx, openDB(e.t, e.path))
	if err != nil {
		e.t.Fatal(err)
	}
	if e.opts.Model == nil {
		e.opts.Model = echo
	}
	if e.opts.DefaultModel == "" {
		e.opts.DefaultModel = "test/echo"
	}
	h, err := durable.Open(ctx, s, e.opts)
	if err != nil {
		e.t.Fatal(err)
	}
	e.h, e.store = h, s
	if err := h.Resume(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) reopen() {
	e.t.Helper()
	e.h.Close()
	e.open()
}

func (e *env) ask(conv int64, in durable.Input) durable.Submission {
	e.t.Helper()
	sub, err := e.h.Submit(ctx, conv, in)
	if err != nil {
		e.t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sub, err = e.h.WaitSubmission(wctx, sub.ID)
	if err != nil {
		e.t.Fatalf("wait for submission: %v", err)
	}
	return sub
}

func (e *env) entries(conv int64) []durable.Entry {
	e.t.Helper()
	p, err := e.store.Entries(ctx, conv, durable.Scan{Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	return p.Items
}

func kinds(es []durable.Entry) string {
	var k []string
	for _, e := range es {
		k = append(k, string(e.Kind))
	}
	return strings.Join(k, ",")
}

func TestSubmitAnswers(t *testing.T) {
	e := newEnv(t, durable.Options{})
	sub := e.ask(1, durable.Input{Text: "hello"})
	if sub.Status != durable.Done || sub.AnswerEntryID == 0 {
		t.Fatalf("submission %+v", sub)
	}
	es := e.entries(1)
	if kinds(es) != "owner_message,assistant_message" || es[1].Text != "echo: hello" || es[1].Model != "test/echo" {
		t.Fatalf("entries %s %+v", kinds(es), es)
	}
	task, _ := e.store.Task(ctx, sub.TaskID)
	if task.State != durable.Terminal || task.Outcome != durable.Completed {
		t.Fatalf("task %+v", task)
	}
	u, _ := e.store.Usage(ctx, 1)
	if u.Models["test/echo"].Calls != 1 || u.Models["test/echo"].InputTokens != 5 {
		t.Fatalf("usage %+v", u)
	}
}

func TestToolLoopAndContext(t *testing.T) {
	var calls atomic.Int32
	var second durable.ModelRequest
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		if calls.Add(1) == 2 {
			second = req
		}
		return echo(req)
	})
	add := durable.Tool{Name: "add", Safe: true, Execute: func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
		var a struct{ A, B int }
		if err := json.Unmarshal(args, &a); err != nil {
			return durable.ToolResult{}, err
		}
		return durable.ToolResult{Output: fmt.Sprint(a.A + a.B)}, nil
	}}
	e := newEnv(t, durable.Options{Model: model, Tools: []durable.Tool{add}, System: "You are a test."})
	sub := e.ask(1, durable.Input{Text: `call add {"A":2,"B":3}`})
	es := e.entries(1)
	if kinds(es) != "owner_message,assistant_message,tool_call,tool_result,assistant_message" {
		t.Fatalf("entries %s", kinds(es))
	}
	if es[3].Text != "5" || es[4].Text != "tool said: 5" || sub.AnswerEntryID != es[4].ID {
		t.Fatalf("tool result %q answer %q", es[3].Text, es[4].Text)
	}
	// The second request: system first (no time in it), the owner message
	// with its time in brackets, the call, then its result.
	roles := []string{}
	for _, m := range second.Messages {
		roles = append(roles, m.Role)
	}
	if strings.Join(roles, ",") != "system,user,assistant,tool" {
		t.Fatalf("roles %v", roles)
	}
	if second.Messages[0].Content != "You are a test." {
		t.Fatalf("system prompt %q", second.Messages[0].Content)
	}
	if !strings.HasPrefix(second.Messages[1].Content, "["+es[0].At.UTC().Format("2006-01-02 15:04")) {
		t.Fatalf("owner message without its time: %q", second.Messages[1].Content)
	}
	if second.Messages[3].ToolCallID != "c1" || second.Messages[3].Content != "5" {
		t.Fatalf("tool message %+v", second.Messages[3])
	}
	if u, _ := e.store.Usage(ctx, 1); u.Tools["add"] != 1 {
		t.Fatalf("tool usage %+v", u)
	}
}

func TestRequestIDIsIdempotentAcrossRestart(t *testing.T) {
	var calls atomic.Int32
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		calls.Add(1)
		return echo(req)
	})
	e := newEnv(t, durable.Options{Model: model})
	a := e.ask(1, durable.Input{Text: "once", RequestID: "r-1"})
	b, err := e.h.Submit(ctx, 1, durable.Input{Text: "once", RequestID: "r-1"})
	if err != nil || b.ID != a.ID {
		t.Fatalf("repeat: %+v %v", b, err)
	}
	e.reopen()
	c, err := e.h.Submit(ctx, 1, durable.Input{Text: "once again?", RequestID: "r-1"})
	if err != nil || c.ID != a.ID || c.Status != durable.Done {
		t.Fatalf("after restart: %+v %v", c, err)
	}
	if err := e.h.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("model called %d times for one requestId", n)
	}
	if got := kinds(e.entries(1)); got != "owner_message,assistant_message" {
		t.Fatalf("entries %s", got)
	}
}

func TestConcurrentSubmitsAreAllAdmittedOnce(t *testing.T) {
	e := newEnv(t, durable.Options{})
	var wg sync.WaitGroup
	ids := make([]int64, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub, err := e.h.Submit(ctx, 1, durable.Input{Text: fmt.Sprint("m", i%20), RequestID: fmt.Sprint("r", i%20)})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = sub.ID
		}()
	}
	wg.Wait()
	for i := range 20 {
		if ids[i] != ids[i+20] {
			t.Fatalf("requestId r%d admitted twice: %d and %d", i, ids[i], ids[i+20])
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, id := range ids[:20] {
		if s, err := e.h.WaitSubmission(wctx, id); err != nil || s.Status != durable.Done {
			t.Fatalf("submission %d: %+v %v", id, s, err)
		}
	}
	if n := len(e.entries(1)); n != 40 {
		t.Fatalf("%d entries, want 40 (20 questions, 20 answers)", n)
	}
	// One run at a time per conversation: each answer follows its question.
	es := e.entries(1)
	for i := 0; i < len(es); i += 2 {
		if es[i].Kind != durable.OwnerMessage || es[i+1].Text != "echo: "+es[i].Text {
			t.Fatalf("entries %d,%d interleaved: %q / %q", i, i+1, es[i].Text, es[i+1].Text)
		}
	}
}

func TestTransientErrorsSleepThenRetry(t *testing.T) {
	var calls atomic.Int32
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		if calls.Add(1) <= 2 {
			return durable.ModelResponse{}, durable.Transient(errors.New("429 slow down"))
		}
		return echo(req)
	})
	var mu sync.Mutex
	var scheduled []time.Time
	e := newEnv(t, durable.Options{Model: model, Retry: durable.RetryPolicy{Base: time.Second, Cap: 2 * time.Second},
		OnScheduled: func(at time.Time) { mu.Lock(); scheduled = append(scheduled, at); mu.Unlock() }})
	sub, _ := e.h.Submit(ctx, 1, durable.Input{Text: "retry me"})
	// While it waits, the wait is a stored sleeping task with its deadline.
	deadline := time.Now().Add(30 * time.Second)
	var sleeping durable.Task
	for time.Now().Before(deadline) {
		if tk, _ := e.store.Task(ctx, sub.TaskID); tk.State == durable.Sleeping {
			sleeping = tk
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if sleeping.Deadline == nil {
		t.Fatal("the retry wait was never stored as a sleeping task")
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if s, err := e.h.WaitSubmission(wctx, sub.ID); err != nil || s.Status != durable.Done {
		t.Fatalf("%+v %v", s, err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("model called %d times, want 3", n)
	}
	// Each retry is said in the conversation, with its reason; the context
	// does not carry them (the third call saw only the prompt).
	var retries []string
	for _, x := range e.entries(1) {
		if x.Kind == durable.RetryEntry {
			retries = append(retries, x.Text)
		}
	}
	if len(retries) != 2 || !strings.Contains(retries[0], "429 slow down") || !strings.Contains(retries[1], "attempt 3 of") {
		t.Fatalf("retry entries %q", retries)
	}
	mu.Lock()
	defer mu.Unlock()
	found := false
	for _, at := range scheduled {
		found = found || at.Equal(*sleeping.Deadline)
	}
	if !found {
		t.Fatalf("OnScheduled never got the retry deadline %v (got %v)", sleeping.Deadline, scheduled)
	}
}

// A run that sleeps before a retry while another submission waits behind
// it in the conversation is woken at its deadline: the queued one, which
// cannot run before it ends, is not "due now" (that left no timer armed,
// and both waited until something else woke the scheduler: a recovery run
// of the crash suite once sat idle like this for 15 minutes). The host is
// told the deadline, and the harness is idle until then.
func TestARetryWithWorkQueuedBehindItWakes(t *testing.T) {
	var calls atomic.Int32
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		if calls.Add(1) == 1 {
			return durable.ModelResponse{}, durable.Transient(errors.New("429 slow down"))
		}
		return echo(req)
	})
	clock := &fakeClock{now: time.Now().UTC()}
	var mu sync.Mutex
	var scheduled []time.Time
	e := newEnv(t, durable.Options{Model: model, Now: clock.Now, Retry: durable.RetryPolicy{Base: 50 * time.Millisecond, Cap: time.Second},
		OnScheduled: func(at time.Time) { mu.Lock(); scheduled = append(scheduled, at); mu.Unlock() }})
	first, err := e.h.Submit(ctx, 1, durable.Input{Text: "first"})
	if err != nil {
		t.Fatal(err)
	}
	var sleeping durable.Task
	waitFor(t, func() bool { // the clock stands still: it sleeps until the test moves it
		sleeping, _ = e.store.Task(ctx, first.TaskID)
		return sleeping.State == durable.Sleeping
	})
	second, err := e.h.Submit(ctx, 1, durable.Input{Text: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if at, err := e.h.NextDueAt(ctx); err != nil || !at.Equal(*sleeping.Deadline) {
		t.Fatalf("NextDueAt = %v, %v; want the retry deadline %v", at, err, *sleeping.Deadline)
	}
	idle, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.h.WaitIdle(idle); err != nil {
		t.Fatalf("the queued submission counted as due now: %v", err)
	}
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(scheduled) > 0 && scheduled[len(scheduled)-1].Equal(*sleeping.Deadline)
	})
	clock.jump(time.Second)
	for _, id := range []int64{first.ID, second.ID} {
		if sub := e.waitSettled(id); sub.Status != durable.Done {
			t.Fatalf("submission %+v after %d model calls", sub, calls.Load())
		}
	}
}

func TestPermanentModelErrorEndsTheRunWithAnErrorEntry(t *testing.T) {
	calls := 0
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		calls++
		return durable.ModelResponse{}, durable.Transient(errors.New("503 down"))
	})
	e := newEnv(t, durable.Options{Model: model, Retry: durable.RetryPolicy{Max: 2, Base: time.Millisecond, Cap: 5 * time.Millisecond}})
	sub := e.ask(1, durable.Input{Text: "x"})
	if sub.Status != durable.Unanswered || sub.Reason != "model_error" || calls != 3 {
		t.Fatalf("submission %+v after %d calls", sub, calls)
	}
	// Each retry is said, then the run ends with the error.
	es := e.entries(1)
	if kinds(es) != "owner_message,retry,retry,error" || !strings.Contains(es[3].Text, "503 down") || !strings.Contains(es[1].Text, "attempt 2 of 3") {
		t.Fatalf("entries %s %q", kinds(es), es[len(es)-1].Text)
	}
}

func TestToolPanicAndUnknownToolAreErrorResults(t *testing.T) {
	boom := durable.Tool{Name: "boom", Execute: func(context.Context, durable.ToolCallContext, json.RawMessage) (durable.ToolResult, error) {
		panic("kaboom")
	}}
	e := newEnv(t, durable.Options{Tools: []durable.Tool{boom}})
	for _, name := range []string{"boom", "nosuch"} {
		sub := e.ask(1, durable.Input{Text: "call " + name + " {}"})
		if sub.Status != durable.Done {
			t.Fatalf("%s: %+v", name, sub)
		}
	}
	es := e.entries(1)
	if !es[3].IsError || !strings.Contains(es[3].Text, "kaboom") || !es[8].IsError || !strings.Contains(es[8].Text, "unknown tool") {
		t.Fatalf("results %q %q", es[3].Text, es[8].Text)
	}
}

// stuck is a task kind whose step never changes anything.
type stuck struct{}

func (stuck) Step(ctx context.Context, sc *durable.StepContext, t durable.Task) (durable.StepResult, error) {
	return durable.StepResult{Task: t}, nil
}

func TestStepWithoutProgressFaults(t *testing.T) {
	e := newEnv(t, durable.Options{Kinds: map[string]durable.TaskKind{"stuck": stuck{}}})
	tk, err := e.h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "stuck", State: durable.Pending, Checkpoint: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		got, _ := e.store.Task(ctx, tk.ID)
		if got.State == durable.Terminal {
			if got.Outcome != durable.Faulted || !strings.Contains(got.Error, "no durable progress") {
				t.Fatalf("task %+v", got)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("a task that makes no progress was never faulted")
}

func TestModelChosenPerRequest(t *testing.T) {
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		return durable.ModelResponse{Model: req.Model, Text: "ok"}, nil
	})
	e := newEnv(t, durable.Options{Model: model})
	e.ask(1, durable.Input{Text: "a", Model: "fake/one"})
	e.ask(1, durable.Input{Text: "b", Model: "fake/two"})
	e.ask(1, durable.Input{Text: "c"})
	es := e.entries(1)
	if es[1].Model != "fake/one" || es[3].Model != "fake/two" || es[5].Model != "test/echo" {
		t.Fatalf("models %q %q %q", es[1].Model, es[3].Model, es[5].Model)
	}
}

func TestResetAndSummaryCutTheContext(t *testing.T) {
	var last durable.ModelRequest
	var mu sync.Mutex
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		mu.Lock()
		last = req
		mu.Unlock()
		if strings.Contains(lastUser(req), "Summarize the conversation") {
			return durable.ModelResponse{Text: "SUMMARY"}, nil
		}
		return echo(req)
	})
	e := newEnv(t, durable.Options{Model: model, Compaction: durable.CompactionPolicy{Threshold: 60, KeepRecent: 2}})
	e.ask(1, durable.Input{Text: "first question, long enough to count for something in tokens"})
	e.ask(1, durable.Input{Text: "second question, also long enough to push us over"})
	if err := e.h.WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var sum durable.Entry
	for time.Now().Before(deadline) && sum.ID == 0 {
		for _, en := range e.entries(1) {
			if en.Kind == durable.SummaryEntry {
				sum = en
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if sum.ID == 0 || sum.Text != "SUMMARY" || sum.Head == 0 {
		t.Fatalf("no summary entry: %s", kinds(e.entries(1)))
	}
	e.ask(1, durable.Input{Text: "third"})
	mu.Lock()
	first := last.Messages[0].Content
	mu.Unlock()
	if !strings.Contains(first, "SUMMARY") {
		t.Fatalf("context does not start with the summary: %q", first)
	}
	// A reset marker cuts everything before it; the entries stay.
	id, _ := e.store.MintID()
	if err := e.h.Commit(ctx, durable.Writes{Entries: []durable.Entry{{ID: id, ConversationID: 1, Kind: durable.ResetMarker, Head: id, At: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	e.ask(1, durable.Input{Text: "after reset"})
	mu.Lock()
	defer mu.Unlock()
	if len(last.Messages) != 1 || !strings.HasSuffix(last.Messages[0].Content, "after reset") {
		t.Fatalf("context after reset: %+v", last.Messages)
	}
	if n := len(e.entries(1)); n < 9 {
		t.Fatalf("reset removed entries: %d left", n)
	}
}

// A summary task that has already read the context does not stand in for
// a compaction asked for after it: a run that ends over the threshold while
// a summary is being written starts another, which runs after the first and
// summarizes what came since. (Before, the run saw a summary task live and
// started none, and the context stayed over the threshold.)
func TestCompactionAskedWhileASummaryIsWrittenIsNotLost(t *testing.T) {
	var summaries atomic.Int32
	reading, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var second durable.ModelRequest
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		if !strings.Contains(lastUser(req), "Summarize the conversation") {
			return echo(req)
		}
		switch summaries.Add(1) {
		case 1:
			close(reading)
			<-release
		case 2:
			mu.Lock()
			second = req
			mu.Unlock()
		}
		return durable.ModelResponse{Text: "SUMMARY"}, nil
	})
	e := newEnv(t, durable.Options{Model: model})            // no compaction yet
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the harness closes
	e.ask(1, durable.Input{Text: "first"})
	e.ask(1, durable.Input{Text: "second"})
	e.opts.Compaction = durable.CompactionPolicy{Threshold: 10, KeepRecent: 3}
	e.reopen()
	// Over the threshold: the summary reads first..third and cuts at third.
	e.ask(1, durable.Input{Text: "third"})
	select {
	case <-reading:
	case <-time.After(30 * time.Second):
		t.Fatal("no summary was started")
	}
	// It is being written while the next run ends over the threshold.
	if sub := e.ask(1, durable.Input{Text: "fourth"}); sub.Status != durable.Done {
		t.Fatalf("submission %+v", sub)
	}
	once.Do(func() { close(release) })
	idle, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.h.WaitIdle(idle); err != nil {
		t.Fatal(err)
	}
	var fourth durable.Entry
	for _, en := range e.entries(1) {
		if en.Kind == durable.OwnerMessage && en.Text == "fourth" {
			fourth = en
		}
	}
	head, err := e.store.LatestHead(ctx, 1)
	if err != nil || head.Kind != durable.SummaryEntry || head.Head != fourth.ID {
		t.Fatalf("the context's head is %+v (%v), want a summary up to the fourth message %d; entries %s",
			head, err, fourth.ID, kinds(e.entries(1)))
	}
	// The second summary ran after the first and built on it.
	mu.Lock()
	defer mu.Unlock()
	if summaries.Load() != 2 || len(second.Messages) < 2 || !strings.Contains(second.Messages[1].Content, "SUMMARY") {
		t.Fatalf("%d summaries; the second read %+v", summaries.Load(), second.Messages)
	}
}

func TestHardCapRefusesTheRequest(t *testing.T) {
	calls := 0
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) { calls++; return echo(req) })
	e := newEnv(t, durable.Options{Model: model, Compaction: durable.CompactionPolicy{HardCap: 10}})
	sub := e.ask(1, durable.Input{Text: strings.Repeat("long ", 50)})
	if sub.Status != durable.Unanswered || sub.Reason != "context_too_large" || calls != 0 {
		t.Fatalf("%+v after %d model calls", sub, calls)
	}
}

func TestMissingToolResultIsSynthesized(t *testing.T) {
	msgs := durable.Messages([]durable.Entry{
		{Kind: durable.OwnerMessage, Text: "q", At: time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)},
		{Kind: durable.AssistantMessage, ToolCalls: []durable.ToolCall{{ID: "a", Name: "t"}, {ID: "b", Name: "t"}}},
		{Kind: durable.ToolCallEntry, ToolCallID: "a"},
		{Kind: durable.ToolResultEntry, ToolCallID: "b", Text: "B"},
	})
	if len(msgs) != 4 || msgs[0].Content != "[2026-11-29 15:00 UTC] q" || msgs[2].ToolCallID != "a" ||
		!strings.Contains(msgs[2].Content, "unavailable") || msgs[3].Content != "B" {
		t.Fatalf("messages %+v", msgs)
	}
}

// alarm is a task kind that sleeps until its deadline, then fires once by
// writing an outside-text entry.
type alarm struct{}

func (alarm) Step(ctx context.Context, sc *durable.StepContext, t durable.Task) (durable.StepResult, error) {
	id, err := sc.Harness().Store().MintID()
	if err != nil {
		return durable.StepResult{}, err
	}
	now := sc.Harness().Now()
	t.State, t.Outcome, t.Deadline = durable.Terminal, durable.Completed, nil
	return durable.StepResult{Task: t, Entries: []durable.Entry{{ID: id, ConversationID: t.ConversationID, Kind: durable.OutsideText, Text: "alarm fired", At: now}}}, nil
}

func TestSleepingTaskFiresOnceAfterRestart(t *testing.T) {
	var mu sync.Mutex
	var scheduled []time.Time
	opts := durable.Options{Kinds: map[string]durable.TaskKind{"alarm": alarm{}},
		OnScheduled: func(at time.Time) { mu.Lock(); scheduled = append(scheduled, at); mu.Unlock() }}
	e := newEnv(t, opts)
	due := time.Now().Add(400 * time.Millisecond).UTC().Truncate(time.Millisecond)
	if _, err := e.h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "alarm", State: durable.Sleeping, Deadline: &due, Checkpoint: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	// Reopened before the deadline: NextDueAt is the deadline and the host was told.
	e.reopen()
	if at, err := e.h.NextDueAt(ctx); err != nil || !at.Equal(due) {
		t.Fatalf("NextDueAt = %v, %v; want %v", at, err, due)
	}
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, at := range scheduled {
			if at.Equal(due) {
				return true
			}
		}
		return false
	})
	e.h.Close()
	waitFor(t, func() bool { return time.Now().After(due) }) // the deadline passes while closed
	// Reopened after the deadline: fires exactly once.
	e.open()
	waitFor(t, func() bool { return strings.Contains(kinds(e.entries(1)), "outside_text") })
	e.reopen()
	if err := e.h.WaitIdle(ctx); err != nil { // a second firing would run before idle
		t.Fatal(err)
	}
	if n := strings.Count(kinds(e.entries(1)), "outside_text"); n != 1 {
		t.Fatalf("alarm fired %d times", n)
	}
	if at, _ := e.h.NextDueAt(ctx); !at.IsZero() {
		t.Fatalf("NextDueAt after firing = %v, want none", at)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // generous: the suite must pass on a busy machine
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met within 30 s")
}

// fakeClock is a wall clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) jump(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// A wall clock that jumps past a sleeping task's deadline wakes it without
// anyone calling Wake (timers run on the monotonic clock, deadlines do not).
func TestClockJumpWakesASleepingTask(t *testing.T) {
	clock := &fakeClock{now: time.Now().UTC()}
	e := newEnv(t, durable.Options{Kinds: map[string]durable.TaskKind{"alarm": alarm{}}, Now: clock.Now})
	due := clock.Now().Add(time.Hour).Truncate(time.Millisecond)
	if _, err := e.h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "alarm", State: durable.Sleeping, Deadline: &due, Checkpoint: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if at, _ := e.h.NextDueAt(ctx); !at.Equal(due) {
		t.Fatalf("NextDueAt %v, want %v", at, due)
	}
	clock.jump(2 * time.Hour)
	waitFor(t, func() bool { return strings.Contains(kinds(e.entries(1)), "outside_text") })
}

// The host callback is called from one goroutine at a time, and what it
// heard last is the harness's current next due time.
func TestOnScheduledIsOrderedAndEndsAtTheLatest(t *testing.T) {
	var mu sync.Mutex
	var heard []time.Time
	var inside, overlap atomic.Int32
	opts := durable.Options{Kinds: map[string]durable.TaskKind{"alarm": alarm{}},
		OnScheduled: func(at time.Time) {
			if inside.Add(1) > 1 {
				overlap.Add(1)
			}
			mu.Lock()
			heard = append(heard, at)
			mu.Unlock()
			inside.Add(-1)
		}}
	e := newEnv(t, opts)
	base := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	for i := 20; i > 0; i-- { // each new task is earlier than the last
		due := base.Add(time.Duration(i) * time.Minute)
		if _, err := e.h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "alarm", State: durable.Sleeping, Deadline: &due, Checkpoint: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	want := base.Add(time.Minute)
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(heard) > 0 && heard[len(heard)-1].Equal(want)
	})
	if at, _ := e.h.NextDueAt(ctx); !at.Equal(want) {
		t.Fatalf("NextDueAt %v, want %v", at, want)
	}
	if n := overlap.Load(); n != 0 {
		t.Fatalf("OnScheduled ran concurrently %d times", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(heard); i++ {
		if heard[i].After(heard[i-1]) {
			t.Fatalf("the host heard %v after the earlier %v: %v", heard[i], heard[i-1], heard)
		}
	}
}

// A model error that carries a stop reason (spend_limit, from the gateway)
// ends the run with that reason, not the generic model_error, and no retry.
func TestStopErrorEndsTheRunWithItsReason(t *testing.T) {
	calls := 0
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		calls++
		return durable.ModelResponse{}, &durable.StopError{Reason: "spend_limit", Err: errors.New("spend limit reached")}
	})
	e := newEnv(t, durable.Options{Model: model})
	sub := e.ask(1, durable.Input{Text: "x"})
	if sub.Status != durable.Unanswered || sub.Reason != "spend_limit" || calls != 1 {
		t.Fatalf("submission %+v after %d calls", sub, calls)
	}
	if k := kinds(e.entries(1)); !strings.Contains(k, "error") {
		t.Fatalf("entries %s", k)
	}
}

// A run's answer hands its input and reply to OnAnswer, whose tasks are
// committed with the answer (a job's result noticed to the owner): once,
// and not for a run that ends without an answer.
func TestOnAnswerTasksCommitWithTheAnswer(t *testing.T) {
	var got []string
	e := newEnv(t, durable.Options{
		OnAnswer: func(in durable.Input, answer durable.Entry) []durable.Task {
			got = append(got, in.Options["job"]+"|"+answer.Text)
			return []durable.Task{{Kind: "noop", State: durable.Terminal, Outcome: durable.Completed}}
		},
	})
	sub := e.ask(1, durable.Input{Text: "hello", Options: map[string]string{"job": "7"}})
	if sub.Status != durable.Done || len(got) != 1 || got[0] != "7|echo: hello" {
		t.Fatalf("answer %+v, OnAnswer saw %q", sub, got)
	}
	p, err := e.store.Tasks(ctx, []durable.TaskState{durable.Terminal}, durable.Scan{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tk := range p.Items {
		if tk.Kind == "noop" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d tasks from OnAnswer committed, want 1", n)
	}
}
