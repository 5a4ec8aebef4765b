package host

import (
	"testing"
	"time"
)

func TestDueBoardReportsTheEarliestOfTheAgents(t *testing.T) {
	var got []time.Time
	b := dueBoard{report: func(at time.Time) { got = append(got, at) }}
	nine, ten := time.Date(2026, 1, 1, 9, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	b.set("main", ten)
	b.set("bob", nine)
	b.set("bob", time.Time{}) // bob has nothing due any more
	b.forget("main")
	b.set("bob", time.Time{})
	want := []time.Time{ten, nine, ten, {}}
	if len(got) != len(want) {
		t.Fatalf("reports %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("report %d: %v, want %v", i, got[i], want[i])
		}
	}
}
