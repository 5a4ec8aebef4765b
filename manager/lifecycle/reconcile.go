package lifecycle

import (
	"context"
	"errors"
	"math"
	"net/netip"
	"time"
)

// The per-sandbox loop, in the style of controller-runtime: reconcile
// reads what the manager knows of one sandbox, decide picks the one next
// step (a pure function of that view, the tiers and the clock), the step
// runs under the sandbox's op lock, and reconcile says when to look again.
// Requests (Resolve), engine events, stored wake times and the scan (every
// Tick) only queue names for it.

// step is what reconcile does next for one sandbox.
type step int

const (
	stepNone   step = iota
	stepUp          // a request waits: bring it up and answer the request
	stepLook        // an engine event arrived: read the engine before anything else
	stepWake        // its stored wake time (less the lead) has come: bring it up, POST /wake
	stepPause       // the idle tiers, each through goDown
	stepStop        //
	stepRemove      //
)

func (s step) String() string {
	return [...]string{"none", "up", "look", "wake", "pause", "stop", "remove"}[s]
}

// never is "no step is coming".
const never = time.Duration(math.MaxInt64)

// view is what decide knows of one sandbox.
type view struct {
	state        State
	look         bool          // an engine event came since the manager last read the engine
	named        bool          // the registry names a sandbox for it
	wanted       bool          // a request waits for it to serve
	idle         time.Duration // since the last activating request
	sinceRequest time.Duration // since the last request of any kind
	hasWake      bool
	untilWake    time.Duration // until the wake must start (its time less the lead); due at <= 0
	// hasDue: the agent's next due time is known and ahead (nextDueLocked);
	// untilDue is how far. lead is, by the tier an Action goes down to, how
	// long before a due time a wake from there must start.
	hasDue   bool
	untilDue time.Duration
	lead     [4]time.Duration
}

// decide returns the next step for a sandbox and, when there is none yet,
// how long until one may be due (never: only a request or an event can
// change that).
func decide(v view, t Tiers, grace time.Duration) (step, time.Duration) {
	if v.wanted && (v.state != Running || v.look) {
		return stepUp, 0 // whatever the state: the bring-up reads registry and engine itself
	}
	if !v.named {
		return stepNone, never // nobody's sandbox yet: only a request makes one
	}
	if v.look || v.state == Unknown {
		return stepLook, 0
	}
	if v.state.down() && v.hasWake && v.untilWake <= 0 {
		return stepWake, 0
	}
	a := t.Next(v.state, v.idle)
	if a != Keep && v.hasDue && v.untilDue < v.lead[a] {
		// Down to a's tier now, it would have to be woken at once (or be
		// late): it stays as it is until the due time has passed (up: the
		// agent runs the work itself) or its wake comes (down).
		if v.state.down() && v.hasWake {
			return stepNone, v.untilWake
		}
		return stepNone, v.untilDue
	}
	switch a {
	case Pause:
		if v.sinceRequest < grace {
			return stepNone, grace - v.sinceRequest
		}
		return stepPause, 0
	case Stop:
		if v.state.up() && v.sinceRequest < grace {
			return stepNone, grace - v.sinceRequest
		}
		return stepStop, 0
	case Remove:
		if v.state.up() && v.sinceRequest < grace {
			return stepNone, grace - v.sinceRequest
		}
		return stepRemove, 0
	}
	after := t.until(v.state, v.idle)
	if v.state.down() && v.hasWake {
		after = min(after, v.untilWake)
	}
	return stepNone, after
}

// viewLocked is b as decide sees it at now. Caller holds m.mu.
func (m *Manager) viewLocked(b *box, now time.Time) view {
	v := view{state: b.state, look: m.looks[b], named: b.name != "", wanted: !b.wanted.IsZero(),
		idle: now.Sub(b.lastActive), sinceRequest: now.Sub(b.lastRequest)}
	if b.wakeAt != nil {
		v.hasWake, v.untilWake = true, b.wakeAt.Add(-m.wakeLeadLocked(b)).Sub(now)
	}
	if due := m.nextDueLocked(b, now); !due.IsZero() {
		v.hasDue, v.untilDue = true, due.Sub(now)
	}
	pause := Paused
	if m.pauser == nil { // the first tier stops
		pause = Stopped
	}
	v.lead = [4]time.Duration{Pause: m.lead(pause), Stop: m.lead(Stopped), Remove: m.lead(Removed)}
	return v
}

// reconcile takes b's next step, if one is due, and returns how long until
// it should look again. A step runs in the background under b.op, one at a
// time per sandbox; a sandbox whose op is taken is queued again when the
// step that holds it ends (withOp).
func (m *Manager) reconcile(ctx context.Context, b *box) time.Duration {
	now := m.now()
	m.mu.Lock()
	s, after := decide(m.viewLocked(b, now), m.cfg.Tiers, m.cfg.RequestGrace)
	m.mu.Unlock()
	if s == stepNone {
		return after
	}
	if !b.op.TryLock() {
		return m.cfg.Tick
	}
	// A step that held the op until just now may have changed what is due
	// (a bring-up answered the request this view saw waiting): decide
	// again, holding the op, so a stale step is never taken.
	m.mu.Lock()
	s, after = decide(m.viewLocked(b, m.now()), m.cfg.Tiers, m.cfg.RequestGrace)
	m.mu.Unlock()
	if s == stepNone {
		m.unlockOp(b)
		return after
	}
	go func() {
		defer m.unlockOp(b)
		m.take(ctx, b, s)
	}()
	return m.cfg.Tick
}

// unlockOp ends a step on b. A request that came meanwhile is looked at at
// once; anything else waits for its time (a wake that failed is tried again
// at the next look, not in a tight loop).
func (m *Manager) unlockOp(b *box) {
	b.op.Unlock()
	m.mu.Lock()
	wanted := !b.wanted.IsZero()
	m.mu.Unlock()
	if wanted {
		m.queue(b.user)
	}
}

// take runs step s on b, and after a look the step the engine's answer
// calls for. Caller holds b.op.
func (m *Manager) take(ctx context.Context, b *box, s step) {
	if s == stepLook {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		m.look(lctx, b)
		cancel()
		now := m.now()
		m.mu.Lock()
		s, _ = decide(m.viewLocked(b, now), m.cfg.Tiers, m.cfg.RequestGrace)
		m.mu.Unlock()
	}
	switch s {
	case stepUp:
		m.mu.Lock()
		tier := b.state
		m.mu.Unlock()
		begin := time.Now()
		if _, err := m.up(ctx, b); err == nil {
			m.noteResume(tier, time.Since(begin))
		}
		return
	case stepWake:
		m.wake(ctx, b)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var err error
	switch s {
	case stepPause:
		_, err = m.goDown(ctx, b, Paused, causeIdle)
	case stepStop:
		_, err = m.goDown(ctx, b, Stopped, causeIdle)
	case stepRemove:
		_, err = m.goDown(ctx, b, Removed, causeIdle)
	}
	if err != nil {
		m.log.Warn("idle tier", "user", b.user, "step", s.String(), "err", err)
	}
}

// look reads b's state from the engine after an event; a container found
// down that the registry still says runs has died (wake.go). Caller holds
// b.op.
func (m *Manager) look(ctx context.Context, b *box) {
	m.refresh(ctx, b)
	m.mu.Lock()
	down := b.state.down()
	m.mu.Unlock()
	if down {
		m.afterDeath(ctx, b)
	}
}

// refresh reads b's state from the engine. Caller holds b.op.
func (m *Manager) refresh(ctx context.Context, b *box) {
	m.mu.Lock()
	name := b.name
	m.mu.Unlock()
	c, err := m.eng.Inspect(ctx, m.names(name))
	state := Unknown
	switch {
	case errors.Is(err, ErrNotFound):
		state = Removed
	case err == nil:
		state = engineState(c.Status)
	default:
		return
	}
	ep := netip.AddrPort{}
	if state.up() {
		ep = c.Endpoint
	}
	m.setState(b, state, ep)
	m.mu.Lock()
	delete(m.looks, b)
	m.mu.Unlock()
}

// queue asks the loop to reconcile user's sandbox now.
func (m *Manager) queue(user string) {
	m.mu.Lock()
	m.queued[user] = true
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// pass says which sandboxes a pass of the loop reconciles.
type pass int

const (
	passAll    pass = iota // the periodic scan: every known sandbox
	passQueued             // the ones queued since the last pass
	passDue                // the ones whose last reconcile asked to be looked at by now
)

// reconcilePass reconciles the sandboxes p names and returns when the loop
// should look next (never: nothing is due before the next scan).
func (m *Manager) reconcilePass(ctx context.Context, p pass) time.Duration {
	now := m.now()
	m.mu.Lock()
	var boxes []*box
	switch p {
	case passAll:
		clear(m.lookAt) // made anew: sandboxes reset meanwhile drop out
		boxes = make([]*box, 0, len(m.boxes))
		for _, b := range m.boxes {
			boxes = append(boxes, b)
		}
	case passQueued:
		for user := range m.queued {
			if b := m.boxes[user]; b != nil {
				boxes = append(boxes, b)
			}
		}
		clear(m.queued)
	case passDue:
		for b, at := range m.lookAt {
			if m.boxes[b.user] != b { // reset meanwhile
				delete(m.lookAt, b)
				continue
			}
			if !at.After(now) {
				boxes = append(boxes, b)
			}
		}
	}
	m.mu.Unlock()
	for _, b := range boxes {
		after := m.reconcile(ctx, b)
		m.mu.Lock()
		if after == never {
			delete(m.lookAt, b)
		} else {
			m.lookAt[b] = now.Add(after)
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	next := never
	for _, at := range m.lookAt {
		next = min(next, max(at.Sub(now), 0))
	}
	return next
}
