package lifecycle

import (
	"context"
	"sort"
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
// waits meanwhile, and tells the agent to run its due work. Caller holds
// b.op.
func (m *Manager) wake(ctx context.Context, b *box) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.BringUpTimeout)
	defer cancel()
	m.mu.Lock()
	due, tier := b.wakeAt.UTC(), b.state
	restart := due.Equal(b.restartAt)
	m.mu.Unlock()
	begin := time.Now()
	ep, err := m.up(ctx, b)
	if err != nil {
		m.log.Warn("wake: sandbox did not come up", "user", b.user, "err", err)
		return
	}
	m.mu.Lock()
	b.lastActive = m.now() // a wake is activity: a fresh idle period from it
	m.mu.Unlock()
	if err := m.agent.Wake(ctx, ep); err != nil {
		m.log.Warn("wake: agent /wake failed", "user", b.user, "err", err)
	} else {
		m.noteResume(tier, time.Since(begin))
	}
	m.metrics.Wake.Observe(time.Since(due).Seconds())
	if restart {
		m.audit(b.user, "sandbox.restarted", map[string]any{"reason": "died with work in flight"})
		return
	}
	m.audit(b.user, "sandbox.woken", map[string]any{"due": due.Format(time.RFC3339Nano)})
}

// resumeSamples is how many recent resume times per tier the wake lead
// is taken from.
const resumeSamples = 8

// noteResume records how long bringing a sandbox from tier (paused,
// stopped, removed) to an agent that has run /wake took.
func (m *Manager) noteResume(tier State, d time.Duration) {
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

// lead is how far ahead of a wake time the manager starts bringing a
// sandbox in tier back: the slowest of its recent resumes from that tier,
// plus a margin. The agent still runs the work at its own stored time.
// Caller holds m.mu.
func (m *Manager) lead(tier State) time.Duration {
	s := append([]time.Duration(nil), m.resume[tier]...)
	if len(s) == 0 {
		return defaultLead[tier]
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)-1] + 50*time.Millisecond
}

// defaultLead is the lead before any resume from a tier was measured.
var defaultLead = map[State]time.Duration{
	Paused:  100 * time.Millisecond,
	Stopped: 500 * time.Millisecond,
	Removed: time.Second,
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
