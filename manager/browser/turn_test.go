package browser

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
)

// blockingEngine holds Up until released: the action under way.
type blockingEngine struct {
	countingEngine
	entered chan struct{}
	release chan struct{}
}

func (e *blockingEngine) Up(ctx context.Context, _ string) error {
	e.entered <- struct{}{}
	<-e.release
	return errors.New("no engine here")
}

// The attack: a sandbox floods its user's browser with actions while one
// is under way. At most maxWaiting wait, the rest are refused at once, and
// a waiting one gives up when its request ends.
func TestActionsWaitingForTheBrowserAreBounded(t *testing.T) {
	eng := &blockingEngine{entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := New(Config{Engine: eng, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	open := gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, Agent: "main", URL: "https://example.org/"}
	first := make(chan error, 1)
	go func() { _, err := s.Do(context.Background(), "alice", open); first <- err }()
	<-eng.entered // the first action holds the turn

	type result struct{ err error }
	waiting := make(chan result, maxWaiting)
	ctxs := make([]context.CancelFunc, maxWaiting)
	for i := range maxWaiting {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		go func() { _, err := s.Do(ctx, "alice", open); waiting <- result{err} }()
	}
	u := s.user("alice")
	deadline := time.Now().Add(10 * time.Second)
	for u.op.waiting.Load() < maxWaiting {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiting, want %d", u.op.waiting.Load(), maxWaiting)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, with a deadline
	}
	if _, err := s.Do(context.Background(), "alice", open); !errors.Is(err, ErrBusy) {
		t.Fatalf("one more than the bound: %v, want ErrBusy at once", err)
	}
	ctxs[0]()
	select {
	case r := <-waiting:
		if !errors.Is(r.err, ErrBusy) {
			t.Fatalf("a waiting action whose request ended: %v", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting action did not give up when its request ended")
	}
	// Another user is not held by alice's queue.
	go func() { _, _ = s.Do(context.Background(), "bob", open) }()
	select {
	case <-eng.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("bob waited for alice")
	}
	close(eng.release)
	<-first
	for _, c := range ctxs[1:] {
		c()
	}
}
