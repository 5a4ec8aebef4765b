package lifecycle

import (
	"context"
	"errors"

	"github.com/affido/affido/manager/registry"
)

// Reset removes everything of user's sandbox: container, network, volumes
// (under whatever names the registry records: a sandbox from the pool keeps
// its pool names) and the registry row. The user and their credentials stay.
func (m *Manager) Reset(ctx context.Context, user string) error {
	b := m.box(user)
	b.op.Lock()
	defer b.op.Unlock()
	m.unserve(b)
	name := user
	row, err := m.reg.Sandbox(ctx, user)
	switch {
	case err == nil:
		name = row.Name
	case !errors.Is(err, registry.ErrNotFound):
		return err
	}
	if err == nil { // store first: the container's death is then not taken for a crash
		if err := m.store(ctx, b, Removed, nil); err != nil {
			return err
		}
	}
	if err := m.eng.RemoveAll(ctx, m.names(name)); err != nil {
		return err
	}
	if m.onReset != nil { // what else the user has: the browser sandbox and its profile
		if err := m.onReset(ctx, user); err != nil {
			return err
		}
	}
	if err := m.reg.DeleteSandbox(ctx, user); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.boxes, user)
	delete(m.lookAt, b)
	delete(m.looks, b)
	delete(m.byName, name)
	m.mu.Unlock()
	m.audit(user, "sandbox.reset", map[string]any{"sandbox": name})
	return nil
}

// OnReset adds f to what Reset removes of a user (by user id, whatever
// the sandbox's name): the browser sandbox and its profile. Set it before
// the manager serves.
func (m *Manager) OnReset(f func(ctx context.Context, user string) error) { m.onReset = f }
