package lifecycle

import (
	"context"
	"errors"
	"net/netip"
	"time"
)

// cause is why a sandbox goes down: it decides whether a busy agent may
// keep it up, and what the audit log calls the step.
type cause int

const (
	// causeIdle: the idle tiers. A busy agent keeps its sandbox up.
	causeIdle cause = iota
	// causeCapacity: room for another sandbox. A busy agent keeps its
	// sandbox up; the request that wanted room looks elsewhere.
	causeCapacity
	// causeEvict: an operator (affido admin evict, ./dev.sh reload). The
	// sandbox goes down even when its agent is busy; work in flight or
	// due is stored as due now, so the scheduler brings it back at once.
	causeEvict
)

func (c cause) String() string { return [...]string{"idle", "capacity", "evict"}[c] }

// goDown takes b's sandbox down to the tier to (Paused, Stopped or
// Removed), the one way every cause does it:
//
//  1. a running sandbox is quiesced: the agent closes its storage and
//     answers its next due time (or refuses while busy);
//  2. that time, or for a sandbox already down the one stored, is written
//     to the registry with the new state;
//  3. only then the engine acts.
//
// A crash between 2 and 3 leaves a stored wake the scheduler keeps; the
// other order could lose one. Where the engine cannot pause, Paused means
// Stopped. ok is false when the sandbox stays up. Caller holds b.op.
func (m *Manager) goDown(ctx context.Context, b *box, to State, why cause) (ok bool, err error) {
	if to == Paused && m.pauser == nil {
		to = Stopped
	}
	m.mu.Lock()
	look := b.state == Unknown || m.looks[b]
	m.mu.Unlock()
	if look {
		m.refresh(ctx, b)
	}
	m.mu.Lock()
	state, wakeAt, name := b.state, b.wakeAt, b.name
	m.mu.Unlock()
	switch {
	case state == to || state == Removed || (state == Stopped && to == Paused):
		return true, nil // there already, or deeper
	case state.up():
		if wakeAt, ok, err = m.quiesce(ctx, b, why); !ok || err != nil {
			return false, err
		}
	case wakeAt == nil:
		// Down already with no wake in memory (b.wakeAt mirrors the row's):
		// keep the registry's. Only a sandbox that went down behind the
		// manager's back (its row still says running) has none stored; its
		// agent's last report stands in.
		row, err := m.reg.Sandbox(ctx, b.user)
		if err != nil {
			return false, err
		}
		wakeAt = row.WakeAt
		if storedState(row.State) == Running {
			m.mu.Lock()
			wakeAt = b.reported
			m.mu.Unlock()
		}
	}

	c, err := m.eng.Inspect(ctx, m.names(name))
	if errors.Is(err, ErrNotFound) && to == Removed {
		err = nil
	}
	if err == nil {
		err = m.store(ctx, b, to, wakeAt)
	}
	if err == nil {
		err = m.engineDown(ctx, c, name, to)
	}
	if err != nil {
		m.mu.Lock()
		b.state = Started // most likely still up (it counts); a look asks the engine
		m.looks[b] = true
		m.mu.Unlock()
		m.queue(b.user)
		return false, err
	}
	m.setState(b, to, netip.AddrPort{})
	if to == Paused && state == Running && c.Status == StatusRunning {
		// Paused here, from Running (a bring-up of this manager saw its
		// agent answer, bound to this user; not an adopted Started one),
		// after the agent answered /pause: a resume may skip the probe.
		m.mu.Lock()
		b.frozen = !b.silent && !m.looks[b]
		m.mu.Unlock()
	}
	if wakeAt != nil {
		m.queue(b.user) // the loop's next look may now be the wake's
	}
	kind := map[State]string{Paused: "sandbox.paused", Stopped: "sandbox.stopped", Removed: "sandbox.removed"}[to]
	detail := wakeDetail(wakeAt)
	if why == causeEvict {
		kind = "sandbox.evicted"
		if detail == nil {
			detail = map[string]any{}
		}
		detail["sandbox"] = name
	}
	m.audit(b.user, kind, detail)
	return true, nil
}

// engineDown is step 3 of goDown: the engine's part.
func (m *Manager) engineDown(ctx context.Context, c Container, name string, to State) error {
	switch to {
	case Paused:
		if c.Status != StatusRunning {
			return nil
		}
		start := time.Now()
		if err := m.pauser.Pause(ctx, c.ID); err != nil {
			return err
		}
		m.metrics.Pause.Observe(time.Since(start).Seconds())
	case Stopped:
		if c.Status == StatusPaused && m.pauser != nil { // a frozen process cannot handle SIGTERM
			if err := m.pauser.Unpause(ctx, c.ID); err != nil {
				return err
			}
		}
		// Always: on Kubernetes "stopped" also covers a Pod that is not
		// (or no longer) Ready, which must still be deleted. Stop is
		// idempotent on every engine.
		return m.eng.Stop(ctx, c.ID)
	case Removed:
		return m.eng.RemoveContainer(ctx, m.names(name))
	}
	return nil
}

// quiesce readies a running sandbox for going down: unless evicted, it
// refuses within RequestGrace of any request (one may still be on its way);
// it marks the box Pausing so new requests wait for the outcome instead of
// reaching it, and asks the agent for its next due time (askIdle). ok is
// false when the sandbox must stay up; it is then as it was. Caller
// holds b.op.
func (m *Manager) quiesce(ctx context.Context, b *box, why cause) (wakeAt *time.Time, ok bool, err error) {
	m.mu.Lock()
	was := b.state
	if !was.up() || (why != causeEvict && m.now().Sub(b.lastRequest) < m.cfg.RequestGrace) {
		m.mu.Unlock()
		return nil, false, nil
	}
	ep := b.endpoint
	b.state = Pausing
	m.mu.Unlock()
	// No request may reach the sandbox from the edge's kept decision from
	// here on; the ones it answered up to now are in lastRequest once the
	// forget returns, and hold the pause off as any request does.
	m.forgetEdge(b)
	if why != causeEvict {
		m.mu.Lock()
		recent := m.now().Sub(b.lastRequest) < m.cfg.RequestGrace
		if recent && b.state == Pausing {
			b.state = was
		}
		m.mu.Unlock()
		if recent {
			return nil, false, nil
		}
	}
	wakeAt, ok = m.askIdle(ctx, b, ep, why)
	if !ok {
		m.mu.Lock()
		if b.state == Pausing {
			b.state = was
		}
		m.mu.Unlock()
		return nil, false, nil
	}
	return wakeAt, true, nil
}

// askIdle asks the agent whether it may go idle and when its next work is
// due. An agent that does not answer (hung, or no endpoint known) is
// judged by what it last reported: work due now keeps it up, a later time
// is taken as its answer. An evicted sandbox goes down whatever the agent
// says; if it was busy (a request in flight, work due) or silent with
// work due, its wake is now, so the work goes on in a new container.
func (m *Manager) askIdle(ctx context.Context, b *box, ep netip.AddrPort, why cause) (*time.Time, bool) {
	m.mu.Lock()
	reported, now := b.reported, m.now()
	m.mu.Unlock()
	evict := why == causeEvict
	if !ep.IsValid() {
		return m.lastWord(b, reported, now, evict, errors.New("no endpoint known"))
	}
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	busy, wakeAt, err := m.agent.PrepareIdle(actx, ep)
	switch {
	case err != nil:
		return m.lastWord(b, reported, now, evict, err)
	case busy && evict:
		return &now, true
	case busy:
		return nil, false
	}
	return wakeAt, true
}

// lastWord is askIdle's judgement of an agent that did not answer.
func (m *Manager) lastWord(b *box, reported *time.Time, now time.Time, evict bool, err error) (*time.Time, bool) {
	if reported != nil && !reported.After(now) && !evict {
		m.log.Info("agent did not answer /pause and last reported work due; keeping it running", "user", b.user, "err", err)
		return nil, false
	}
	m.log.Info("agent did not answer /pause; using its last reported wake time", "user", b.user, "wake_at", reported, "err", err)
	m.mu.Lock()
	b.silent = true
	m.mu.Unlock()
	return reported, true
}

// store writes the new state and wake time to the registry before the
// container changes, so a crash in between cannot lose a wake.
func (m *Manager) store(ctx context.Context, b *box, state State, wakeAt *time.Time) error {
	row, err := m.reg.Sandbox(ctx, b.user)
	if err != nil {
		return err
	}
	row.State, row.WakeAt = state.stored(), wakeAt
	m.mu.Lock()
	row.LastActiveAt = b.lastActive
	b.wakeAt = wakeAt
	m.mu.Unlock()
	return m.reg.UpdateSandbox(ctx, row)
}
