package lifecycle

import (
	"context"
	"net/netip"
	"time"
)

// quiesce readies a running sandbox for going down: it refuses within
// RequestGrace of any request (one may still be on its way), marks the box
// Pausing so new requests wait for the outcome instead of reaching it, and
// asks the agent, which refuses while any request is in flight (streams
// included) or work is due. ok is false when the sandbox must stay up; it
// is then Running again. Caller holds b.op.
func (m *Manager) quiesce(ctx context.Context, b *box) (wakeAt *time.Time, ok bool, err error) {
	m.mu.Lock()
	if b.state != Running || m.now().Sub(b.lastRequest) < m.cfg.RequestGrace {
		m.mu.Unlock()
		return nil, false, nil
	}
	ep := b.endpoint
	b.state = Pausing
	m.mu.Unlock()
	wakeAt, ok, err = m.prepareIdle(ctx, b, ep)
	if !ok || err != nil {
		m.mu.Lock()
		if b.state == Pausing {
			b.state = Running
		}
		m.mu.Unlock()
		return nil, false, err
	}
	return wakeAt, true, nil
}

// sleep takes a running sandbox to the first idle tier: paused where the
// engine can pause, stopped where it cannot (Kubernetes has no pause). It
// reports false when the sandbox must stay up. Caller holds b.op.
func (m *Manager) sleep(ctx context.Context, b *box) (bool, error) {
	if m.pauser == nil {
		return m.stop(ctx, b)
	}
	return m.pause(ctx, b)
}

// pause asks the agent to go idle, stores its next wake time and only then
// pauses the container. It reports false when the sandbox must stay up.
// Caller holds b.op.
func (m *Manager) pause(ctx context.Context, b *box) (bool, error) {
	wakeAt, ok, err := m.quiesce(ctx, b)
	if !ok || err != nil {
		return false, err
	}
	m.mu.Lock()
	name := b.name
	m.mu.Unlock()
	c, err := m.eng.Inspect(ctx, m.names(name))
	if err == nil {
		err = m.store(ctx, b, Paused, wakeAt)
	}
	if err == nil {
		start := time.Now()
		if err = m.pauser.Pause(ctx, c.ID); err == nil {
			m.metrics.Pause.Observe(time.Since(start).Seconds())
		}
	}
	if err != nil {
		m.mu.Lock()
		b.state, b.dirty = Running, true // look at the engine again before trusting either
		m.mu.Unlock()
		return false, err
	}
	m.setState(b, Paused, netip.AddrPort{})
	m.audit(b.user, "sandbox.paused", wakeDetail(wakeAt))
	return true, nil
}

// prepareIdle asks the agent whether it may go idle. An agent that does not
// answer (hung) is judged by what it last reported.
func (m *Manager) prepareIdle(ctx context.Context, b *box, ep netip.AddrPort) (*time.Time, bool, error) {
	if !ep.IsValid() {
		return nil, true, nil
	}
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	busy, wakeAt, err := m.agent.PrepareIdle(actx, ep)
	if err != nil {
		// A hung agent: go by what it last reported. Work due now keeps it
		// running; a future wake time is stored like an answer would be.
		m.mu.Lock()
		reported := b.reported
		m.mu.Unlock()
		if reported != nil && !reported.After(m.now()) {
			m.log.Info("agent did not answer /pause and last reported work due; keeping it running", "user", b.user, "err", err)
			return nil, false, nil
		}
		m.log.Info("agent did not answer /pause; using its last reported wake time", "user", b.user, "wake_at", reported, "err", err)
		return reported, true, nil
	}
	if busy {
		return nil, false, nil
	}
	return wakeAt, true, nil
}

// store writes the new state and wake time to the registry before the
// container changes, so a crash in between cannot lose a wake.
func (m *Manager) store(ctx context.Context, b *box, state State, wakeAt *time.Time) error {
	row, err := m.reg.Sandbox(ctx, b.user)
	if err != nil {
		return err
	}
	row.State, row.WakeAt = state.stored(), wakeAt
	m.mu.Lock()
	row.LastActiveAt = b.lastActive
	b.wakeAt = wakeAt
	m.mu.Unlock()
	return m.reg.UpdateSandbox(ctx, row)
}
