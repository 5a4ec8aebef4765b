package lifecycle

import (
	"testing"
	"time"
)

// decide, the whole policy for one sandbox, as a table over (state, a
// request waiting, idle time, time since the last request, stored wake
// time) → step and when to look again. An engine event makes the state
// Unknown; a step under way holds the sandbox's op, so decide never sees it.
func TestDecide(t *testing.T) {
	tiers := Tiers{Pause: 5 * time.Minute, Stop: time.Hour, Remove: 24 * time.Hour}
	const grace = 500 * time.Millisecond
	wake := func(in time.Duration) view { return view{hasWake: true, untilWake: in} }
	with := func(v view, state State, idle time.Duration) view {
		v.state, v.idle, v.sinceRequest, v.named = state, idle, idle, true
		return v
	}
	wanted := view{wanted: true}
	// due: the agent's next due time is in; the leads of the tiers a step
	// goes down to are a busy machine's defaults.
	due := func(v view, in time.Duration) view {
		v.hasDue, v.untilDue = true, in
		v.lead = [4]time.Duration{Pause: 500 * time.Millisecond, Stop: 3 * time.Second, Remove: 3 * time.Second}
		return v
	}
	for _, c := range []struct {
		name  string
		v     view
		step  step
		after time.Duration
	}{
		{"running, fresh", with(view{}, Running, time.Minute), stepNone, 4 * time.Minute},
		{"running, idle past pause", with(view{}, Running, 5*time.Minute), stepPause, 0},
		{"running, idle past stop (the manager was away)", with(view{}, Running, 2*time.Hour), stepStop, 0},
		{"running, idle past remove", with(view{}, Running, 25*time.Hour), stepRemove, 0},
		{"running, idle, but a request 100 ms ago", view{state: Running, named: true, idle: 10 * time.Minute, sinceRequest: 100 * time.Millisecond}, stepNone, 400 * time.Millisecond},
		{"running, past remove, a request 100 ms ago", view{state: Running, named: true, idle: 25 * time.Hour, sinceRequest: 100 * time.Millisecond}, stepNone, 400 * time.Millisecond},
		{"running with a wake time: the agent runs it itself", with(wake(-time.Second), Running, time.Minute), stepNone, 4 * time.Minute},
		{"paused, wake far", with(wake(time.Minute), Paused, 10*time.Minute), stepNone, time.Minute},
		{"paused, stop tier nearer than the wake", with(wake(2*time.Hour), Paused, 10*time.Minute), stepNone, 50 * time.Minute},
		{"paused, wake due", with(wake(0), Paused, 10*time.Minute), stepWake, 0},
		{"paused, wake overdue (the manager was away)", with(wake(-time.Hour), Paused, 10*time.Minute), stepWake, 0},
		{"paused, idle past stop", with(view{}, Paused, time.Hour), stepStop, 0},
		{"paused, idle past stop, wake due: the wake first", with(wake(0), Paused, time.Hour), stepWake, 0},
		{"stopped, wake due", with(wake(-time.Millisecond), Stopped, 2*time.Hour), stepWake, 0},
		{"stopped, no wake", with(view{}, Stopped, 2*time.Hour), stepNone, 22 * time.Hour},
		{"removed, wake due", with(wake(0), Removed, 30*time.Hour), stepWake, 0},
		{"removed, no wake: only a request brings it back", with(view{}, Removed, 30*time.Hour), stepNone, never},
		{"started (adopted), idle past pause", with(view{}, Started, 5*time.Minute), stepPause, 0},
		{"started, fresh", with(view{}, Started, time.Minute), stepNone, 4 * time.Minute},
		{"an engine event: look first", with(view{look: true}, Running, 5*time.Minute), stepLook, 0},
		{"an event on a removed one with a wake due: look first", with(view{look: true, hasWake: true}, Removed, time.Hour), stepLook, 0},
		{"unknown (a step failed half way): look", with(view{}, Unknown, 100*time.Hour), stepLook, 0},
		{"a request waits, running, but an engine event came: check it", with(view{wanted: true, look: true}, Running, 0), stepUp, 0},
		{"pausing (another step holds it)", with(view{}, Pausing, time.Hour), stepNone, never},
		{"provisioning", with(view{}, Provisioning, 100*time.Hour), stepNone, never},
		{"a request waits, paused", with(wanted, Paused, 0), stepUp, 0},
		{"a request waits, removed, wake far", with(view{wanted: true, hasWake: true, untilWake: time.Hour}, Removed, 0), stepUp, 0},
		{"a request waits, started (agent not checked yet)", with(wanted, Started, 0), stepUp, 0},
		{"a request waits, unknown: the bring-up reads the engine itself", with(wanted, Unknown, 0), stepUp, 0},
		{"a request waits, pausing: up once the pause ends", with(wanted, Pausing, 0), stepUp, 0},
		{"a request waits for a new user (no sandbox named yet)", wanted, stepUp, 0},
		{"a request waits, running: answered already", with(wanted, Running, 0), stepNone, 5 * time.Minute},
		{"nobody's sandbox, nothing waits", view{state: Unknown}, stepNone, never},
		{"running, idle past pause, due in 200 ms, pause lead 500 ms: up until the due time", due(with(view{}, Running, 5*time.Minute), 200*time.Millisecond), stepNone, 200 * time.Millisecond},
		{"running, idle past pause, due in a minute: paused", due(with(view{}, Running, 5*time.Minute), time.Minute), stepPause, 0},
		{"paused, idle past stop, wake 2 s ahead, stop lead 3 s: woken from paused", due(with(wake(1500*time.Millisecond), Paused, time.Hour), 2*time.Second), stepNone, 1500 * time.Millisecond},
		{"paused, idle past stop, wake 5 s ahead: stopped", due(with(wake(4500*time.Millisecond), Paused, time.Hour), 5*time.Second), stepStop, 0},
		{"stopped, idle past remove, wake 1 s ahead: woken from stopped", due(with(wake(time.Second-3*time.Second), Stopped, 25*time.Hour), time.Second), stepWake, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, after := decide(c.v, tiers, grace)
			if s != c.step || (s == stepNone && after != c.after) {
				t.Fatalf("decide = %s, look again in %v; want %s, %v", s, after, c.step, c.after)
			}
		})
	}
}

// With the tiers off, a running sandbox is never put down and nothing is
// due for it.
func TestDecideWithoutTiers(t *testing.T) {
	s, after := decide(view{state: Running, named: true, idle: 1000 * time.Hour, sinceRequest: time.Hour}, Tiers{}, 0)
	if s != stepNone || after != never {
		t.Fatalf("decide = %s, %v", s, after)
	}
}
