package host

import (
	"context"
	"time"

	"github.com/affido/affido/agent/agents"
)

// BusyError is Pause's refusal while work goes on; Why says what.
type BusyError struct{ Why string }

func (e *BusyError) Error() string { return e.Why }

// Pause closes storage and returns the earliest stored deadline (zero when
// nothing sleeps); if nobody freezes the process meanwhile, storage reopens
// by itself then. With idle set (the manager's if_idle), Pause asks it,
// holding the lock, whether the caller has nothing else in flight, and
// refuses with a *BusyError while it has or while any task is ready or
// running (and wakes the agents, so due work runs now).
func (s *Host) Pause(ctx context.Context, idle func() bool) (time.Time, error) {
	// Asked before the lock, which a storage migration holds for as long
	// as it copies: the manager must hear "busy" at once, not time out and
	// freeze the process mid-copy.
	if idle != nil && s.migrating.Load() {
		return time.Time{}, &BusyError{Why: "the storage is being migrated"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if idle != nil {
		if !idle() {
			return time.Time{}, &BusyError{Why: "a request is in flight"}
		}
		if rts := s.runtimes(); rts != nil {
			due, err := s.nextDueAt(ctx)
			if err != nil {
				return time.Time{}, err
			}
			busy := !due.IsZero() && !due.After(time.Now())
			for _, rt := range rts {
				busy = busy || rt.Harness.Busy()
			}
			if busy {
				for _, rt := range rts {
					rt.Harness.Wake() // due work runs now, not at the next re-check
				}
				return time.Time{}, &BusyError{Why: "a task is running or due"}
			}
		}
	}
	due, err := s.closeStorage(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if !due.IsZero() {
		// If nobody freezes this process, come back on time by ourselves.
		s.wakeTimer = time.AfterFunc(time.Until(due), func() {
			if _, err := s.storage(context.Background(), agents.Main); err != nil {
				s.cfg.Log.Error("reopen storage at the wake time", "err", err)
			}
		})
	}
	return due, nil
}

// Wake reopens storage and runs due work; it returns the next due time.
func (s *Host) Wake(ctx context.Context) (time.Time, error) {
	if _, err := s.storage(ctx, agents.Main); err != nil {
		return time.Time{}, err
	}
	for _, rt := range s.runtimes() {
		rt.Harness.Wake()
	}
	due, _ := s.nextDueAt(ctx)
	return due, nil
}
