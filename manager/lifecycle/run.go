package lifecycle

import (
	"context"
	"time"

	"github.com/affido/affido/manager/provision"
)

// Run follows the engine's event stream (reconciling on every connect),
// keeps the warm pool full and runs the idle-tier and wake scans until ctx
// ends. Bring-ups started by requests run on ctx too.
func (m *Manager) Run(ctx context.Context) {
	m.mu.Lock()
	m.base = ctx
	m.mu.Unlock()
	go m.followEvents(ctx)
	go m.fillPool(ctx)
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
				m.log.Warn("engine event stream broke; reconnecting", "err", err)
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
	if ev.Sandbox == "" {
		if ev.Action == "start" { // Caddy restarted: it lost its sandbox networks
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
	b := m.boxes[m.byName[ev.Sandbox]]
	if b == nil {
		return // a pool sandbox, or one not seen yet
	}
	switch ev.Action {
	case "pause", "unpause", "start", "die", "stop", "kill", "oom", "destroy", "restart":
		b.dirty = true
	}
	switch ev.Action {
	case "pause":
		b.state = Paused
	case "die":
		b.state = Stopped
		go m.afterDeath(ctx, b)
	case "destroy":
		b.state = Removed
	}
}
