package lifecycle

import (
	"context"
	"time"
)

// opLock serializes the steps taken on one sandbox. Unlike a sync.Mutex,
// a step may wait for it for a bounded time (lockWithin): making room at
// capacity waits for a short step on another sandbox (a look) to end, but
// two bring-ups that each want the other's slot cannot wait forever.
type opLock chan struct{}

func newOpLock() opLock { return make(opLock, 1) }

func (l opLock) Lock() { l <- struct{}{} }

func (l opLock) Unlock() { <-l }

func (l opLock) TryLock() bool {
	select {
	case l <- struct{}{}:
		return true
	default:
		return false
	}
}

// lockWithin takes the lock unless it stays taken for d or ctx ends first.
func (l opLock) lockWithin(ctx context.Context, d time.Duration) bool {
	if l.TryLock() {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case l <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}
