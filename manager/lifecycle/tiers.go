package lifecycle

import "time"

// Action is what the idle-tier policy asks for a sandbox.
type Action int

const (
	Keep Action = iota
	Pause
	Stop
	Remove
)

func (a Action) String() string {
	return [...]string{"keep", "pause", "stop", "remove"}[a]
}

// Tiers are the idle durations after which a sandbox is paused, stopped and
// its container removed. A zero duration turns that tier off.
type Tiers struct {
	Pause, Stop, Remove time.Duration
}

// Next returns what to do with a sandbox in state that has been idle for
// idle. A sandbox that skipped a tier (the manager was down) goes straight to
// the deepest tier it has reached.
func (t Tiers) Next(state State, idle time.Duration) Action {
	reached := func(d time.Duration) bool { return d > 0 && idle >= d }
	switch state {
	case Running, Started:
		switch {
		case reached(t.Remove):
			return Remove
		case reached(t.Stop):
			return Stop
		case reached(t.Pause):
			return Pause
		}
	case Paused:
		switch {
		case reached(t.Remove):
			return Remove
		case reached(t.Stop):
			return Stop
		}
	case Stopped:
		if reached(t.Remove) {
			return Remove
		}
	}
	return Keep
}

// until is how long a sandbox in state, idle for idle, has before Next
// asks for something; never when no tier lies ahead.
func (t Tiers) until(state State, idle time.Duration) time.Duration {
	var ahead []time.Duration
	switch state {
	case Running, Started:
		ahead = []time.Duration{t.Pause, t.Stop, t.Remove}
	case Paused:
		ahead = []time.Duration{t.Stop, t.Remove}
	case Stopped:
		ahead = []time.Duration{t.Remove}
	}
	out := never
	for _, d := range ahead {
		if d > 0 && d > idle {
			out = min(out, d-idle)
		}
	}
	return out
}
