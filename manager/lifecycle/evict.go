package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/affido/affido/manager/registry"
)

// Evict removes user's container now, keeping network and volumes: the
// next request (or the agent's next due time) provisions a container on
// the volumes the registry records. It goes down the one way (goDown), so
// the agent's next due time is stored first and its reminders and jobs
// still fire; an agent that is busy is evicted all the same, and brought
// back at once to go on with its work.
func (m *Manager) Evict(ctx context.Context, user string) error {
	return m.EvictTo(ctx, user, Removed)
}

// ErrNotATier is EvictTo's answer for a state that is no idle tier.
var ErrNotATier = errors.New("not an idle tier: paused, stopped or removed")

// EvictTo is Evict down to tier to (Paused, Stopped or Removed): the bench
// puts sandboxes to sleep in each tier this way, with the wake stored as
// the idle tiers store it.
func (m *Manager) EvictTo(ctx context.Context, user string, to State) error {
	if !to.down() {
		return fmt.Errorf("evict to %q: %w", to, ErrNotATier)
	}
	b := m.box(user)
	b.op.Lock()
	defer m.unlockOp(b)
	row, err := m.reg.Sandbox(ctx, user)
	if errors.Is(err, registry.ErrNotFound) {
		return nil // nothing to evict
	}
	if err != nil {
		return err
	}
	m.noteRow(b, row)
	m.mu.Lock()
	if b.state == Unknown { // not adopted yet: what the registry stored is the best start
		b.wakeAt, b.reported = row.WakeAt, row.ReportedWakeAt
	}
	m.mu.Unlock()
	_, err = m.goDown(ctx, b, to, causeEvict)
	return err
}
