package lifecycle

import (
	"context"
	"net/netip"
	"time"
)

// stop stops the container (from running or paused). It reports false
// when the sandbox must stay up. Caller holds b.op.
func (m *Manager) stop(ctx context.Context, b *box) (bool, error) {
	wakeAt, ok, err := m.goingDown(ctx, b)
	if !ok || err != nil {
		return false, err
	}
	m.mu.Lock()
	name := b.name
	m.mu.Unlock()
	c, err := m.eng.Inspect(ctx, m.names(name))
	if err != nil {
		return false, err
	}
	if err := m.store(ctx, b, Stopped, wakeAt); err != nil {
		return false, err
	}
	m.setStopping(b, true)
	defer m.setStopping(b, false)
	if c.Status == "paused" && m.pauser != nil { // a frozen process cannot handle SIGTERM
		if err := m.pauser.Unpause(ctx, c.ID); err != nil {
			return false, err
		}
	}
	if err := m.eng.Stop(ctx, c.ID); err != nil {
		return false, err
	}
	m.setState(b, Stopped, netip.AddrPort{})
	m.audit(b.user, "sandbox.stopped", wakeDetail(wakeAt))
	return true, nil
}

// goingDown readies b for stop or remove: a running sandbox is quiesced
// (pause.go); a paused or stopped one keeps its stored wake time. Caller
// holds b.op.
func (m *Manager) goingDown(ctx context.Context, b *box) (wakeAt *time.Time, ok bool, err error) {
	m.mu.Lock()
	state, wakeAt := b.state, b.wakeAt
	m.mu.Unlock()
	if state == Running {
		return m.quiesce(ctx, b)
	}
	return wakeAt, true, nil
}
