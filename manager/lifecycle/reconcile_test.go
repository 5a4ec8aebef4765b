package lifecycle

import (
	"testing"
	"time"
)

// decide, the whole policy for one sandbox, as a table over (state, an
// engine event pending, a bring-up under way, idle time, time since the
// last request, stored wake time) → step and when to look again.
func TestDecide(t *testing.T) {
	tiers := Tiers{Pause: 5 * time.Minute, Stop: time.Hour, Remove: 24 * time.Hour}
	const grace = 500 * time.Millisecond
	wake := func(in time.Duration) view { return view{hasWake: true, untilWake: in} }
	with := func(v view, state State, idle time.Duration) view {
		v.state, v.idle, v.sinceRequest = state, idle, idle
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
		{"running, idle, but a request 100 ms ago", view{state: Running, idle: 10 * time.Minute, sinceRequest: 100 * time.Millisecond}, stepNone, 400 * time.Millisecond},
		{"running, past remove, a request 100 ms ago", view{state: Running, idle: 25 * time.Hour, sinceRequest: 100 * time.Millisecond}, stepNone, 400 * time.Millisecond},
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
		{"an engine event: look first", with(view{stale: true}, Running, 5*time.Minute), stepLook, 0},
		{"an event on a removed one with a wake due: look first", with(view{stale: true, hasWake: true}, Removed, time.Hour), stepLook, 0},
		{"a bring-up under way: leave it", with(view{bringingUp: true, stale: true, hasWake: true}, Stopped, 30*time.Hour), stepNone, never},
		{"pausing (another step holds it)", with(view{}, Pausing, time.Hour), stepNone, never},
		{"provisioning", with(view{}, Provisioning, 100*time.Hour), stepNone, never},
		{"unknown (adopted while Docker restarts it): look", with(view{}, Unknown, 100*time.Hour), stepLook, 0},
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
	s, after := decide(view{state: Running, idle: 1000 * time.Hour, sinceRequest: time.Hour}, Tiers{}, 0)
	if s != stepNone || after != never {
		t.Fatalf("decide = %s, %v", s, after)
	}
}
