package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"
)

// At capacity a new sandbox takes the slot of the least recently active
// one, which is paused; a paused one resumes the same way.
func TestCapacityPausesTheLeastRecentlyActive(t *testing.T) {
	r := newRig(t, Config{MaxRunning: 2})
	r.run()
	r.mustResolve("old")
	r.clock.Add(time.Second)
	r.mustResolve("mid")
	r.clock.Add(time.Second)
	r.mustResolve("new")
	if r.state("old") != Paused || r.state("mid") != Running || r.state("new") != Running {
		t.Fatalf("old %s, mid %s, new %s", r.state("old"), r.state("mid"), r.state("new"))
	}
	r.clock.Add(time.Second)
	r.mustResolve("old") // pauses mid now
	if r.state("mid") != Paused || r.eng.status("old") != "running" {
		t.Fatalf("mid %s, old's container %s", r.state("mid"), r.eng.status("old"))
	}
}

// Nothing is paused under a request: not within RequestGrace of one (it
// may still be on its way, passive routes included), and not while the
// agent has one in flight (a slow request, a stream). The newcomer is told
// capacity is reached instead; once the request ends it gets the slot.
func TestNotPausedUnderARequest(t *testing.T) {
	r := newRig(t, Config{MaxRunning: 1, RequestGrace: time.Second})
	r.run()
	ep := r.mustResolve("busy")
	// A passive request just now: within the grace.
	if _, err := r.m.Resolve(context.Background(), "busy", false); err != nil {
		t.Fatal(err)
	}
	if _, err := r.resolve("newcomer"); !errors.Is(err, ErrCapacity) {
		t.Fatalf("within the grace: %v, want ErrCapacity", err)
	}
	// Past the grace, but the agent has a request in flight.
	r.clock.Add(2 * time.Second)
	r.agents.SetBusy(ep, true)
	if _, err := r.resolve("newcomer"); !errors.Is(err, ErrCapacity) {
		t.Fatalf("with a request in flight: %v, want ErrCapacity", err)
	}
	if r.state("busy") != Running || r.eng.status("busy") != "running" {
		t.Fatalf("busy is %s / %s", r.state("busy"), r.eng.status("busy"))
	}
	r.agents.SetBusy(ep, false)
	r.mustResolve("newcomer")
	if r.state("busy") != Paused {
		t.Fatalf("busy is %s once idle", r.state("busy"))
	}
}

// A request that waited for its sandbox longer than RequestGrace (tried: a
// bring-up held while the clock moves 5 s) still holds off a pause for
// RequestGrace once it is answered. Before, the grace counted from its
// arrival, and the sandbox could be paused the moment it came up.
func TestGraceCountsFromTheAnswer(t *testing.T) {
	r := newRig(t, Config{MaxRunning: 1, RequestGrace: time.Second})
	r.run()
	r.eng.gate = make(chan struct{})
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := r.m.Resolve(ctx, "slow", false)
		done <- err
	}()
	r.eventually("the bring-up waits at the engine", func() bool { r.eng.mu.Lock(); defer r.eng.mu.Unlock(); return r.eng.heavy == 1 })
	r.clock.Add(5 * time.Second)
	close(r.eng.gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := r.resolve("newcomer"); !errors.Is(err, ErrCapacity) {
		t.Fatalf("just after the slow request was answered: %v, want ErrCapacity", err)
	}
	if r.state("slow") != Running {
		t.Fatalf("slow is %s", r.state("slow"))
	}
	r.clock.Add(2 * time.Second)
	r.mustResolve("newcomer")
	if r.state("slow") != Paused {
		t.Fatalf("slow is %s once the grace is over", r.state("slow"))
	}
}

// The idle tiers walk a sandbox down pause → stop → remove, volumes kept,
// and a request brings it back from any of them.
func TestIdleTiers(t *testing.T) {
	r := newRig(t, Config{Tiers: Tiers{Pause: time.Minute, Stop: time.Hour, Remove: 2 * time.Hour}})
	r.run()
	r.mustResolve("a")
	for _, step := range []struct {
		after  time.Duration
		state  State
		status Status
	}{{time.Minute, Paused, StatusPaused}, {time.Hour, Stopped, StatusStopped}, {time.Hour, Removed, ""}} {
		r.clock.Add(step.after)
		r.eventually(string(step.state), func() bool { return r.state("a") == step.state && r.eng.status("a") == step.status })
	}
	if !r.eng.hasVolumes("a") {
		t.Fatal("remove took the volumes")
	}
	row, _ := r.reg.Row("a")
	if row.State != "removed" {
		t.Fatalf("row state %s", row.State)
	}
	r.mustResolve("a")
	if r.eng.status("a") != "running" {
		t.Fatal("not back")
	}
}

// A sleeping sandbox is brought up at its stored deadline and told to wake.
func TestWakeAtTheStoredDeadline(t *testing.T) {
	r := newRig(t, Config{Tiers: Tiers{Pause: time.Minute}})
	r.run()
	r.mustResolve("a")
	r.clock.Add(time.Minute)
	r.eventually("paused", func() bool { return r.state("a") == Paused })
	at := r.clock.Now().Add(time.Hour)
	r.m.mu.Lock()
	r.m.boxes["a"].wakeAt = &at
	r.m.mu.Unlock()
	r.clock.Add(time.Hour)
	r.eventually("woken", func() bool {
		return r.agents.Wakes("") == 1
	})
	if r.eng.status("a") != "running" {
		t.Fatal("woken but not running")
	}
}

// A sandbox already going down holds a slot until its pause ends: a
// newcomer at capacity waits for it instead of getting ErrCapacity (seen
// under load: the idle tier was pausing a sandbox whose agent was slow to
// answer, and the newcomer got 429 though the slot was about to be free).
func TestRoomIsWaitedForWhileASandboxGoesDown(t *testing.T) {
	r := newRig(t, Config{MaxRunning: 1, Tiers: Tiers{Pause: time.Minute}})
	r.run()
	r.mustResolve("a")
	gate := make(chan struct{})
	r.agents.SetIdleGate(gate)
	r.clock.Add(2 * time.Minute)
	r.eventually("a going down, its agent slow to answer", func() bool { return r.state("a") == Pausing })
	done := make(chan error, 1)
	go func() {
		_, err := r.resolve("b")
		done <- err
	}()
	r.eventually("b's bring-up under way", func() bool { _, ok := r.reg.Row("b"); return ok })
	close(gate)
	if err := <-done; err != nil {
		t.Fatalf("b while a went down: %v", err)
	}
	if r.state("a") != Paused || r.state("b") != Running {
		t.Fatalf("a %s, b %s", r.state("a"), r.state("b"))
	}
}
