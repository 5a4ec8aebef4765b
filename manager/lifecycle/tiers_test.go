package lifecycle

import (
	"testing"
	"time"
)

func TestTiersNext(t *testing.T) {
	tiers := Tiers{Pause: 5 * time.Minute, Stop: time.Hour, Remove: 24 * time.Hour}
	tests := []struct {
		state State
		idle  time.Duration
		want  Action
	}{
		{"running", 0, Keep},
		{"running", 4 * time.Minute, Keep},
		{"running", 5 * time.Minute, Pause},
		{"running", 2 * time.Hour, Stop},
		{"running", 25 * time.Hour, Remove},
		{"paused", 10 * time.Minute, Keep},
		{"paused", time.Hour, Stop},
		{"paused", 24 * time.Hour, Remove},
		{"stopped", 23 * time.Hour, Keep},
		{"stopped", 24 * time.Hour, Remove},
		{"removed", 100 * time.Hour, Keep},
		{"provisioning", 100 * time.Hour, Keep},
		{"unknown", 100 * time.Hour, Keep},
	}
	for _, tt := range tests {
		if got := tiers.Next(tt.state, tt.idle); got != tt.want {
			t.Errorf("Next(%s, %v) = %v, want %v", tt.state, tt.idle, got, tt.want)
		}
	}
}

func TestTiersZeroDisables(t *testing.T) {
	tiers := Tiers{Pause: time.Second}
	if got := tiers.Next("running", time.Hour); got != Pause {
		t.Errorf("pause only: running idle 1h = %v, want pause", got)
	}
	if got := tiers.Next("paused", 1000*time.Hour); got != Keep {
		t.Errorf("pause only: paused idle = %v, want keep", got)
	}
	if got := (Tiers{}).Next("running", 1000*time.Hour); got != Keep {
		t.Errorf("no tiers: %v, want keep", got)
	}
}
