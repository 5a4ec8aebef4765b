package lifecycle

import (
	"context"
	"net/netip"
	"time"
)

// Resolve returns the endpoint of user's sandbox once its agent answers
// /health, bound to user. A sandbox that is not serving is brought up by
// reconcile (claimed from the warm pool, provisioned, started or
// unpaused): the request only records that it wants it, queues the name
// and waits for the bring-up's answer. activating requests count as
// activity for the idle tiers; every request holds off a pause for
// RequestGrace.
//
// A request waits at most ProvisionTimeout; then it gets a *QueuedError,
// and the bring-up goes on, so asking again later finds the sandbox up.
func (m *Manager) Resolve(ctx context.Context, user string, activating bool) (netip.AddrPort, error) {
	now := m.now()
	m.mu.Lock()
	b := m.boxLocked(user)
	b.lastRequest = now
	if activating {
		b.lastActive = now
	}
	if m.servingLocked(b) {
		ep := b.endpoint
		m.mu.Unlock()
		return ep, nil
	}
	if b.wanted.IsZero() {
		b.wanted = now
	}
	b.wantedActive = b.wantedActive || activating
	w := make(chan upResult, 1)
	b.waiters = append(b.waiters, w)
	m.mu.Unlock()
	m.queue(user)

	budget := time.NewTimer(m.cfg.ProvisionTimeout)
	defer budget.Stop()
	select {
	case r := <-w:
		return r.ep, r.err
	case <-ctx.Done():
		m.stopWaiting(b, w)
		return netip.AddrPort{}, ctx.Err()
	case <-budget.C:
		m.stopWaiting(b, w)
		pos := m.adm.position(user)
		return netip.AddrPort{}, &QueuedError{RetryAfter: m.adm.retryAfter(pos), Position: pos}
	}
}

// stopWaiting takes a request that gave up off b's waiters; b stays wanted.
func (m *Manager) stopWaiting(b *box, w chan upResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, o := range b.waiters {
		if o == w {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			return
		}
	}
}

// up is reconcile's bring-up step: it brings b's sandbox up and answers
// every request waiting for it, with the endpoint or the error. Either way
// b is no longer wanted: a request that asks again after a failure starts
// a new attempt. A request answered by a bring-up holds off a pause for
// RequestGrace from the answer, not from when it came, and an activating
// one starts the idle period there too: a request that waited longer than
// the first tier for its sandbox (a busy machine, a slow create) would
// otherwise see it paused before it reached the agent, whose own count of
// requests in flight is what keeps a sandbox up under one. A passive one
// (a health check) does not count as activity, but what it brought up
// goes down no further than the first tier from there: the time it spent
// down or being made is not idle time, and a container made 2 s ago is
// not removed because its owner was last active 13 s ago.
// Caller holds b.op.
func (m *Manager) up(ctx context.Context, b *box) (netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.BringUpTimeout)
	defer cancel()
	ep, err := m.bringUp(ctx, b)
	m.mu.Lock()
	waiters := b.waiters
	if !b.wanted.IsZero() && err == nil {
		b.lastRequest = m.now()
		if b.wantedActive {
			b.lastActive = b.lastRequest
		} else if first := m.cfg.Tiers.first(); first > 0 {
			b.lastActive = later(b.lastActive, b.lastRequest.Add(-first))
		}
	}
	b.wanted, b.wantedActive, b.waiters = time.Time{}, false, nil
	if err != nil && b.state == Provisioning { // it took a slot: look again before counting it
		b.state = Unknown
	}
	m.mu.Unlock()
	for _, w := range waiters {
		w <- upResult{ep, err}
	}
	if err != nil {
		m.log.Warn("sandbox bring-up", "user", b.user, "err", err)
	}
	return ep, err
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
