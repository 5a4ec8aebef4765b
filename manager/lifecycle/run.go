package lifecycle

import (
	"context"
	"time"
)

// Run follows the engine's event stream (adopting what it finds on every
// connect), keeps the warm pool full and reconciles every sandbox until
// ctx ends: all of them every Tick, queued ones at once, and exactly when
// the earliest next step is due (a tick of a second would make reminders
// up to a second late). Every step, a request's bring-up too, runs on ctx.
func (m *Manager) Run(ctx context.Context) {
	go m.followEvents(ctx)
	go m.fillPool(ctx)
	lastScan := time.Time{}
	next := time.Now()
	for {
		wait := max(min(m.cfg.Tick, time.Until(next)), time.Millisecond)
		t := time.NewTimer(wait)
		p := passDue
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-m.kick:
			t.Stop()
			p = passQueued
		case <-t.C:
			if time.Since(lastScan) >= m.cfg.Tick {
				p, lastScan = passAll, time.Now()
			}
		}
		next = time.Now().Add(m.cfg.Tick)
		if after := m.reconcilePass(ctx, p); after != never {
			next = earliest(next, time.Now().Add(after))
		}
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (m *Manager) followEvents(ctx context.Context) {
	for ctx.Err() == nil {
		evs, errc := m.eng.Events(ctx)
		// A failed read (Postgres or the engine not answering yet) is
		// tried again every second while the events are followed: until
		// one succeeds, nothing is adopted and the pool does not fill.
		var retry <-chan time.Time
		adopt := func() {
			if err := m.Adopt(ctx); err != nil {
				m.log.Error("reconcile", "err", err)
				retry = time.After(time.Second)
				return
			}
			retry = nil
			m.eventsUp.Store(true)
		}
		adopt()
	loop:
		for {
			select {
			case <-retry:
				adopt()
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

// onEvent queues the sandbox an engine event names for a look, unless the
// event says what the manager already knows (its own start, pause, stop or
// removal): reconcile's look asks the engine what changed (and tells a
// death from a stop). An event may arrive late, after later changes, so it
// only ever asks for a look; the state stays what the manager last saw
// until the engine is read. A start without a sandbox is
// the gateway's: Caddy lost its sandbox networks, so everything is adopted
// again.
func (m *Manager) onEvent(ctx context.Context, ev Event) {
	if ev.Sandbox == "" {
		if ev.Kind == EventStarted {
			// Until it is joined to them again, a resume must go through
			// the probe, which waits for that (Adopt, below).
			m.mu.Lock()
			for _, b := range m.boxes {
				b.frozen = false
			}
			m.mu.Unlock()
			go func() {
				if err := m.Adopt(ctx); err != nil {
					m.log.Error("adopt after gateway start", "err", err)
				}
			}()
		}
		return
	}
	m.mu.Lock()
	b := m.boxes[m.byName[ev.Sandbox]]
	if b == nil {
		m.mu.Unlock()
		return // a pool sandbox, or one not seen yet
	}
	// A sandbox in a step's transitional state is left to that step: its
	// outcome is newer than the event, and a failure there makes it Unknown.
	known := b.state == Provisioning || b.state == Pausing
	switch ev.Kind {
	case EventStarted, EventUnpaused:
		known = known || b.state.up()
	case EventPaused:
		known = known || b.state == Paused
	case EventDied, EventChanged:
		known = known || b.state == Stopped || b.state == Removed
	case EventRemoved:
		known = known || b.state == Removed
	}
	if !known {
		m.looks[b] = true
	}
	m.mu.Unlock()
	if !known {
		if m.onUnserve != nil { // not a promise, the sandbox's health: do not hold the events up
			go m.onUnserve(b.user)
		}
		m.queue(b.user)
	}
}
