package lifecycle

import (
	"context"
	"net/netip"

	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/subnet"
)

// Adopt compares the registry with the labelled engine objects. Users'
// sandboxes are adopted as they are and the gateway joined to their
// networks again. Pool sandboxes that are ready (running, or paused as an
// older manager left them, from this image) are adopted; the rest — half built when a manager died, or from an older
// image — are retired, and pool objects no row names are removed (they
// never held anyone's data). Other unknown objects are reported, never
// removed. A sandbox claimed just before a crash is a user's row already:
// it is adopted, and its agent is bound on the way up.
func (m *Manager) Adopt(ctx context.Context) error {
	inv, err := m.eng.List(ctx)
	if err != nil {
		return err
	}
	// What this manager's pool held ready before the reads. Any other entry
	// is a build of this manager's, begun before or during the reads: its
	// outcome is its own to record (ready, or retired on failure), whatever
	// the reads saw of it.
	m.mu.Lock()
	readyBefore := make(map[string]bool, len(m.pool))
	for name, pb := range m.pool {
		readyBefore[name] = !pb.building
	}
	m.mu.Unlock()
	// The pool first: a claim moves a row from the pool to the users', so
	// one of the two reads sees every sandbox, and none is taken for an
	// orphan while it is claimed.
	pools, err := m.reg.PoolSandboxes(ctx)
	if err != nil {
		return err
	}
	rows, err := m.reg.Sandboxes(ctx)
	if err != nil {
		return err
	}
	joined := map[string]bool{}
	if m.nets != nil {
		if joined, err = m.nets.GatewaySandboxes(ctx); err != nil {
			m.log.Warn("reconcile: cannot list the gateway's networks", "err", err)
			joined = map[string]bool{}
		}
	}
	known := map[string]bool{}
	for _, r := range rows {
		known[r.Name] = true
		m.adopt(ctx, r, inv, joined)
	}
	// The ready pool is what the registry holds now (another manager may
	// have claimed some), plus what this manager is building.
	ready := map[string]*poolBox{}
	var retire []string
	for _, p := range pools {
		m.mu.Lock()
		pb := m.pool[p.Name]
		ours := pb != nil && (pb.building || !readyBefore[p.Name]) // a build of this manager's
		m.mu.Unlock()
		if known[p.Name] || ours { // claimed between the two reads (a user's now), or ours to finish
			known[p.Name] = true
			continue
		}
		known[p.Name] = true
		cs := inv.Containers[p.Name]
		if p.State == registry.PoolReady && p.Image == m.cfg.ImageID && len(cs) == 1 && (cs[0].Status == StatusRunning || cs[0].Status == StatusPaused) {
			ready[p.Name] = &poolBox{name: p.Name}
			continue
		}
		retire = append(retire, p.Name)
	}
	m.mu.Lock()
	for name, pb := range m.pool {
		// A build of this manager's (still going, or done since it was
		// looked at; a build that failed has left m.pool).
		if pb.building || !readyBefore[name] {
			ready[name] = pb
		}
	}
	m.pool = ready
	m.mu.Unlock()
	for _, name := range retire {
		m.retirePool(ctx, name)
	}
	unknown := 0
	for _, name := range inv.Names() {
		if known[name] {
			continue
		}
		m.mu.Lock()
		_, building := m.pool[name]
		m.mu.Unlock()
		if IsPoolName(name) && !building {
			if err := m.eng.RemoveAll(ctx, m.names(name)); err != nil {
				m.log.Warn("reconcile: orphaned pool objects not removed", "sandbox", name, "err", err)
			}
			continue
		}
		unknown += inv.Count(name)
	}
	m.metrics.Unknown.Set(float64(unknown))
	if unknown > 0 {
		m.log.Warn("reconcile: labelled objects without a registry row (remove with affido admin reset USER)", "count", unknown)
	}
	m.mu.Lock()
	nready := m.readyPoolLocked()
	m.mu.Unlock()
	m.log.Info("reconciled", "sandboxes", len(rows), "pool_ready", nready, "pool_retired", len(retire), "unknown_objects", unknown)
	m.adoptedOnce.Do(func() { close(m.adopted) }) // the pool may fill now
	m.kickPool()
	return nil
}

// adopt takes one user's row and its container as the engine has it.
func (m *Manager) adopt(ctx context.Context, r registry.Sandbox, inv Inventory, joined map[string]bool) {
	b := m.box(r.UserID)
	m.noteRow(b, r)
	n := m.names(r.Name)
	if m.nets != nil && r.NetworkID != "" && len(inv.Networks[r.Name]) > 0 && !joined[r.Name] {
		if err := m.nets.ConnectGateway(ctx, n, r.NetworkID, r.Subnet); err != nil {
			m.log.Warn("reconcile: gateway not joined", "user", r.UserID, "err", err)
		}
	}
	state, ep := Removed, netip.AddrPort{}
	if cs := inv.Containers[r.Name]; len(cs) > 0 {
		state, ep = engineState(cs[0].Status), cs[0].Endpoint
	}
	if m.nets != nil || !ep.IsValid() {
		ep = netip.AddrPortFrom(subnet.SandboxIP(r.Subnet), 8080)
	}
	if !b.op.TryLock() { // a step is under way; it knows better
		return
	}
	defer b.op.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	b.subnet, b.wakeAt, b.reported = r.Subnet, r.WakeAt, r.ReportedWakeAt
	if b.state == Unknown {
		b.lastActive = r.LastActiveAt
		if state.up() { // unseen while the manager was away: give it a fresh idle period
			b.lastActive = m.now()
		}
	}
	b.state, b.endpoint = state, netip.AddrPort{} // Started, not Running: a request checks its agent first
	b.frozen = false                              // what the engine says now, not a pause this manager made
	delete(m.looks, b)
	if state.up() {
		b.endpoint = ep
	}
}
