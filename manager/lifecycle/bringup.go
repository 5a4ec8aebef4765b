package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/affido/affido/manager/registry"
)

// errNeedSlot says a bring-up found engine-heavy work it holds no
// admission slot for; it is tried again with one.
var errNeedSlot = errors.New("bring-up needs an admission slot")

// bringUp brings b's sandbox to running. A bring-up that looks light (a
// resume, a claim from the pool) goes ahead at once; a heavy one (create,
// start) first waits its turn in the admission queue and then takes the
// user's registry lock, in that order, so waiting holds no connection.
// A container that stops while its agent is awaited is brought up again
// (twice at most). Caller holds b.op.
func (m *Manager) bringUp(ctx context.Context, b *box) (netip.AddrPort, error) {
	for tries := 1; ; tries++ {
		ep, err := m.bringUpOnce(ctx, b)
		if !errors.Is(err, errNotRunningWhileAwaited) || tries == 3 {
			return ep, err
		}
		m.log.Info("sandbox stopped running during its bring-up; bringing it up again", "user", b.user, "err", err)
	}
}

func (m *Manager) bringUpOnce(ctx context.Context, b *box) (netip.AddrPort, error) {
	m.mu.Lock()
	if m.servingLocked(b) { // a bring-up just before this one did it
		ep := b.endpoint
		m.mu.Unlock()
		return ep, nil
	}
	heavy := m.heavyLocked(b)
	m.mu.Unlock()
	for {
		if !heavy {
			ep, err := m.bringUpWith(ctx, b, false)
			if !errors.Is(err, errNeedSlot) {
				return ep, err
			}
		}
		release, err := m.adm.acquire(ctx, b.user)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("wait for an admission slot: %w", err)
		}
		ep, err := func() (netip.AddrPort, error) {
			defer release()
			unlock, err := m.reg.LockUser(ctx, b.user)
			if err != nil {
				return netip.AddrPort{}, err
			}
			defer unlock()
			return m.bringUpWith(ctx, b, true)
		}()
		if errors.Is(err, errNeedSlot) { // cannot happen with a slot; do not spin
			return netip.AddrPort{}, err
		}
		return ep, err
	}
}

// heavyLocked guesses whether b's bring-up will create or start a
// container. Caller holds m.mu.
func (m *Manager) heavyLocked(b *box) bool {
	switch b.state {
	case Paused, Pausing, Running, Started:
		return false
	case Unknown:
		return b.name != "" || m.readyPoolLocked() == 0 // a new user takes from the pool
	}
	return true
}

// bringUpWith does the work; without a slot it stops with errNeedSlot
// where heavy work begins.
func (m *Manager) bringUpWith(ctx context.Context, b *box, slot bool) (netip.AddrPort, error) {
	row, claimToken, err := m.sandboxRow(ctx, b, slot)
	if err != nil {
		return netip.AddrPort{}, err
	}
	m.noteRow(b, row)
	if ep, ok := m.resumable(b, row, claimToken); ok {
		if err := m.makeRoom(ctx, b); err != nil {
			return netip.AddrPort{}, err
		}
		start := time.Now()
		if err := m.pauser.Unpause(ctx, row.ContainerID); err == nil {
			m.metrics.Unpause.Observe(time.Since(start).Seconds())
			return m.serving(ctx, b, row, row.ContainerID, ep, "paused")
		}
		// Changed behind the manager's back after all: look at it.
	}
	n := m.names(row.Name)
	c, err := m.eng.Inspect(ctx, n)
	if err == nil || errors.Is(err, ErrNotFound) { // read now: earlier events are answered
		m.mu.Lock()
		delete(m.looks, b)
		m.mu.Unlock()
	}
	switch {
	case errors.Is(err, ErrNotFound):
		if !slot {
			return netip.AddrPort{}, errNeedSlot
		}
		if err := m.makeRoom(ctx, b); err != nil {
			return netip.AddrPort{}, err
		}
		if c, err = m.provision(ctx, n, &row); err != nil {
			return netip.AddrPort{}, err
		}
	case err != nil:
		return netip.AddrPort{}, err
	}

	tier := ""
	switch c.Status {
	case StatusRunning:
	case StatusPaused:
		tier = "paused"
		if m.pauser == nil {
			return netip.AddrPort{}, fmt.Errorf("sandbox %s is paused on an engine that cannot unpause", row.Name)
		}
		if err := m.makeRoom(ctx, b); err != nil {
			return netip.AddrPort{}, err
		}
		start := time.Now()
		if err := m.pauser.Unpause(ctx, c.ID); err != nil {
			return netip.AddrPort{}, err
		}
		m.metrics.Unpause.Observe(time.Since(start).Seconds())
	case StatusStopped:
		if !slot {
			return netip.AddrPort{}, errNeedSlot
		}
		tier = "stopped"
		if err := m.makeRoom(ctx, b); err != nil {
			return netip.AddrPort{}, err
		}
		start := time.Now()
		if m.nets != nil && row.NetworkID != "" { // Caddy may have been recreated since.
			if err := m.nets.ConnectGateway(ctx, n, row.NetworkID, row.Subnet); err != nil {
				return netip.AddrPort{}, err
			}
		}
		if err := m.eng.Start(ctx, c.ID); err != nil {
			return netip.AddrPort{}, err
		}
		m.metrics.Start.Observe(time.Since(start).Seconds())
	default:
		return netip.AddrPort{}, fmt.Errorf("sandbox %s is %s", row.Name, c.Status)
	}

	ep, err := m.endpoint(ctx, n, row.Subnet, c)
	if err != nil {
		return netip.AddrPort{}, err
	}
	bound := false
	if claimToken != "" { // just claimed from the pool: bind in one call
		if bound, err = m.bindClaimed(ctx, b, row, ep, claimToken, slot); err != nil {
			return netip.AddrPort{}, err
		}
	}
	if !bound {
		h, err := m.waitHealthy(ctx, n, ep)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("sandbox %s not ready: %w", row.Name, err)
		}
		if err := m.bind(ctx, b, &row, ep, h.Claimed, h.User, slot); err != nil {
			return netip.AddrPort{}, err
		}
	}
	return m.serving(ctx, b, row, c.ID, ep, tier)
}

// resumable reports whether b's sandbox can be resumed from paused on
// what the manager knows, without asking the engine first or the agent
// after: this manager paused it after its agent answered /pause (frozen;
// a hung agent, or a pause behind its back, is probed after the unpause)
// and no engine event came since (a changed container is looked at), on
// an engine whose
// sandboxes have addresses of their own (Docker: the row's endpoint is
// the user's network's), and the stored row says paused in that
// container. The agent reopens its storage on its next request.
func (m *Manager) resumable(b *box, row registry.Sandbox, claimToken string) (netip.AddrPort, bool) {
	if m.pauser == nil || m.nets == nil || claimToken != "" || row.ContainerID == "" || storedState(row.State) != Paused {
		return netip.AddrPort{}, false
	}
	ep, err := netip.ParseAddrPort(row.Endpoint)
	if err != nil {
		return netip.AddrPort{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ok := b.state == Paused && b.frozen && !m.looks[b]
	b.frozen = false // once: a fallback or a later resume looks again
	return ep, ok
}

// serving records that b's sandbox runs container id at ep and serves
// (the row, then the box), and audits a resume from tier.
func (m *Manager) serving(ctx context.Context, b *box, row registry.Sandbox, id string, ep netip.AddrPort, tier string) (netip.AddrPort, error) {
	row.State, row.ContainerID, row.Endpoint = registry.StateRunning, id, ep.String()
	m.mu.Lock()
	row.LastActiveAt, row.WakeAt = b.lastActive, nil
	b.wakeAt, b.silent = nil, false
	m.mu.Unlock()
	if err := m.reg.UpdateSandbox(ctx, row); err != nil {
		return netip.AddrPort{}, err
	}
	m.setState(b, Running, ep)
	if tier != "" {
		m.audit(b.user, "sandbox."+map[string]string{"paused": "unpaused", "stopped": "started"}[tier], nil)
	}
	return ep, nil
}

// sandboxRow returns b's registry row. A user without one takes a ready
// sandbox from the warm pool (and the gateway token the claim stored the
// hash of, for bindClaimed) or, failing that (and holding a slot), gets a
// new row named after them.
func (m *Manager) sandboxRow(ctx context.Context, b *box, slot bool) (row registry.Sandbox, claimToken string, err error) {
	row, err = m.reg.Sandbox(ctx, b.user)
	if !errors.Is(err, registry.ErrNotFound) {
		return row, "", err
	}
	if row, token, err := m.claim(ctx, b); err == nil {
		return row, token, nil
	} else if !errors.Is(err, registry.ErrNotFound) {
		return registry.Sandbox{}, "", err
	}
	if !slot {
		return registry.Sandbox{}, "", errNeedSlot
	}
	row, err = m.reg.CreateSandbox(ctx, b.user, m.pickSubnet)
	if err != nil {
		return registry.Sandbox{}, "", err
	}
	m.audit(b.user, "sandbox.allocated", map[string]any{"subnet": row.Subnet.String()})
	return row, "", nil
}

// provision creates network, volumes and container for a sandbox whose
// container does not exist, under the names the registry records (so a
// sandbox from the pool keeps its volumes). Every step is idempotent, so a
// manager killed half way resumes here without a second copy of anything.
func (m *Manager) provision(ctx context.Context, n Names, row *registry.Sandbox) (Container, error) {
	start := time.Now()
	netID, err := m.makeObjects(ctx, n, row.Subnet)
	if err != nil {
		return Container{}, err
	}
	row.NetworkID, row.State = netID, registry.StateProvisioning
	if err := m.reg.UpdateSandbox(ctx, *row); err != nil {
		return Container{}, err
	}
	c, err := m.eng.Create(ctx, n, row.Subnet)
	if err != nil {
		return Container{}, err
	}
	m.metrics.Provision.Observe(time.Since(start).Seconds())
	m.audit(row.UserID, "sandbox.created", map[string]any{"container": c.ID, "network": netID, "sandbox": n.Sandbox})
	return c, nil
}

// makeObjects ensures a sandbox's volumes and, on an engine with networks,
// its network joined by the gateway (whose id it returns).
func (m *Manager) makeObjects(ctx context.Context, n Names, sn netip.Prefix) (string, error) {
	netID := ""
	if m.nets != nil {
		id, err := m.nets.EnsureNetwork(ctx, n, sn)
		if err != nil {
			return "", err
		}
		netID = id
	}
	if err := m.eng.EnsureVolumes(ctx, n); err != nil {
		return "", err
	}
	if m.nets != nil {
		if err := m.nets.ConnectGateway(ctx, n, netID, sn); err != nil {
			return "", err
		}
	}
	return netID, nil
}
