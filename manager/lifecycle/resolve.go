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
// (a health check) does not count as activity, but the bring-up's own
// time is not idle time either: the idle period is moved on by as long as
// the bring-up took (a container made in 11 s is not stopped and removed
// 2 s after it started because its owner asked 13 s ago), so polling a
// paused sandbox moves its stop and remove only by its resumes' few
// milliseconds. Caller holds b.op.
func (m *Manager) up(ctx context.Context, b *box) (netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.BringUpTimeout)
	defer cancel()
	began := m.now()
	ep, err := m.bringUp(ctx, b)
	m.mu.Lock()
	waiters := b.waiters
	if !b.wanted.IsZero() && err == nil {
		now := m.now()
		b.lastRequest = now
		if b.wantedActive {
			b.lastActive = now
		} else if moved := b.lastActive.Add(now.Sub(began)); moved.Before(now) {
			b.lastActive = moved
		} else {
			b.lastActive = now
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
