package lifecycle

import "testing"

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
