package lifecycle

import (
	"context"
	"net/netip"
)

// remove removes the container; network and volumes stay, and a later
// request provisions a container on them again. Caller holds b.op.
func (m *Manager) remove(ctx context.Context, b *box) error {
	wakeAt, ok, err := m.goingDown(ctx, b)
	if !ok || err != nil {
		return err
	}
	if err := m.store(ctx, b, Removed, wakeAt); err != nil {
		return err
	}
	m.mu.Lock()
	name := b.name
	m.mu.Unlock()
	m.setStopping(b, true)
	defer m.setStopping(b, false)
	if err := m.eng.RemoveContainer(ctx, m.names(name)); err != nil {
		return err
	}
	m.setState(b, Removed, netip.AddrPort{})
	m.audit(b.user, "sandbox.removed", wakeDetail(wakeAt))
	return nil
}
