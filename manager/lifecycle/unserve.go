package lifecycle

// The edge (Caddy) may keep a resolve's answer for a few seconds and send a
// user's requests straight to the sandbox (caddy/resolve, manager/edge).
// Every step that stops serving a sandbox makes the edge forget it first,
// and what the edge answered from its cache comes back here as Touch.

// OnUnserve sets f, called with a user whose sandbox stops being served
// before the engine changes it: f returns once no request can reach the
// sandbox from a decision kept at the edge. Set it before the manager
// serves; nil (the default) for no edge cache.
func (m *Manager) OnUnserve(f func(user string)) { m.onUnserve = f }

// Touch records requests the edge answered from its kept decision as
// Resolve records one: they hold a pause off for RequestGrace, and an
// activating one is activity for the idle tiers. A user with no sandbox
// known here is ignored.
func (m *Manager) Touch(user string, activating bool) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.boxes[user]
	if b == nil {
		return
	}
	b.lastRequest = now
	if activating {
		b.lastActive = now
	}
}

// forgetEdge makes the edge forget b's user's decisions and waits for it.
func (m *Manager) forgetEdge(b *box) {
	if m.onUnserve != nil {
		m.onUnserve(b.user)
	}
}

// unserve stops serving b's sandbox (a request waits for the engine to be
// asked again) and makes the edge forget it, before a step that changes the
// container without quiescing it (a reset, a hung agent's restart). Caller
// holds b.op.
func (m *Manager) unserve(b *box) {
	m.mu.Lock()
	m.looks[b] = true
	m.mu.Unlock()
	m.forgetEdge(b)
}
