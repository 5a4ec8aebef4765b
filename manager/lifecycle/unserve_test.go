package lifecycle

import (
	"context"
	"sync"
	"testing"
	"time"
)

// The edge keeps decisions (caddy/resolve): before a sandbox stops being
// served, the edge is told to forget it, while the container still runs;
// the requests the edge answered until then (reported with its ack, as
// Touch) hold the pause off as any request does.
func TestTheEdgeForgetsBeforeThePauseAndItsRequestsHoldItOff(t *testing.T) {
	r := newRig(t, Config{Tiers: Tiers{Pause: time.Minute}})
	var mu sync.Mutex
	var seen []Status // the container's status at each forget
	r.m.OnUnserve(func(user string) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, r.eng.status(user))
		if len(seen) == 1 { // the edge answered a request just before it forgot
			r.m.Touch(user, true)
		}
	})
	forgets := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	r.run()
	r.mustResolve("alice")
	r.clock.Add(2 * time.Minute)
	r.eventually("the edge told to forget, the pause called off", func() bool { return forgets() >= 1 && r.state("alice") == Running })
	if s := r.eng.status("alice"); s != StatusRunning {
		t.Fatalf("paused under a request the edge answered: %s", s)
	}
	r.clock.Add(2 * time.Minute) // idle since that request
	r.eventually("paused", func() bool { return r.state("alice") == Paused })
	mu.Lock()
	defer mu.Unlock()
	for i, s := range seen {
		if s != StatusRunning {
			t.Fatalf("forget %d came with the container %s, want before the engine acted", i, s)
		}
	}
}

// A reset makes the edge forget before it removes anything.
func TestTheEdgeForgetsBeforeAReset(t *testing.T) {
	r := newRig(t, Config{})
	var status Status
	r.m.OnUnserve(func(user string) { status = r.eng.status(user) })
	r.run()
	r.mustResolve("alice")
	if err := r.m.Reset(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if status != StatusRunning {
		t.Fatalf("forgotten with the container %q, want before the reset removed it", status)
	}
}
