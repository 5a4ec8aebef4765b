package browser

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/affido/affido/internal/gatewayapi"
)

// blockingEngine holds Up until released: the action under way.
type blockingEngine struct {
	countingEngine
	release chan struct{}
}

func (e *blockingEngine) Up(ctx context.Context, _ string) error {
	<-e.release
	return errors.New("no engine here")
}

// The attack: a sandbox floods its user's browser with actions while one
// is under way. At most maxWaiting wait, the rest are refused at once, and
// a waiting one gives up when its request ends. (synctest.Wait returns
// once every goroutine of the test is blocked: no clock is waited on.)
func TestActionsWaitingForTheBrowserAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		eng := &blockingEngine{release: make(chan struct{})}
		s := New(Config{Engine: eng, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		open := gatewayapi.BrowserRequest{Action: gatewayapi.BrowserOpen, Agent: "main", URL: "https://example.org/"}
		go func() { _, _ = s.Do(context.Background(), "alice", open) }()
		synctest.Wait() // the first action holds the turn, in Up

		waiting := make(chan error, maxWaiting)
		cancels := make([]context.CancelFunc, maxWaiting)
		for i := range maxWaiting {
			ctx, cancel := context.WithCancel(context.Background())
			cancels[i] = cancel
			go func() { _, err := s.Do(ctx, "alice", open); waiting <- err }()
		}
		synctest.Wait()
		if n := s.user("alice").op.waiting.Load(); n != maxWaiting {
			t.Fatalf("%d waiting, want %d", n, maxWaiting)
		}
		if _, err := s.Do(context.Background(), "alice", open); !errors.Is(err, ErrBusy) {
			t.Fatalf("one more than the bound: %v, want ErrBusy at once", err)
		}
		cancels[0]()
		synctest.Wait()
		select {
		case err := <-waiting:
			if !errors.Is(err, ErrBusy) {
				t.Fatalf("a waiting action whose request ended: %v", err)
			}
		default:
			t.Fatal("a waiting action did not give up when its request ended")
		}
		// Another user is not held by alice's queue: bob's action reaches Up.
		go func() { _, _ = s.Do(context.Background(), "bob", open) }()
		synctest.Wait()
		if n := s.user("bob").op.waiting.Load(); n != 0 {
			t.Fatalf("bob waits for alice (%d waiting)", n)
		}
		close(eng.release)
		for _, c := range cancels[1:] {
			c()
		}
	})
}
