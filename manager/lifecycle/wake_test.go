package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

func newTestManager() *Manager {
	return New(nil, nil, nil, Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
}

// The wake lead of a tier covers the slowest of its recent resumes with a
// margin (under load one resume in a few is much slower than the rest),
// never less than the tier's default for a busy machine, over the last
// resumeSamples only, and at most maxLead.
func TestWakeLeadCoversTheSlowestRecentResume(t *testing.T) {
	m := newTestManager()
	lead := func(tier State) time.Duration {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.lead(tier)
	}
	if got := lead(Stopped); got != defaultLead[Stopped] {
		t.Fatalf("unmeasured lead %v, want the default %v", got, defaultLead[Stopped])
	}
	m.noteResume(Stopped, 8*time.Second) // one slow resume in a busy spell
	for i := 0; i < resumeSamples-1; i++ {
		m.noteResume(Stopped, 600*time.Millisecond)
	}
	if got, want := lead(Stopped), 10*time.Second; got != want {
		t.Fatalf("stopped lead %v, want %v (the slowest recent resume and a quarter)", got, want)
	}
	m.noteResume(Stopped, 600*time.Millisecond) // the slow one is pushed out
	if got := lead(Stopped); got != defaultLead[Stopped] {
		t.Fatalf("stopped lead %v once only quick resumes are recent, want the default %v", got, defaultLead[Stopped])
	}
	m.noteResume(Paused, 20*time.Millisecond)
	if got := lead(Paused); got != defaultLead[Paused] {
		t.Fatalf("paused lead %v after a quick resume, want the default %v", got, defaultLead[Paused])
	}
	m.noteResume(Paused, 2*time.Second)
	if got := lead(Paused); got != 2500*time.Millisecond {
		t.Fatalf("paused lead %v after a 2 s resume, want 2.5 s", got)
	}
	m.noteResume(Removed, 10*time.Minute) // an engine that hung
	if got := lead(Removed); got != maxLead {
		t.Fatalf("removed lead %v, want the cap %v", got, maxLead)
	}
	m.noteResume(Running, time.Hour) // not a tier: ignored
	if got := lead(Running); got != 0 {
		t.Fatalf("running lead %v", got)
	}
}

// The loop must look again when the earliest sleeping sandbox's wake,
// less its tier's lead, comes; running sandboxes and ones without a wake
// time do not count.
func TestNextLookIsTheEarliestLeadAdjustedDeadline(t *testing.T) {
	m := newTestManager()
	now := time.Now()
	m.now = func() time.Time { return now }
	at := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	m.noteResume(Removed, 4*time.Second)
	m.mu.Lock()
	m.boxes = map[string]*box{
		"a": {user: "a", name: "a", state: Paused, wakeAt: at(10 * time.Second)},
		"b": {user: "b", name: "b", state: Removed, wakeAt: at(10*time.Second + 300*time.Millisecond)},
		"c": {user: "c", name: "c", state: Running, wakeAt: at(time.Second)},
		"d": {user: "d", name: "d", state: Stopped},
	}
	m.mu.Unlock()
	want := 10*time.Second + 300*time.Millisecond - 5*time.Second // b, led by 4 s and a quarter
	if got := m.reconcilePass(context.Background(), passAll); got != want {
		t.Fatalf("next look in %v, want %v", got, want)
	}
	m.mu.Lock()
	m.boxes = map[string]*box{"d": {user: "d", name: "d", state: Stopped}}
	m.mu.Unlock()
	if got := m.reconcilePass(context.Background(), passAll); got != never {
		t.Fatalf("no wake stored and no tiers, next look in %v", got)
	}
}

// decideNow is what reconcile would do with user's sandbox now.
func (r *rig) decideNow(user string) (step, time.Duration) {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	return decide(r.m.viewLocked(r.m.boxes[user], r.m.now()), r.m.cfg.Tiers, r.m.cfg.RequestGrace)
}

// A sandbox woken ahead of its due time stays up until then, even when
// its idle pause comes first: paused again, it would need another wake,
// which would come late. Once the due time has passed the tier applies.
func TestEarlyWakeIsNotPausedBeforeItsDueTime(t *testing.T) {
	r := newRig(t, Config{Tiers: Tiers{Pause: 100 * time.Millisecond}})
	r.run()
	ep := r.mustResolve("alice")
	due := r.clock.Now().Add(time.Hour)
	r.agents.SetDue(ep, &due)
	r.clock.Add(time.Second)
	r.eventually("paused with its wake", func() bool { return r.state("alice") == Paused })
	r.clock.Add(time.Hour - time.Second - defaultLead[Paused])
	r.eventually("woken ahead of its due time", func() bool { return r.agents.Wakes("") == 1 && r.state("alice") == Running })
	r.clock.Add(200 * time.Millisecond) // idle past the pause tier, due in 300 ms
	if s, after := r.decideNow("alice"); s != stepNone || after != 300*time.Millisecond {
		t.Fatalf("woken early, idle past its pause, due in 300 ms: %s, look again in %v; want none until the due time", s, after)
	}
	r.clock.Add(300 * time.Millisecond)
	r.eventually("paused once its due time passed", func() bool { return r.state("alice") == Paused })
	if row, _ := r.reg.Row("alice"); row.WakeAt != nil {
		t.Fatalf("paused again with wake %v; the work it was woken for is done", row.WakeAt)
	}
}

// A paused sandbox whose wake is nearer than a stop's lead is not stopped
// when its stop tier comes: a stopped sandbox would be late (this is what
// made a hung agent's reminder 2 s late in issue 29: paused, then stopped
// just before its due time, then started too late). It is woken from
// paused instead.
func TestPausedSandboxIsNotStoppedJustBeforeItsWake(t *testing.T) {
	r := newRig(t, Config{Tiers: Tiers{Pause: time.Minute, Stop: 2 * time.Minute}})
	r.run()
	ep := r.mustResolve("alice")
	due := r.clock.Now().Add(2*time.Minute + time.Second)
	r.agents.SetDue(ep, &due)
	r.clock.Add(time.Minute)
	r.eventually("paused with its wake", func() bool { return r.state("alice") == Paused })
	r.clock.Add(time.Minute) // idle past the stop tier, the wake 1 s ahead
	if s, after := r.decideNow("alice"); s != stepNone || after != time.Second-defaultLead[Paused] {
		t.Fatalf("paused, stop tier reached, due in 1 s: %s, look again in %v; want none until its wake from paused", s, after)
	}
	r.clock.Add(time.Second - defaultLead[Paused])
	r.eventually("woken", func() bool { return r.agents.Wakes("") == 1 })
	if n := countAudits(r, "alice sandbox.stopped"); n != 0 {
		t.Fatalf("stopped %d times before its wake", n)
	}
	// Far from a due time, the stop tier applies as before.
	later := r.clock.Now().Add(time.Hour)
	r.agents.SetDue(ep, &later)
	r.clock.Add(2 * time.Minute)
	r.eventually("stopped", func() bool { return r.state("alice") == Stopped })
}

// hungThenPaused starts the rig (its pause tier a minute) with user's
// sandbox up and its agent's report of work due in an hour, hangs the
// agent and lets the pause tier come: the sandbox is paused with the
// report as its wake. It returns that due time.
func (r *rig) hungThenPaused(user string) time.Time {
	r.t.Helper()
	r.run()
	r.mustResolve(user)
	due := r.clock.Now().Add(time.Hour)
	if err := r.m.ReportWake(context.Background(), user, &due); err != nil {
		r.t.Fatal(err)
	}
	r.eng.hang(user)
	r.clock.Add(time.Minute)
	r.eventually("the hung agent paused", func() bool { return r.state(user) == Paused })
	return due
}

// An agent that did not answer its pause (hung) is woken early enough to
// find out and replace its container before the due time: the wake probes
// it, and when it still does not answer, the container is replaced and
// the new one is told to wake, all ahead of the due time.
func TestHungAgentIsReplacedAheadOfItsDueTime(t *testing.T) {
	r := newRig(t, Config{Tiers: Tiers{Pause: time.Minute}})
	r.m.hungProbe = 50 * time.Millisecond
	due := r.hungThenPaused("alice")
	if row, _ := r.reg.Row("alice"); row.WakeAt == nil || !row.WakeAt.Equal(due) {
		t.Fatalf("paused with wake %v, want its last report %v", row.WakeAt, due)
	}
	r.m.mu.Lock()
	b := r.m.boxes["alice"]
	lead := r.m.wakeLeadLocked(b)
	want := r.m.lead(Paused) + r.m.hungProbeLocked() + r.m.lead(Removed)
	r.m.mu.Unlock()
	if lead != want {
		t.Fatalf("hung agent's wake lead %v, want %v (resume, probe, replace)", lead, want)
	}
	r.clock.Add(time.Hour - lead) // the fake clock stands still from here: all of it happens before the due time
	r.eventually("replaced and woken", func() bool { return r.agents.Wakes("") == 1 && r.eng.status("alice") == StatusRunning })
	if n := countAudits(r, "alice sandbox.restarted"); n != 1 {
		t.Fatalf("%d restarted events, want 1", n)
	}
	if r.eng.status("alice") != StatusRunning || !r.eng.hasVolumes("alice") {
		t.Fatalf("after the replacement: %q, volumes %v", r.eng.status("alice"), r.eng.hasVolumes("alice"))
	}
	r.m.mu.Lock()
	silent := b.silent
	r.m.mu.Unlock()
	if silent {
		t.Fatal("still marked silent after its agent answered")
	}
}

// A wake of an agent that did not answer its pause but answers now (it was
// only slow, or thawed meanwhile) keeps its container.
func TestSilentAgentThatAnswersIsKept(t *testing.T) {
	r := newRig(t, Config{Tiers: Tiers{Pause: time.Minute}})
	r.hungThenPaused("alice")
	r.eng.mu.Lock()
	c := r.eng.containers["alice"]
	c.hung = false
	id := c.id
	r.eng.mu.Unlock()
	r.clock.Add(time.Hour)
	r.eventually("woken", func() bool { return r.agents.Wakes("") == 1 })
	r.eng.mu.Lock()
	same := r.eng.containers["alice"] != nil && r.eng.containers["alice"].id == id
	r.eng.mu.Unlock()
	if !same || countAudits(r, "alice sandbox.restarted") != 0 {
		t.Fatal("the container of an agent that answered was replaced")
	}
}
