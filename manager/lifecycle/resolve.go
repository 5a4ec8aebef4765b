package lifecycle

import (
	"context"
	"net/netip"
	"time"
)

// flight is one bring-up of a sandbox that requests wait on together.
type flight struct {
	done   chan struct{}
	queued bool // waiting for an admission slot
	ep     netip.AddrPort
	err    error
}

// Resolve returns the endpoint of user's sandbox, claiming one from the
// warm pool, provisioning, starting or unpausing it first, and only once
// its agent answers /health. activating requests count as activity for the
// idle tiers; every request holds off a pause for RequestGrace.
//
// A request waits for its sandbox at most ProvisionTimeout; then it gets a
// *QueuedError and the bring-up goes on, so asking again later finds it up.
// A request that waited for a bring-up holds off a pause for RequestGrace
// from when it is answered, not from when it came.
func (m *Manager) Resolve(ctx context.Context, user string, activating bool) (netip.AddrPort, error) {
	now := m.now()
	m.mu.Lock()
	b := m.boxLocked(user)
	b.lastRequest = now
	if activating {
		b.lastActive = now
	}
	if b.servingLocked() {
		ep := b.endpoint
		m.mu.Unlock()
		return ep, nil
	}
	f := m.flightLocked(b)
	m.mu.Unlock()

	budget := time.NewTimer(m.cfg.ProvisionTimeout)
	defer budget.Stop()
	select {
	case <-f.done:
		if f.err == nil {
			m.mu.Lock()
			b.lastRequest = m.now()
			m.mu.Unlock()
		}
		return f.ep, f.err
	case <-ctx.Done():
		return netip.AddrPort{}, ctx.Err()
	case <-budget.C:
		m.mu.Lock()
		queued := f.queued
		m.mu.Unlock()
		pos := 0
		if queued {
			pos = m.adm.waiting()
		}
		return netip.AddrPort{}, &QueuedError{RetryAfter: m.adm.retryAfter(pos), Position: pos}
	}
}

// flightLocked returns b's bring-up in progress, starting one if none is.
// Caller holds m.mu.
func (m *Manager) flightLocked(b *box) *flight {
	if b.flight != nil {
		return b.flight
	}
	f := &flight{done: make(chan struct{})}
	b.flight = f
	base := m.base
	go func() {
		ctx, cancel := context.WithTimeout(base, m.cfg.BringUpTimeout)
		defer cancel()
		b.op.Lock()
		ep, err := m.bringUp(ctx, b, f)
		b.op.Unlock()
		m.mu.Lock()
		f.ep, f.err = ep, err
		b.flight = nil
		if err == nil { // whoever waits on it (a request, a wake) gets RequestGrace from the answer
			b.lastRequest = m.now()
		}
		if err != nil && b.state == Provisioning { // it took a slot: look again before counting it
			b.state, b.stale = Unknown, true
		}
		m.mu.Unlock()
		close(f.done)
		if err != nil {
			m.log.Warn("sandbox bring-up", "user", b.user, "err", err)
		}
	}()
	return f
}

// up brings b up (joining a bring-up in progress) and waits for it.
func (m *Manager) up(ctx context.Context, b *box) (netip.AddrPort, error) {
	m.mu.Lock()
	f := m.flightLocked(b)
	m.mu.Unlock()
	select {
	case <-f.done:
		return f.ep, f.err
	case <-ctx.Done():
		return netip.AddrPort{}, ctx.Err()
	}
}
