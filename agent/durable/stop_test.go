package durable_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
)

// blockingModel answers "echo: …" at once, except to a prompt containing
// "hold": then it says so on entered, notes on cancelled when its context
// ends, and still answers only once release is closed, as a model call
// that ignores its context would.
type blockingModel struct {
	entered, cancelled, release chan struct{}
}

func (m blockingModel) Stream(ctx context.Context, req durable.ModelRequest, _ func(string)) (durable.ModelResponse, error) {
	if !strings.Contains(lastUser(req), "hold") {
		return echo(req)
	}
	m.entered <- struct{}{}
	<-ctx.Done()
	close(m.cancelled)
	<-m.release
	return durable.ModelResponse{Text: "a reply after the stop"}, nil
}

// The owner stops a run while its model call is in flight: the run ends
// at once and durably (aborted, a "stopped" entry, its submission
// unanswered), the model call's context ends, and the reply it returns
// anyway is dropped; the prompt queued behind it runs; the stop stands
// across a restart. Tried: stopping twice, stopping an id that is no run.
func TestStopEndsARunDurably(t *testing.T) {
	m := blockingModel{entered: make(chan struct{}, 1), cancelled: make(chan struct{}), release: make(chan struct{})}
	e := newEnv(t, durable.Options{Model: m})
	conv := int64(1)
	held, err := e.h.Submit(ctx, conv, durable.Input{Text: "hold on"})
	if err != nil {
		t.Fatal(err)
	}
	queued, err := e.h.Submit(ctx, conv, durable.Input{Text: "after it"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the model was not called")
	}
	stopped, err := e.h.Stop(ctx, held.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if stopped.State != durable.Terminal || stopped.Outcome != durable.Aborted || stopped.Error != durable.StoppedByOwner {
		t.Fatalf("stopped task: %+v", stopped)
	}
	select {
	case <-m.cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("the model call's context did not end")
	}
	close(m.release) // the abandoned call returns its reply anyway
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if sub, err := e.h.WaitSubmission(wctx, queued.ID); err != nil || sub.Status != durable.Done {
		t.Fatalf("the prompt behind the stopped run: %+v %v", sub, err)
	}
	if err := e.h.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.h.Stop(ctx, held.TaskID); !errors.Is(err, durable.ErrRunEnded) {
		t.Fatalf("stop twice: %v", err)
	}
	if _, err := e.h.Stop(ctx, 987654); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("stop no run: %v", err)
	}
	check := func(when string) {
		t.Helper()
		es := e.entries(conv)
		var texts []string
		for _, x := range es {
			texts = append(texts, x.Text)
		}
		all := strings.Join(texts, "|")
		if strings.Contains(all, "a reply after the stop") {
			t.Fatalf("%s: the abandoned call's reply was stored: %s", when, kinds(es))
		}
		if k := kinds(es); k != "owner_message,stopped,owner_message,assistant_message" {
			t.Fatalf("%s: entries %s (%s)", when, k, all)
		}
		sub, err := e.store.Submission(ctx, held.ID)
		if err != nil || sub.Status != durable.Unanswered || sub.Reason != durable.StoppedByOwner {
			t.Fatalf("%s: the stopped prompt's submission: %+v %v", when, sub, err)
		}
	}
	check("before a restart")
	e.reopen()
	if err := e.h.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	check("after a restart")
}

// The owner stops a run while, on another device, the same owner allows
// the call it waits on: if the Stop lands between the decision's read and
// its commit, the decision is refused (ErrDecided) and the tool never runs;
// the run stays stopped. Tried with the Stop forced into that gap.
func TestStopBetweenADecisionsReadAndCommitWins(t *testing.T) {
	var runs atomic.Int32
	e := newEnv(t, durable.Options{Policy: &askPolicy{}, Tools: []durable.Tool{countingTool("poke", &runs)}})
	sub := e.settle(1, durable.Input{Text: `call poke {"x":1}`})
	a := e.pending()[0]
	durable.SetBeforeDecideCommit(func() {
		if _, err := e.h.Stop(ctx, a.RunID); err != nil {
			t.Errorf("stop in the gap: %v", err)
		}
	})
	defer durable.SetBeforeDecideCommit(nil)
	if _, err := e.h.Decide(ctx, a.ID, durable.AllowOnce, "", durable.Writes{}); !errors.Is(err, durable.ErrDecided) {
		t.Fatalf("a decision after the stop: %v", err)
	}
	durable.SetBeforeDecideCommit(nil)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.h.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	task, err := e.store.Task(ctx, a.RunID)
	if err != nil || task.State != durable.Terminal || task.Outcome != durable.Aborted || runs.Load() != 0 {
		t.Fatalf("after the race: task %+v %v, the tool ran %d times", task, err, runs.Load())
	}
	_ = sub
}
