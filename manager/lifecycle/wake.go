package lifecycle

import (
	"context"
	"net/netip"
	"sort"
	"time"

	"github.com/affido/affido/manager/registry"
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

// wake waits for the bring-up reconcile started for a sandbox whose stored
// wake time came (f), then tells the agent to run its due work.
func (m *Manager) wake(ctx context.Context, b *box, f *flight, due time.Time, tier State) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.BringUpTimeout)
	defer cancel()
	begin := time.Now()
	var ep netip.AddrPort
	var err error
	select {
	case <-f.done:
		ep, err = f.ep, f.err
	case <-ctx.Done():
		err = ctx.Err()
	}
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
	m.audit(b.user, "sandbox.woken", map[string]any{"due": due.UTC().Format(time.RFC3339Nano)})
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

// afterDeath handles a container that died without the manager stopping
// it. If its agent had reported a future wake time, that time is stored so
// the wake scheduler brings it back then; if it had work due, it is started
// again once, after a backoff, and the event is recorded.
func (m *Manager) afterDeath(ctx context.Context, b *box) {
	m.mu.Lock()
	reported := b.reported
	restartedRecently := !b.restartedAt.IsZero() && m.now().Sub(b.restartedAt) < crashWindow
	m.mu.Unlock()
	if reported == nil {
		return
	}
	// Store first, then act (goDown): a container the manager took down
	// has its new state in the registry already (or no row, after a
	// reset), so only a death leaves the row running.
	if row, err := m.reg.Sandbox(ctx, b.user); err != nil || row.State != registry.StateRunning {
		return
	}
	if reported.After(m.now()) {
		if err := m.storeWake(ctx, b, reported); err != nil {
			m.log.Warn("died sandbox: wake time not stored", "user", b.user, "err", err)
		}
		m.queue(b.user) // the loop's next look may now be this wake
		m.audit(b.user, "sandbox.died", wakeDetail(reported))
		return
	}
	if restartedRecently {
		m.audit(b.user, "sandbox.died", map[string]any{"restart": "not again within " + crashWindow.String()})
		return
	}
	m.audit(b.user, "sandbox.died", map[string]any{"restart_in": restartBackoff.String()})
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(restartBackoff):
		}
		m.mu.Lock()
		b.restartedAt = m.now()
		m.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, m.cfg.BringUpTimeout)
		defer cancel()
		ep, err := m.up(rctx, b)
		if err != nil {
			m.log.Warn("restart after death", "user", b.user, "err", err)
			return
		}
		if err := m.agent.Wake(rctx, ep); err != nil {
			m.log.Warn("restart after death: /wake", "user", b.user, "err", err)
		}
		m.mu.Lock()
		b.lastActive = m.now()
		m.mu.Unlock()
		m.audit(b.user, "sandbox.restarted", map[string]any{"reason": "died with work in flight"})
	}()
}

// storeWake records wakeAt in the registry row without changing its state
// (it still says running: a later death is still told from a stop).
func (m *Manager) storeWake(ctx context.Context, b *box, wakeAt *time.Time) error {
	row, err := m.reg.Sandbox(ctx, b.user)
	if err != nil {
		return err
	}
	row.WakeAt = wakeAt
	if err := m.reg.UpdateSandbox(ctx, row); err != nil {
		return err
	}
	m.mu.Lock()
	b.wakeAt = wakeAt
	m.mu.Unlock()
	return nil
}
