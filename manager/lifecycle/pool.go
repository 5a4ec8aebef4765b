package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/affido/affido/manager/registry"
)

// poolBox is one warm-pool sandbox: being built, or ready (its agent
// answered /health and is nobody's). A ready one is left running, not
// paused: an unclaimed agent does nothing (it answers only /health and
// /claim, its storage unopened; no CPU time in 30 s idle, measured) and
// holds the memory a paused one would, and a claim then costs no unpause,
// which was most of it (docs/operations.md, Performance).
type poolBox struct {
	name     string
	building bool
}

// readyPoolLocked counts the pool sandboxes that can be claimed. Caller
// holds m.mu.
func (m *Manager) readyPoolLocked() int {
	n := 0
	for _, p := range m.pool {
		if !p.building {
			n++
		}
	}
	return n
}

// SetPool changes the warm pool's size; with drain, every ready pool
// sandbox is retired first and the pool built anew (a changed image).
func (m *Manager) SetPool(ctx context.Context, size int, drain bool) error {
	m.mu.Lock()
	m.cfg.WarmPool = max(size, 0)
	m.mu.Unlock()
	if drain {
		if err := m.drainPool(ctx, func(registry.PoolSandbox) bool { return true }); err != nil {
			return err
		}
	}
	m.kickPool()
	return nil
}

// PoolSize returns the pool's size and how many of it are ready now.
func (m *Manager) PoolSize() (size, ready int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cfg.WarmPool, m.readyPoolLocked()
}

func (m *Manager) kickPool() {
	select {
	case m.poolKick <- struct{}{}:
	default:
	}
}

// fillPool runs until ctx ends, from the first reconcile on, building pool
// sandboxes while the pool is short, one per free admission slot, never
// while a user waits for one and never past the running capacity.
func (m *Manager) fillPool(ctx context.Context) {
	// Not before the first reconcile: until it, this manager's view of the
	// pool is empty, and it would build a second pool beside the ready one.
	select {
	case <-m.adopted:
	case <-ctx.Done():
		return
	}
	backoff := time.Duration(0)
	t := time.NewTicker(m.cfg.Tick)
	defer t.Stop()
	results := make(chan error, 16)
	for {
		if backoff == 0 {
			for m.wantPool() {
				release, ok := m.adm.tryAcquire()
				if !ok {
					break
				}
				name := NewPoolName()
				m.mu.Lock()
				m.pool[name] = &poolBox{name: name, building: true}
				m.mu.Unlock()
				go func() {
					defer release()
					results <- m.buildPool(ctx, name)
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case err := <-results:
			if err != nil {
				backoff = min(max(2*backoff, time.Second), time.Minute)
				m.log.Warn("warm pool: building a sandbox failed; trying again later", "err", err, "in", backoff)
			} else {
				backoff = 0
			}
		case <-m.poolKick:
		case <-t.C:
			if backoff > 0 {
				backoff -= min(backoff, m.cfg.Tick)
			}
		}
	}
}

// wantPool reports whether the pool should grow by one now.
func (m *Manager) wantPool() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pool) >= m.cfg.WarmPool {
		return false
	}
	return m.cfg.MaxRunning <= 0 || m.runningLocked(nil) < m.cfg.MaxRunning
}

// buildPool makes one pool sandbox: its row first (so a crash leaves
// nothing unnamed), then network, volumes and container, started until the
// agent answers, then marked ready.
func (m *Manager) buildPool(ctx context.Context, name string) (err error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.BringUpTimeout)
	defer cancel()
	defer func() {
		if err != nil {
			m.retirePool(context.WithoutCancel(ctx), name)
		}
	}()
	start := time.Now()
	row, err := m.reg.CreatePoolSandbox(ctx, name, m.cfg.ImageID, m.pickSubnet)
	if err != nil {
		return err
	}
	n := m.names(name)
	if row.NetworkID, err = m.makeObjects(ctx, n, row.Subnet); err != nil {
		return err
	}
	c, err := m.eng.Create(ctx, n, row.Subnet)
	if err != nil {
		return err
	}
	row.ContainerID = c.ID
	if err := m.eng.Start(ctx, c.ID); err != nil {
		return err
	}
	ep, err := m.endpoint(ctx, n, row.Subnet, c)
	if err != nil {
		return err
	}
	h, err := m.waitHealthy(ctx, n, ep)
	if err != nil {
		return err
	}
	if h.Claimed {
		return fmt.Errorf("pool sandbox %s: its agent is claimed already (by %s)", name, h.User)
	}
	row.State = registry.PoolReady
	if err := m.reg.UpdatePoolSandbox(ctx, row); err != nil {
		return err
	}
	m.mu.Lock()
	if p := m.pool[name]; p != nil {
		p.building = false
	}
	m.mu.Unlock()
	m.metrics.Provision.Observe(time.Since(start).Seconds())
	m.log.Info("warm pool: sandbox ready", "sandbox", name, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// retirePool removes a pool sandbox: the row first, then its objects. A
// row already gone was claimed meanwhile (or never made, and then neither
// were its objects): nothing is removed.
func (m *Manager) retirePool(ctx context.Context, name string) {
	m.mu.Lock()
	delete(m.pool, name)
	m.mu.Unlock()
	if err := m.reg.DeletePoolSandbox(ctx, name); errors.Is(err, registry.ErrNotFound) {
		return
	} else if err != nil {
		m.log.Warn("warm pool: row not removed", "sandbox", name, "err", err)
		return
	}
	if err := m.eng.RemoveAll(ctx, m.names(name)); err != nil {
		m.log.Warn("warm pool: objects not removed (reconcile tries again)", "sandbox", name, "err", err)
	}
}

// drainPool retires the pool sandboxes (ready ones, and rows no build of
// this manager owns) that match.
func (m *Manager) drainPool(ctx context.Context, match func(registry.PoolSandbox) bool) error {
	rows, err := m.reg.PoolSandboxes(ctx)
	if err != nil {
		return err
	}
	for _, r := range rows {
		m.mu.Lock()
		p := m.pool[r.Name]
		building := p != nil && p.building
		m.mu.Unlock()
		if !building && match(r) {
			m.retirePool(ctx, r.Name)
		}
	}
	return nil
}
