package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
)

// counter is a task kind that counts to 1000, one checkpoint per step; in
// the child it blocks forever in its 10th step so the parent can kill it there.
type counter struct {
	block bool
	first chan struct{}
}

func (c *counter) Step(ctx context.Context, sc *durable.StepContext, t durable.Task) (durable.StepResult, error) {
	var cp struct{ N int }
	_ = json.Unmarshal(t.Checkpoint, &cp)
	if c.first != nil {
		select {
		case c.first <- struct{}{}:
		default:
		}
	}
	if c.block && cp.N == 10 {
		fmt.Print("ready")
		<-ctx.Done()
		return durable.StepResult{}, ctx.Err()
	}
	cp.N++
	t.Checkpoint, _ = json.Marshal(cp)
	if cp.N >= 1000 {
		t.State, t.Outcome = durable.Terminal, durable.Completed
	}
	return durable.StepResult{Task: t}, nil
}

func openHarness(ctx context.Context, path string, k *counter) (*durable.Harness, error) {
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	store, err := durable.OpenStore(ctx, db)
	if err != nil {
		return nil, err
	}
	return durable.Open(ctx, store, durable.Options{Kinds: map[string]durable.TaskKind{"counter": k}})
}

// DurableChild is run by the benchmark as a child process: it starts a
// counter task and prints "ready" from inside its 10th step, then waits to
// be killed.
func DurableChild(ctx context.Context, path string) error {
	h, err := openHarness(ctx, path, &counter{block: true})
	if err != nil {
		return err
	}
	if _, err := h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "counter", State: durable.Pending, Checkpoint: json.RawMessage(`{"N":0}`)}); err != nil {
		return err
	}
	if err := h.Resume(); err != nil {
		return err
	}
	<-ctx.Done()
	os.Exit(0)
	return nil
}

// timeRecovery opens a database left by a killed child and returns the time
// from Open to the start of the first resumed step.
func timeRecovery(ctx context.Context, path string) (time.Duration, error) {
	k := &counter{first: make(chan struct{}, 1)}
	start := time.Now()
	h, err := openHarness(ctx, path, k)
	if err != nil {
		return 0, err
	}
	defer h.Close()
	if err := h.Resume(); err != nil {
		return 0, err
	}
	select {
	case <-k.first:
		return time.Since(start), nil
	case <-time.After(10 * time.Second):
		return 0, fmt.Errorf("no step resumed within 10 s")
	}
}
