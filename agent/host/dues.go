package host

import (
	"context"
	"sync"
	"time"
)

// nextDueAt is the earliest next due time of every open agent.
func (s *Host) nextDueAt(ctx context.Context) (time.Time, error) {
	var due time.Time
	for _, rt := range s.runtimes() {
		d, err := rt.Harness.NextDueAt(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if !d.IsZero() && (due.IsZero() || d.Before(due)) {
			due = d
		}
	}
	return due, nil
}

// dueBoard tells the host the earliest of the agents' next due times
// whenever one of them changes.
type dueBoard struct {
	report func(time.Time)
	mu     sync.Mutex
	dues   map[string]time.Time
}

func (b *dueBoard) set(agent string, at time.Time) {
	if b.report == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dues == nil {
		b.dues = map[string]time.Time{}
	}
	b.dues[agent] = at
	var due time.Time
	for _, d := range b.dues {
		if !d.IsZero() && (due.IsZero() || d.Before(due)) {
			due = d
		}
	}
	b.report(due)
}

func (b *dueBoard) forget(agent string) {
	b.mu.Lock()
	delete(b.dues, agent)
	b.mu.Unlock()
}

// clear forgets every agent's due time (their stores are being replaced).
func (b *dueBoard) clear() {
	b.mu.Lock()
	b.dues = nil
	b.mu.Unlock()
}
