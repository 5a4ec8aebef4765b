package lifecycle

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/affido/affido/manager/provision"
)

// StateCounts returns how many known sandboxes are in each state.
func (m *Manager) StateCounts() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for _, b := range m.boxes {
		out[b.state]++
	}
	return out
}

// Run follows Docker's event stream (reconciling on every connect) and runs
// the idle-tier and wake scans until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	go m.followEvents(ctx)
	for {
		// Every tick, and exactly when the next wake must start (a tick of
		// a second would make reminders up to a second late).
		wait := m.cfg.Tick
		if next := m.nextWake(); !next.IsZero() {
			wait = max(min(wait, time.Until(next)), time.Millisecond)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			m.scan(ctx)
		}
	}
}

func (m *Manager) followEvents(ctx context.Context) {
	for ctx.Err() == nil {
		evs, errc := m.eng.Events(ctx)
		if err := m.Reconcile(ctx); err != nil {
			m.log.Error("reconcile", "err", err)
		} else {
			m.eventsUp.Store(true)
		}
	loop:
		for {
			select {
			case ev, ok := <-evs:
				if !ok {
					break loop
				}
				m.onEvent(ctx, ev)
			case err := <-errc:
				m.log.Warn("docker event stream broke; reconnecting", "err", err)
				break loop
			case <-ctx.Done():
				return
			}
		}
		m.eventsUp.Store(false)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (m *Manager) onEvent(ctx context.Context, ev provision.Event) {
	if ev.User == "" {
		if ev.Action == "start" { // Caddy restarted: it lost its user networks
			go func() {
				if err := m.Reconcile(ctx); err != nil {
					m.log.Error("reconcile after gateway start", "err", err)
				}
			}()
		}
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.boxes[ev.User]
	if b == nil {
		return
	}
	switch ev.Action {
	case "pause", "unpause", "start", "die", "stop", "kill", "oom", "destroy", "restart":
		b.dirty = true
	}
	switch ev.Action {
	case "pause":
		b.state = "paused"
	case "die":
		b.state = "stopped"
		go m.afterDeath(ctx, b)
	case "destroy":
		b.state = "removed"
	}
}

// Reconcile compares the registry with the labelled Docker objects: known
// sandboxes are adopted as they are, Caddy is joined to their networks
// again, and unknown objects are reported, never removed.
func (m *Manager) Reconcile(ctx context.Context) error {
	inv, err := m.eng.List(ctx)
	if err != nil {
		return err
	}
	rows, err := m.reg.Sandboxes(ctx)
	if err != nil {
		return err
	}
	joined, err := m.eng.GatewayNetworks(ctx)
	if err != nil {
		m.log.Warn("reconcile: cannot list the gateway's networks", "err", err)
		joined = map[string]bool{}
	}
	known := map[string]bool{}
	for _, r := range rows {
		known[r.UserID] = true
		b := m.box(r.UserID)
		n, err := m.eng.Names(r.UserID)
		if err != nil {
			continue
		}
		if r.NetworkID != "" && len(inv.Networks[r.UserID]) > 0 && !joined[n.Network()] {
			if err := m.eng.ConnectGateway(ctx, n, r.NetworkID, r.Subnet); err != nil {
				m.log.Warn("reconcile: gateway not joined", "user", r.UserID, "err", err)
			}
		}
		state := "removed"
		if cs := inv.Containers[r.UserID]; len(cs) > 0 {
			state = dockerState(cs[0].Status)
		}
		m.mu.Lock()
		b.subnet, b.wakeAt, b.reported = r.Subnet, r.WakeAt, r.ReportedWakeAt
		if b.state == "unknown" {
			b.lastActive = r.LastActiveAt
			if state == "running" { // unseen while the manager was away: give it a fresh idle period
				b.lastActive = m.now()
			}
		}
		b.state, b.dirty = state, false
		b.endpoint = netip.AddrPort{}
		if state == "running" {
			b.endpoint = netip.AddrPortFrom(provision.SandboxIP(r.Subnet), 8080)
			b.dirty = true // verify health on first use
		}
		m.mu.Unlock()
	}
	unknown := 0
	for u, cs := range inv.Containers {
		if !known[u] {
			unknown += len(cs)
		}
	}
	for u, ns := range inv.Networks {
		if !known[u] {
			unknown += len(ns)
		}
	}
	for u, vs := range inv.Volumes {
		if !known[u] {
			unknown += len(vs)
		}
	}
	m.metrics.Unknown.Set(float64(unknown))
	if unknown > 0 {
		m.log.Warn("reconcile: labelled objects without a registry row (remove with affido admin reset USER)", "count", unknown)
	}
	m.log.Info("reconciled", "sandboxes", len(rows), "unknown_objects", unknown)
	return nil
}

func dockerState(status string) string {
	switch status {
	case "running", "paused":
		return status
	case "created", "exited", "dead":
		return "stopped"
	}
	return "unknown"
}

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
		state, dirty, idle, wakeAt := b.state, b.dirty, now.Sub(b.lastActive), b.wakeAt
		lead := m.lead(state)
		m.mu.Unlock()
		if wakeAt != nil && !now.Before(wakeAt.Add(-lead)) && state != "running" {
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
		_, err := m.pause(ctx, b)
		return err
	case Stop:
		return m.stop(ctx, b)
	case Remove:
		return m.remove(ctx, b)
	}
	return nil
}

// refresh reads b's state from Docker. Caller holds b.op.
func (m *Manager) refresh(ctx context.Context, b *box) {
	n, err := m.eng.Names(b.user)
	if err != nil {
		return
	}
	c, err := m.eng.Inspect(ctx, n)
	state := "unknown"
	switch {
	case errors.Is(err, provision.ErrNotFound):
		state = "removed"
	case err == nil:
		state = dockerState(c.Status)
	default:
		return
	}
	ep := netip.AddrPort{}
	if state == "running" {
		ep = c.Endpoint
	}
	m.setState(b, state, ep)
}

// wake brings a sleeping sandbox up at its stored deadline and tells the
// agent to run its due work.
func (m *Manager) wake(ctx context.Context, b *box, due time.Time, tier string) {
	if !b.op.TryLock() {
		return
	}
	defer b.op.Unlock()
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ProvisionTimeout)
	defer cancel()
	begin := time.Now()
	ep, err := m.ensureRunning(ctx, b)
	if err != nil {
		m.log.Warn("wake: sandbox did not come up", "user", b.user, "err", err)
		return
	}
	if err := m.agent.Wake(ctx, ep); err != nil {
		m.log.Warn("wake: agent /wake failed", "user", b.user, "err", err)
	} else {
		m.noteResume(tier, time.Since(begin))
	}
	m.metrics.Wake.Observe(time.Since(due).Seconds())
	m.mu.Lock()
	b.lastActive = m.now()
	m.mu.Unlock()
	m.audit(b.user, "sandbox.woken", map[string]any{"due": due.UTC().Format(time.RFC3339Nano)})
}
