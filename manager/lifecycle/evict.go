package lifecycle

import (
	"context"
	"errors"
	"net/netip"

	"github.com/affido/affido/manager/registry"
)

// Evict removes user's container now, keeping network and volumes: the
// next request provisions a container on the volumes the registry records.
func (m *Manager) Evict(ctx context.Context, user string) error {
	b := m.box(user)
	b.op.Lock()
	defer b.op.Unlock()
	row, err := m.reg.Sandbox(ctx, user)
	if errors.Is(err, registry.ErrNotFound) {
		return nil // nothing to evict
	}
	if err != nil {
		return err
	}
	m.noteRow(b, row)
	m.setStopping(b, true)
	defer m.setStopping(b, false)
	if err := m.eng.RemoveContainer(ctx, m.names(row.Name)); err != nil {
		return err
	}
	row.State = registry.StateRemoved
	if err := m.reg.UpdateSandbox(ctx, row); err != nil {
		return err
	}
	m.setState(b, Removed, netip.AddrPort{})
	m.audit(user, "sandbox.evicted", map[string]any{"sandbox": row.Name})
	return nil
}
