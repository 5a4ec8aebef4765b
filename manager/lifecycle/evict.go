package lifecycle

import (
	"context"
	"errors"

	"github.com/affido/affido/manager/registry"
)

// Evict removes user's container now, keeping network and volumes: the
// next request (or the agent's next due time) provisions a container on
// the volumes the registry records. It goes down the one way (goDown), so
// the agent's next due time is stored first and its reminders and jobs
// still fire; an agent that is busy is evicted all the same, and brought
// back at once to go on with its work.
func (m *Manager) Evict(ctx context.Context, user string) error {
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
	_, err = m.goDown(ctx, b, Removed, causeEvict)
	return err
}
