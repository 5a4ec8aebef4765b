package lifecycle

import (
	"context"
	"sync"
	"time"
)

// admission bounds the engine-heavy bring-ups (create, start) that run at
// once and hands free slots out in arrival order. An engine serves such
// calls largely one after another: starting twenty at once makes all twenty
// late, while a queue makes the first ones quick and every one bounded.
type admission struct {
	mu      sync.Mutex
	slots   int
	busy    int
	waiters []waiter        // in arrival order
	recent  []time.Duration // how long recent slots were held
}

// waiter is one bring-up waiting for a slot; ch is closed when it is given
// one.
type waiter struct {
	user string
	ch   chan struct{}
}

func newAdmission(slots int) *admission { return &admission{slots: slots} }

// acquire waits for a slot in arrival order, for user's bring-up. On ctx's
// end it leaves the queue (or hands back a slot it was given meanwhile).
func (a *admission) acquire(ctx context.Context, user string) (release func(), err error) {
	a.mu.Lock()
	if a.busy < a.slots && len(a.waiters) == 0 {
		a.busy++
		a.mu.Unlock()
		return a.releaser(), nil
	}
	ch := make(chan struct{})
	a.waiters = append(a.waiters, waiter{user, ch})
	a.mu.Unlock()
	select {
	case <-ch:
		return a.releaser(), nil
	case <-ctx.Done():
		a.mu.Lock()
		defer a.mu.Unlock()
		for i, w := range a.waiters {
			if w.ch == ch {
				a.waiters = append(a.waiters[:i], a.waiters[i+1:]...)
				return nil, ctx.Err()
			}
		}
		a.handOn() // we were given a slot as ctx ended: pass it on
		return nil, ctx.Err()
	}
}

// tryAcquire takes a slot only if one is free and nobody waits: background
// work (the warm pool) never goes ahead of a user.
func (a *admission) tryAcquire() (release func(), ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.busy >= a.slots || len(a.waiters) > 0 {
		return nil, false
	}
	a.busy++
	return a.releaser(), true
}

func (a *admission) releaser() func() {
	start := time.Now()
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.recent = append(a.recent, time.Since(start))
			if len(a.recent) > 16 {
				a.recent = a.recent[1:]
			}
			a.handOn()
		})
	}
}

// handOn gives the slot of a finished holder to the first waiter, or frees
// it. Caller holds a.mu.
func (a *admission) handOn() {
	if len(a.waiters) > 0 {
		close(a.waiters[0].ch)
		a.waiters = a.waiters[1:]
		return
	}
	a.busy--
}

// resize changes the number of slots; waiters get new slots at once.
func (a *admission) resize(slots int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.slots = max(slots, 1)
	for a.busy < a.slots && len(a.waiters) > 0 {
		a.busy++
		close(a.waiters[0].ch)
		a.waiters = a.waiters[1:]
	}
}

// position is user's place in the queue, from 1 (0: not waiting).
func (a *admission) position(user string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, w := range a.waiters {
		if w.user == user {
			return i + 1
		}
	}
	return 0
}

// retryAfter estimates when a bring-up that is position-th in the queue
// (0: running now) will be done: the slots work through the queue at the
// pace recent bring-ups took.
func (a *admission) retryAfter(position int) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	avg := time.Second
	if len(a.recent) > 0 {
		var sum time.Duration
		for _, d := range a.recent {
			sum += d
		}
		avg = sum / time.Duration(len(a.recent))
	}
	rounds := position/a.slots + 1
	return max(time.Duration(rounds)*avg, time.Second)
}
