package lifecycle

import (
	"context"
	"net/netip"
	"time"
)

// ReportWake keeps the next due time user's agent reported (nil: nothing
// waits on time). Agents report on every change, so the manager knows it
// even when an agent does not answer at pause time, and can tell a sandbox
// that died with work in flight.
func (m *Manager) ReportWake(ctx context.Context, user string, at *time.Time) error {
	if err := m.reg.ReportWake(ctx, user, at); err != nil {
		return err
	}
	b := m.box(user)
	m.mu.Lock()
	b.reported = at
	m.mu.Unlock()
	return nil
}

// wake is reconcile's step for a sandbox whose stored wake time (less
// the lead) has come: it brings the sandbox up, answering any request that
// waits meanwhile, and tells the agent to run its due work. It is meant to
// end before the due time: the agent, up early, runs the work at its own
// stored time, and the idle tiers leave it up until then (decide). An
// agent that did not answer its pause is probed briefly and, if it still
// does not answer, its container is replaced (restartHung). Caller holds
// b.op.
func (m *Manager) wake(ctx context.Context, b *box) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.BringUpTimeout)
	defer cancel()
	m.mu.Lock()
	due, tier, silent := b.wakeAt.UTC(), b.state, b.silent
	restart := due.Equal(b.restartAt)
	probe := m.hungProbeLocked()
	m.mu.Unlock()
	begin := time.Now()
	var ep netip.AddrPort
	var err error
	if silent && tier == Paused {
		pctx, pcancel := context.WithTimeout(ctx, probe)
		ep, err = m.up(pctx, b)
		pcancel()
		if err != nil && ctx.Err() == nil {
			m.log.Warn("wake: the agent that did not answer its pause does not answer now; replacing its container", "user", b.user, "err", err)
			if err = m.restartHung(ctx, b); err == nil {
				ep, err = m.up(ctx, b)
			}
		}
	} else {
		ep, err = m.up(ctx, b)
	}
	if err != nil {
		m.log.Warn("wake: sandbox did not come up", "user", b.user, "err", err)
		return
	}
	m.mu.Lock()
	b.lastActive = m.now() // a wake is activity: a fresh idle period from it
	if due.After(b.wokeFor) {
		b.wokeFor = due
	}
	m.mu.Unlock()
	if err := m.agent.Wake(ctx, ep); err != nil {
		m.log.Warn("wake: agent /wake failed", "user", b.user, "err", err)
	} else if !silent {
		m.noteResume(tier, time.Since(begin))
	}
	m.metrics.Wake.Observe(time.Since(due).Seconds())
	if restart {
		m.audit(b.user, "sandbox.restarted", map[string]any{"reason": "died with work in flight"})
		return
	}
	m.audit(b.user, "sandbox.woken", map[string]any{"due": due.Format(time.RFC3339Nano)})
}

// restartHung replaces the container of a sandbox whose agent does not
// answer (frozen, deadlocked): a stop would wait out the stop timeout on a
// process that cannot handle SIGTERM, so the container is removed (killed)
// and the sandbox stored as removed with its wake; the bring-up after it
// makes a new container on the same volumes, where the durable runtime
// recovers the work as after any kill. Caller holds b.op.
func (m *Manager) restartHung(ctx context.Context, b *box) error {
	m.unserve(b)
	m.mu.Lock()
	name, wakeAt := b.name, b.wakeAt
	m.mu.Unlock()
	if err := m.store(ctx, b, Removed, wakeAt); err != nil {
		return err
	}
	if err := m.eng.RemoveContainer(ctx, m.names(name)); err != nil {
		return err
	}
	m.setState(b, Removed, netip.AddrPort{})
	m.audit(b.user, "sandbox.restarted", map[string]any{"reason": "its agent did not answer"})
	return nil
}

// resumeSamples is how many recent resume times per tier the wake lead
// is taken from.
const resumeSamples = 16

// noteResume records how long bringing a sandbox from tier (paused,
// stopped, removed) to an agent that answers took: a wake's bring-up and
// /wake, or a request's bring-up. Requests count too, so the lead follows
// the machine's load between wakes.
func (m *Manager) noteResume(tier State, d time.Duration) {
	if !tier.down() {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.resume == nil {
		m.resume = map[State][]time.Duration{}
	}
	s := append(m.resume[tier], d)
	if len(s) > resumeSamples {
		s = s[len(s)-resumeSamples:]
	}
	m.resume[tier] = s
}

// lead is how far ahead of a due time the manager starts bringing a
// sandbox in tier back. Under load, resume times vary widely from one to
// the next, so a typical one is not enough: the lead covers the slowest
// recent resume with a margin (a quarter of it, at least 50 ms), never less
// than the tier's default (a busy machine's resume, so a quiet spell does
// not leave the next busy wake late), and at most maxLead. Waking early
// costs a few seconds of a running sandbox; the agent still runs the work
// at its own stored time. Caller holds m.mu.
func (m *Manager) lead(tier State) time.Duration {
	l := defaultLead[tier]
	for _, d := range m.resume[tier] {
		l = max(l, d+max(d/4, 50*time.Millisecond))
	}
	return min(l, maxLead)
}

// defaultLead is the least lead per tier: about the slowest resume seen on
// a 2-core machine with every core busy (issue 29: unpause 0.1 s, start
// and create about 2 s), with a margin.
var defaultLead = map[State]time.Duration{
	Paused:  500 * time.Millisecond,
	Stopped: 3 * time.Second,
	Removed: 3 * time.Second,
}

// maxLead bounds the lead: one pathological resume (an engine that hung
// for a minute) must not make every wake come minutes early.
const maxLead = time.Minute

// hungProbe is the least time (Manager.hungProbe: tests shorten it) a wake gives an agent that did not answer
// its pause to answer after its unpause, before replacing its container.
const hungProbe = 2 * time.Second

// hungProbeLocked is the probe for this machine: at least m.hungProbe, and
// twice the paused lead, so a slow but live agent is not killed. Caller
// holds m.mu.
func (m *Manager) hungProbeLocked() time.Duration {
	return max(m.hungProbe, 2*m.lead(Paused))
}

// wakeLeadLocked is the lead of b's wake: its tier's, and for an agent
// that did not answer its pause also the time to probe it and replace its
// container, so that even then it is up by the due time. Caller holds m.mu.
func (m *Manager) wakeLeadLocked(b *box) time.Duration {
	l := m.lead(b.state)
	if b.silent && b.state == Paused {
		l += m.hungProbeLocked() + m.lead(Removed)
	}
	return l
}

// nextDueLocked is when b's agent next has work due, as far as the
// manager knows (zero: not known, or not ahead): for a sandbox down, its
// stored wake time; for one up, the later-than-now of the agent's last
// report and the due time the last wake brought it up early for. Caller
// holds m.mu.
func (m *Manager) nextDueLocked(b *box, now time.Time) time.Time {
	if b.state.down() {
		if b.wakeAt == nil {
			return time.Time{}
		}
		return *b.wakeAt
	}
	var due time.Time
	if b.reported != nil && b.reported.After(now) {
		due = *b.reported
	}
	if b.wokeFor.After(now) && (due.IsZero() || b.wokeFor.Before(due)) {
		due = b.wokeFor
	}
	return due
}

// restartBackoff is how long the manager waits before starting a sandbox
// that died with work in flight; it does so once per crashWindow.
const (
	restartBackoff = 2 * time.Second
	crashWindow    = 5 * time.Minute
)

// afterDeath is what a look does with a container it found down: if the
// registry still says it runs, nobody took it down (every step that does
// stores the new state first), so it died. Its state is stored with the
// wake time it needs: the agent's last reported due time if that is still
// ahead; if work was due, a restart after a backoff, once per crashWindow;
// otherwise none. The wake step then brings it back. Caller holds b.op.
func (m *Manager) afterDeath(ctx context.Context, b *box) {
	row, err := m.reg.Sandbox(ctx, b.user)
	if err != nil || storedState(row.State) != Running {
		return
	}
	now := m.now()
	m.mu.Lock()
	state, reported := b.state, b.reported
	again := !b.restartAt.IsZero() && now.Sub(b.restartAt) < crashWindow
	m.mu.Unlock()
	var wakeAt *time.Time
	detail := map[string]any{}
	switch {
	case reported == nil:
	case reported.After(now):
		wakeAt, detail = reported, wakeDetail(reported)
	case again:
		detail["restart"] = "not again within " + crashWindow.String()
	default:
		at := now.Add(restartBackoff).Truncate(time.Millisecond) // as the registry keeps it
		wakeAt = &at
		detail["restart_in"] = restartBackoff.String()
		m.mu.Lock()
		b.restartAt = at
		m.mu.Unlock()
	}
	if err := m.store(ctx, b, state, wakeAt); err != nil {
		m.log.Warn("died sandbox: state not stored", "user", b.user, "err", err)
		return
	}
	m.audit(b.user, "sandbox.died", detail)
}
