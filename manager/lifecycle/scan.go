package lifecycle

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/affido/affido/manager/provision"
)

// scan runs one pass of the idle tiers and the wake scheduler.
func (m *Manager) scan(ctx context.Context) {
	now := m.now()
	m.mu.Lock()
	boxes := make([]*box, 0, len(m.boxes))
	for _, b := range m.boxes {
		boxes = append(boxes, b)
	}
	m.mu.Unlock()
	for _, b := range boxes {
		m.mu.Lock()
		state, dirty, idle, wakeAt, name := b.state, b.dirty, now.Sub(b.lastActive), b.wakeAt, b.name
		lead := m.lead(state)
		m.mu.Unlock()
		if name == "" {
			continue // never brought up by this manager, nor in the registry
		}
		if wakeAt != nil && !now.Before(wakeAt.Add(-lead)) && !state.counts() {
			go m.wake(ctx, b, *wakeAt, state)
			continue
		}
		action := m.cfg.Tiers.Next(state, idle)
		if action == Keep && !dirty {
			continue
		}
		if !b.op.TryLock() {
			continue
		}
		go func() {
			defer b.op.Unlock()
			if dirty {
				m.refresh(ctx, b)
				m.mu.Lock()
				state, idle = b.state, m.now().Sub(b.lastActive)
				m.mu.Unlock()
				action = m.cfg.Tiers.Next(state, idle)
			}
			if err := m.apply(ctx, b, action); err != nil {
				m.log.Warn("idle tier", "user", b.user, "action", action.String(), "err", err)
			}
		}()
	}
}

func (m *Manager) apply(ctx context.Context, b *box, a Action) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch a {
	case Pause:
		_, err := m.sleep(ctx, b)
		return err
	case Stop:
		_, err := m.stop(ctx, b)
		return err
	case Remove:
		return m.remove(ctx, b)
	}
	return nil
}

// refresh reads b's state from the engine. Caller holds b.op.
func (m *Manager) refresh(ctx context.Context, b *box) {
	m.mu.Lock()
	name := b.name
	m.mu.Unlock()
	c, err := m.eng.Inspect(ctx, m.names(name))
	state := Unknown
	switch {
	case errors.Is(err, provision.ErrNotFound):
		state = Removed
	case err == nil:
		state = engineState(c.Status)
	default:
		return
	}
	ep := netip.AddrPort{}
	if state == Running {
		ep = c.Endpoint
	}
	m.setState(b, state, ep)
}
