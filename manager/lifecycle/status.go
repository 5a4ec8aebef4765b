package lifecycle

import (
	"context"
	"time"

	"github.com/affido/affido/manager/registry"
)

// Sandbox is one sandbox as the admin command shows it. A pool sandbox has
// no user.
type Sandbox struct {
	User       string     `json:"user,omitempty"`
	Name       string     `json:"name"`
	State      State      `json:"state"`
	Endpoint   string     `json:"endpoint,omitempty"`
	Subnet     string     `json:"subnet"`
	LastActive time.Time  `json:"last_active,omitzero"`
	WakeAt     *time.Time `json:"wake_at,omitempty"`
	// ReportedWakeAt is the agent's own last report of its next due time.
	ReportedWakeAt *time.Time `json:"reported_wake_at,omitempty"`
}

// Sandboxes lists the registry's sandboxes with the manager's live state,
// then the warm pool's.
func (m *Manager) Sandboxes(ctx context.Context) ([]Sandbox, error) {
	rows, err := m.reg.Sandboxes(ctx)
	if err != nil {
		return nil, err
	}
	pools, err := m.reg.PoolSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Sandbox, 0, len(rows)+len(pools))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rows {
		s := Sandbox{User: r.UserID, Name: r.Name, State: storedState(r.State), Endpoint: r.Endpoint, Subnet: r.Subnet.String(), LastActive: r.LastActiveAt, WakeAt: r.WakeAt, ReportedWakeAt: r.ReportedWakeAt}
		if b := m.boxes[r.UserID]; b != nil && b.state != Unknown {
			s.State, s.LastActive = b.state, b.lastActive
		}
		out = append(out, s)
	}
	for _, p := range pools {
		s := Sandbox{Name: p.Name, State: Pool, Subnet: p.Subnet.String()}
		if p.State != registry.PoolReady {
			s.State = Provisioning
		}
		out = append(out, s)
	}
	return out, nil
}

// StateCounts returns how many known sandboxes are in each state; pool
// sandboxes count as "pool" (ready) or "pool_building".
func (m *Manager) StateCounts() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for _, b := range m.boxes {
		out[string(b.state)]++
	}
	for _, p := range m.pool {
		if p.building {
			out["pool_building"]++
		} else {
			out[string(Pool)]++
		}
	}
	return out
}
