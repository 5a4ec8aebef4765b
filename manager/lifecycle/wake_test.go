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

// The wake lead of a tier is its slowest recent resume plus a margin, over
// the last few resumes only; before any, a default per tier.
func TestWakeLeadFollowsMeasuredResumes(t *testing.T) {
	m := newTestManager()
	m.mu.Lock()
	if got := m.lead(Stopped); got != defaultLead[Stopped] {
		t.Fatalf("unmeasured lead %v, want %v", got, defaultLead[Stopped])
	}
	m.mu.Unlock()
	m.noteResume(Stopped, 900*time.Millisecond) // an outlier, later pushed out
	for i := 0; i < resumeSamples; i++ {
		m.noteResume(Stopped, time.Duration(200+i)*time.Millisecond)
	}
	m.noteResume(Paused, 20*time.Millisecond)
	m.mu.Lock()
	defer m.mu.Unlock()
	if got, want := m.lead(Stopped), 207*time.Millisecond+50*time.Millisecond; got != want {
		t.Fatalf("stopped lead %v, want %v (the slowest of the last %d plus 50 ms)", got, want, resumeSamples)
	}
	if got := m.lead(Paused); got != 70*time.Millisecond {
		t.Fatalf("paused lead %v", got)
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
	m.noteResume(Removed, 400*time.Millisecond)
	m.mu.Lock()
	m.boxes = map[string]*box{
		"a": {user: "a", name: "a", state: Paused, wakeAt: at(10 * time.Second)},
		"b": {user: "b", name: "b", state: Removed, wakeAt: at(10*time.Second + 300*time.Millisecond)},
		"c": {user: "c", name: "c", state: Running, wakeAt: at(time.Second)},
		"d": {user: "d", name: "d", state: Stopped},
	}
	m.mu.Unlock()
	want := 10*time.Second + 300*time.Millisecond - 450*time.Millisecond // b, led by 400+50 ms
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
