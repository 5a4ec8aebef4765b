package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/affido/affido/manager/registry"
)

// claim gives a user without a sandbox the oldest ready one of the warm
// pool, with a fresh gateway token. The registry moves its row, the token's
// hash with it, in one transaction, so a manager killed at any point leaves
// the sandbox either in the pool or the user's, never both and never lost;
// the agent learns whose it is, and the token, from bindClaimed on the way
// up. registry.ErrNotFound: the pool has none ready.
func (m *Manager) claim(ctx context.Context, b *box) (row registry.Sandbox, token string, err error) {
	m.mu.Lock()
	ready := m.readyPoolLocked()
	m.mu.Unlock()
	if ready == 0 {
		return registry.Sandbox{}, "", registry.ErrNotFound
	}
	// A ready pool sandbox runs but takes no slot; its user's does.
	if err := m.makeRoom(ctx, b); err != nil {
		return registry.Sandbox{}, "", err
	}
	token = registry.NewToken()
	row, err = m.reg.ClaimPoolSandbox(ctx, b.user, m.cfg.ImageID, registry.HashToken(token))
	if err != nil {
		return registry.Sandbox{}, "", err
	}
	m.mu.Lock()
	delete(m.pool, row.Name)
	m.mu.Unlock()
	m.kickPool()
	m.audit(b.user, "sandbox.claimed", map[string]any{"sandbox": row.Name})
	return row, token, nil
}

// bindClaimed hands a sandbox just claimed from the pool to its agent: one
// call, POST /claim with the token whose hash the claim stored, sent
// if_unclaimed, so it can only bind an agent that is nobody's (a pool
// agent answered /health unclaimed when it was made ready; no /health
// again). Like every bind it runs under the user's registry lock (locked:
// the caller holds it), so it never interleaves with another manager's
// bind; the agent answering claimed-already means one finished before it,
// and the registry holds that bind's token. Under the lock it first reads
// the row again: a bind by another manager that stored its token but whose
// claim did not reach the agent leaves it unclaimed with the registry
// holding that other token, and sending this one would make them differ.
// Any failure, or a token no longer the row's, returns false and the
// caller takes the general path (waitHealthy, then bind), which finds out
// what the agent holds; an agent bound to another user is never rebound.
func (m *Manager) bindClaimed(ctx context.Context, b *box, row registry.Sandbox, ep netip.AddrPort, token string, locked bool) (bound bool, err error) {
	if !locked {
		unlock, err := m.reg.LockUser(ctx, b.user)
		if err != nil {
			return false, err
		}
		defer unlock()
	}
	now, err := m.reg.Sandbox(ctx, b.user)
	if err != nil {
		return false, err
	}
	if !bytes.Equal(now.TokenHash, registry.HashToken(token)) {
		m.log.Info("claim from the pool: another bind stored its token first; taking the general path", "user", b.user, "sandbox", row.Name)
		return false, nil
	}
	err = m.agent.ClaimIfUnclaimed(ctx, ep, b.user, token)
	switch {
	case err == nil, errors.Is(err, ErrClaimedAlready):
		return true, nil
	case errors.Is(err, ErrClaimedByOther):
		m.audit(b.user, "sandbox.refused", map[string]any{"sandbox": row.Name, "reason": "its agent belongs to another user"})
		return false, fmt.Errorf("sandbox %s: %w", row.Name, err)
	}
	m.log.Info("claim from the pool: binding in one call failed; taking the general path", "user", b.user, "sandbox", row.Name, "err", err)
	return false, nil
}

// bind makes sure the agent at ep belongs to b's user: an agent that is
// nobody's yet (made for this user, or from the pool when bindClaimed
// could not bind it) is given the
// user id and a fresh gateway token over the control path, the token's
// hash stored first, so a crash in between only means binding again. An
// agent bound to someone else is never rebound: ErrClaimedByOther.
//
// The token's write and the claim run under the user's registry lock
// (locked: the caller holds it already), so two managers binding one
// sandbox cannot leave the agent and the registry with different tokens;
// and only an agent seen unclaimed under the lock is given a token, so a
// claim that does not reach it leaves it unclaimed, to be bound again,
// never holding one token while the registry holds another.
func (m *Manager) bind(ctx context.Context, b *box, row *registry.Sandbox, ep netip.AddrPort, claimed bool, owner string, locked bool) error {
	if claimed && owner == b.user {
		return nil
	}
	if claimed {
		m.audit(b.user, "sandbox.refused", map[string]any{"sandbox": row.Name, "reason": "its agent belongs to another user"})
		return fmt.Errorf("sandbox %s: %w", row.Name, ErrClaimedByOther)
	}
	if !locked {
		unlock, err := m.reg.LockUser(ctx, b.user)
		if err != nil {
			return err
		}
		defer unlock()
		h, err := m.agent.Health(ctx, ep)
		if err != nil {
			return fmt.Errorf("bind sandbox %s to %s: look again under the lock: %w", row.Name, b.user, err)
		}
		if h.Claimed { // another manager bound it meanwhile (and stored its token)
			return m.bind(ctx, b, row, ep, true, h.User, true)
		}
	}
	token := registry.NewToken()
	row.TokenHash = registry.HashToken(token)
	if err := m.reg.SetSandboxToken(ctx, b.user, row.TokenHash); err != nil {
		return err
	}
	if err := m.agent.Claim(ctx, ep, b.user, token); err != nil {
		if errors.Is(err, ErrClaimedByOther) {
			return fmt.Errorf("sandbox %s: %w", row.Name, err)
		}
		return fmt.Errorf("bind sandbox %s to %s: %w", row.Name, b.user, err)
	}
	return nil
}
