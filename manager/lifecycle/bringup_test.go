package lifecycle

import (
	"testing"
	"time"
)

// A container stopped behind the manager's back while its bring-up waits
// for the agent (a `docker stop` that lands during an unpause: the agent
// shuts down and never answers, then the container exits) is started
// again at once. Tried: the container is paused and its agent hung, a
// request unpauses it, and while the bring-up waits for /health the
// container stops; before, the bring-up waited for the dead agent until
// its BringUpTimeout and the request failed (the soak's 1 min 44 s).
func TestContainerStoppedDuringBringUpIsStartedAgain(t *testing.T) {
	r := newRig(t, Config{})
	r.run()
	r.mustResolve("alice")
	id := r.eng.containers["alice"].id
	r.eng.hang("alice") // the agent is shutting down: it answers nothing
	if err := r.eng.Pause(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	r.eventually("the manager to see the pause", func() bool { return r.state("alice") == Paused })

	done := make(chan error, 1)
	go func() { _, err := r.resolve("alice"); done <- err }()
	r.eventually("the bring-up to unpause and wait for the agent", func() bool { return r.eng.status("alice") == StatusRunning })
	if err := r.eng.set(id, StatusRunning, StatusStopped, EventDied); err != nil { // the container exits
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("a request after the container stopped during its bring-up: %v", err)
	}
	if s := r.eng.status("alice"); s != StatusRunning {
		t.Fatalf("the container is %s, want started again", s)
	}
}

// A sandbox this manager paused after its agent answered /pause resumes
// on what the manager knows: the unpause alone, no /health after it (the
// agent reopens its storage on the request itself). One paused behind the
// manager's back is probed after the unpause, as before.
func TestResumeOfAFrozenSandboxAsksTheAgentNothing(t *testing.T) {
	r := newRig(t, Config{Tiers: Tiers{Pause: time.Minute}})
	r.run()
	ep := r.mustResolve("alice")
	r.clock.Add(2 * time.Minute)
	r.eventually("paused by the tier", func() bool { return r.state("alice") == Paused })
	before := r.agents.HealthCalls()
	if got := r.mustResolve("alice"); got != ep {
		t.Fatalf("resumed at %s, want %s", got, ep)
	}
	if n := r.agents.HealthCalls() - before; n != 0 {
		t.Fatalf("the resume asked the agent's /health %d times", n)
	}
	if s := r.eng.status("alice"); s != StatusRunning {
		t.Fatalf("after the resume: %s", s)
	}

	// Paused behind the manager's back: the agent is asked after the unpause.
	if err := r.eng.Pause(t.Context(), r.eng.containers["alice"].id); err != nil {
		t.Fatal(err)
	}
	r.eventually("the manager to see the pause", func() bool { return r.state("alice") == Paused })
	before = r.agents.HealthCalls()
	r.mustResolve("alice")
	if n := r.agents.HealthCalls() - before; n == 0 {
		t.Fatal("a sandbox paused behind the manager's back was resumed without asking its agent")
	}
}

// A sandbox a restarted manager adopted (Started: its agent not checked by
// this manager) and then paused is probed on its resume: only a bring-up
// of this manager vouches for the agent at that address.
func TestResumeOfAnAdoptedSandboxAsksTheAgent(t *testing.T) {
	r := newRig(t, Config{Tiers: Tiers{Pause: time.Minute}})
	r.run()
	r.mustResolve("alice")
	r = r.restart(Config{Tiers: Tiers{Pause: time.Minute}})
	r.eventually("adopted", func() bool { return r.state("alice") == Started })
	r.clock.Add(2 * time.Minute)
	r.eventually("paused by the tier", func() bool { return r.state("alice") == Paused })
	before := r.agents.HealthCalls()
	r.mustResolve("alice")
	if n := r.agents.HealthCalls() - before; n == 0 {
		t.Fatal("an adopted sandbox was resumed without asking its agent")
	}
}
