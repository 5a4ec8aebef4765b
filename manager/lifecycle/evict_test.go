package lifecycle

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Every operation that takes a container away stores the agent's next due
// time first, so its reminders and jobs still fire. Before the one go-down
// path, an evict (and so ./dev.sh reload) removed the container and stored
// nothing: a reminder due 30 s later fired only when its owner came back.
func TestEvictKeepsTheAgentsNextDueTime(t *testing.T) {
	r := newRig(t, Config{})
	r.run()
	ep := r.mustResolve("alice")
	due := r.clock.Now().Add(30 * time.Second)
	r.agents.SetDue(ep, &due)
	if err := r.m.Evict(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	row, _ := r.reg.Row("alice")
	if row.State != "removed" || row.WakeAt == nil || !row.WakeAt.Equal(due) {
		t.Fatalf("after evict: state %s, wake %v; want removed, %v", row.State, row.WakeAt, due)
	}
	if r.eng.status("alice") != "" {
		t.Fatalf("the container is still there: %s", r.eng.status("alice"))
	}
	r.clock.Add(30 * time.Second)
	r.eventually("the wake at the stored time", func() bool { return r.agents.Wakes("") == 1 })
	if r.eng.status("alice") != StatusRunning {
		t.Fatalf("woken but %q", r.eng.status("alice"))
	}
}

// An evict does not wait for a busy agent (a request in flight, work due):
// the container goes, and the wake is stored as now, so the work goes on in
// a new container at once rather than when the owner next comes.
func TestEvictOfABusyAgentBringsItBackAtOnce(t *testing.T) {
	r := newRig(t, Config{})
	r.run()
	ep := r.mustResolve("alice")
	r.agents.SetBusy(ep, true)
	before := r.clock.Now()
	// The bring-up that follows at once clears the stored wake when it is
	// done: its create waits until the row is read.
	gate := make(chan struct{})
	r.eng.mu.Lock()
	r.eng.gate = gate
	r.eng.mu.Unlock()
	if err := r.m.Evict(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	row, _ := r.reg.Row("alice")
	close(gate)
	if row.WakeAt == nil || row.WakeAt.Before(before) {
		t.Fatalf("a busy agent evicted with wake %v, want now", row.WakeAt)
	}
	r.eventually("the busy agent's sandbox back and woken", func() bool {
		return r.agents.Wakes("") == 1 && r.eng.status("alice") == StatusRunning
	})
}

// An agent that cannot answer (hung, or frozen behind the manager's back)
// is evicted with the wake time it last reported.
func TestEvictOfASilentAgentKeepsItsLastReport(t *testing.T) {
	r := newRig(t, Config{})
	r.run()
	r.mustResolve("alice")
	due := r.clock.Now().Add(time.Hour)
	if err := r.m.ReportWake(context.Background(), "alice", &due); err != nil {
		t.Fatal(err)
	}
	r.eng.mu.Lock()
	id := r.eng.containers["alice"].id
	r.eng.mu.Unlock()
	if err := r.eng.Pause(context.Background(), id); err != nil { // not by the manager: no wake stored
		t.Fatal(err)
	}
	if err := r.m.Evict(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if row, _ := r.reg.Row("alice"); row.WakeAt == nil || !row.WakeAt.Equal(due) {
		t.Fatalf("wake %v, want the last report %v", row.WakeAt, due)
	}
}

// Making room at capacity goes down the same way: the sandbox put to sleep
// keeps its next due time.
func TestCapacityKeepsTheAgentsNextDueTime(t *testing.T) {
	r := newRig(t, Config{MaxRunning: 1})
	r.run()
	ep := r.mustResolve("a")
	due := r.clock.Now().Add(time.Hour)
	r.agents.SetDue(ep, &due)
	r.clock.Add(time.Second)
	r.mustResolve("b")
	row, _ := r.reg.Row("a")
	if r.state("a") != Paused || row.WakeAt == nil || !row.WakeAt.Equal(due) {
		t.Fatalf("a is %s with wake %v; want paused, %v", r.state("a"), row.WakeAt, due)
	}
}

// Evicting a sandbox with none, or twice, is not an error and writes nothing.
func TestEvictOfNothing(t *testing.T) {
	r := newRig(t, Config{})
	r.run()
	if err := r.m.Evict(context.Background(), "nobody"); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.reg.Row("nobody"); ok {
		t.Fatal("an evict made a row")
	}
	r.mustResolve("alice")
	for i := 0; i < 2; i++ {
		if err := r.m.Evict(context.Background(), "alice"); err != nil {
			t.Fatalf("evict %d: %v", i+1, err)
		}
	}
	if n := countAudits(r, "alice sandbox.evicted"); n != 1 {
		t.Fatalf("%d evicted events, want 1", n)
	}
}

func countAudits(r *rig, prefix string) int {
	n := 0
	for _, a := range r.reg.Audits() {
		if len(a) >= len(prefix) && a[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

// A sandbox that went down with no wake stored (its agent said nothing was
// due) stays without one through the deeper tiers: an older report of
// "due now" from its agent does not stand in for what was stored. (Tried:
// the agent reports a past due time, then answers "nothing due" at the
// pause; before, the stop tier stored the old report and woke it at once.)
func TestDeeperTiersKeepTheStoredNoWake(t *testing.T) {
	r := newRig(t, Config{Tiers: Tiers{Pause: time.Minute, Stop: time.Hour}})
	r.run()
	r.mustResolve("alice")
	past := r.clock.Now().Add(-time.Second)
	if err := r.m.ReportWake(context.Background(), "alice", &past); err != nil {
		t.Fatal(err)
	}
	r.clock.Add(time.Minute)
	r.eventually("paused", func() bool { return r.state("alice") == Paused })
	r.clock.Add(time.Hour)
	r.eventually("stopped", func() bool { return r.state("alice") == Stopped })
	if row, _ := r.reg.Row("alice"); row.WakeAt != nil {
		t.Fatalf("the stop tier stored wake %v", row.WakeAt)
	}
	if n := r.agents.Wakes(""); n != 0 {
		t.Fatalf("woken %d times with nothing due", n)
	}
}

// An evict to paused or stopped goes down the same way as to removed: the
// agent's next due time is stored first, and the sandbox is woken for it.
func TestEvictToEachTierKeepsTheAgentsNextDueTime(t *testing.T) {
	for _, to := range []State{Paused, Stopped, Removed} {
		t.Run(string(to), func(t *testing.T) {
			r := newRig(t, Config{})
			r.run()
			ep := r.mustResolve("alice")
			due := r.clock.Now().Add(time.Minute)
			r.agents.SetDue(ep, &due)
			if err := r.m.EvictTo(context.Background(), "alice", to); err != nil {
				t.Fatal(err)
			}
			if row, _ := r.reg.Row("alice"); row.State != string(to) || row.WakeAt == nil || !row.WakeAt.Equal(due) {
				t.Fatalf("after evict to %s: state %s, wake %v; want %v", to, row.State, row.WakeAt, due)
			}
			r.clock.Add(time.Minute)
			r.eventually("the wake", func() bool { return r.agents.Wakes("") == 1 && r.eng.status("alice") == StatusRunning })
		})
	}
	r := newRig(t, Config{})
	if err := r.m.EvictTo(context.Background(), "alice", Running); !errors.Is(err, ErrNotATier) {
		t.Fatalf("evict to running: %v", err)
	}
}
