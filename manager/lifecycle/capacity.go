package lifecycle

import (
	"context"
	"sort"
	"time"

	"github.com/affido/affido/internal/edgeapi"
)

// opWait is how long making room waits for a step under way on a sandbox
// it could put to sleep (a look takes milliseconds; a bring-up longer, and
// that sandbox is passed over). goingWait is how long it waits for one that
// is going down already (the edge's forget, at most one lease; its agent
// has 3 s to answer; then the pause): that slot is about to be free.
const (
	opWait    = time.Second
	goingWait = 5*time.Second + edgeapi.Lease
)

// SetMaxRunning changes how many sandboxes may run at once (0: unlimited).
func (m *Manager) SetMaxRunning(n int) {
	m.mu.Lock()
	m.cfg.MaxRunning = max(n, 0)
	m.mu.Unlock()
}

// runningLocked counts the slots taken: running user sandboxes other than
// except, and pool sandboxes being built. Caller holds m.mu.
func (m *Manager) runningLocked(except *box) int {
	n := 0
	for _, o := range m.boxes {
		if o != except && o.state.counts() {
			n++
		}
	}
	for _, p := range m.pool {
		if p.building {
			n++
		}
	}
	return n
}

// makeRoom takes a running slot for b when MaxRunning is reached, putting
// to sleep (pausing, or stopping on an engine without pause) the least
// recently active sandbox that may go: none with a request in flight or
// within RequestGrace of one (godown.go). On success b
// counts as running until its bring-up ends. Caller holds b.op.
func (m *Manager) makeRoom(ctx context.Context, b *box) error {
	for {
		m.mu.Lock()
		if m.cfg.MaxRunning <= 0 || m.runningLocked(b) < m.cfg.MaxRunning {
			if !b.state.counts() {
				b.state = Provisioning
			}
			m.mu.Unlock()
			return nil
		}
		// Sandboxes going down already first (their slot is about to be
		// free), then the running ones, least recently active first.
		var running []*box
		going := map[*box]bool{}
		for _, o := range m.boxes {
			if o != b && (o.state.up() || o.state == Pausing) {
				running = append(running, o)
				going[o] = o.state == Pausing
			}
		}
		sort.Slice(running, func(i, j int) bool {
			if going[running[i]] != going[running[j]] {
				return going[running[i]]
			}
			return running[i].lastActive.Before(running[j].lastActive)
		})
		m.mu.Unlock()
		freed := false
		var passed []string // why each candidate stayed up, for the log
		for _, o := range running {
			wait := opWait
			if going[o] {
				wait = goingWait
			}
			if !o.op.lockWithin(ctx, wait) { // busy with a longer step of its own
				passed = append(passed, o.user+": a step of its own under way")
				continue
			}
			ok, err := m.goDown(ctx, o, Paused, causeCapacity)
			o.op.Unlock()
			if err != nil {
				m.log.Warn("free capacity: pause failed", "user", o.user, "err", err)
				passed = append(passed, o.user+": "+err.Error())
			}
			if ok {
				freed = true
				break
			}
			if err == nil {
				passed = append(passed, o.user+": in use (a request within the grace, or its agent busy)")
			}
		}
		if !freed {
			m.log.Info("at capacity: no sandbox could make room", "user", b.user, "max_running", m.cfg.MaxRunning, "passed", passed)
			return ErrCapacity
		}
	}
}
