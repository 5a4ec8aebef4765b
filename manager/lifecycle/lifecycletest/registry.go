// Package lifecycletest holds in-memory fakes of what the lifecycle talks
// to besides its engine: the registry and the agents. The lifecycle's own
// tests and the engine contract suite (enginetest) run on them.
package lifecycletest

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	"github.com/affido/affido/manager/registry"
)

// Registry keeps the registry's rows in maps, with the transactional
// claim and per-user locks shared by every Manager on it (as Postgres's
// advisory locks are).
type Registry struct {
	mu     sync.Mutex
	rows   map[string]registry.Sandbox
	pool   map[string]registry.PoolSandbox
	locks  map[string]*sync.Mutex
	audits []string
	seq    int
	// poolFails is how many PoolSandboxes calls fail next (a registry
	// not answering yet).
	poolFails int
	// onLock, when set, runs at every LockUser before the lock is taken
	// (another manager's work just before this one's).
	onLock func(user string)
}

// OnLockUser makes every LockUser run f first (nil: nothing).
func (r *Registry) OnLockUser(f func(user string)) {
	r.mu.Lock()
	r.onLock = f
	r.mu.Unlock()
}

// FailPoolSandboxes makes the next n PoolSandboxes calls fail.
func (r *Registry) FailPoolSandboxes(n int) {
	r.mu.Lock()
	r.poolFails = n
	r.mu.Unlock()
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry {
	return &Registry{rows: map[string]registry.Sandbox{}, pool: map[string]registry.PoolSandbox{}, locks: map[string]*sync.Mutex{}}
}

func (r *Registry) Sandbox(ctx context.Context, user string) (registry.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	row, ok := r.rows[user]
	if !ok {
		return registry.Sandbox{}, registry.ErrNotFound
	}
	return row, nil
}
func (r *Registry) Sandboxes(ctx context.Context) ([]registry.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []registry.Sandbox
	for _, row := range r.rows {
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UserID < out[j].UserID })
	return out, nil
}
func (r *Registry) usedLocked() []netip.Prefix {
	var used []netip.Prefix
	for _, row := range r.rows {
		used = append(used, row.Subnet)
	}
	for _, p := range r.pool {
		used = append(used, p.Subnet)
	}
	return used
}
func (r *Registry) CreateSandbox(ctx context.Context, user string, pick registry.SubnetPicker) (registry.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.rows[user]; ok {
		return registry.Sandbox{}, fmt.Errorf("create sandbox %s: duplicate key", user)
	}
	sn, err := pick(r.usedLocked())
	if err != nil {
		return registry.Sandbox{}, err
	}
	row := registry.Sandbox{UserID: user, Name: user, State: registry.StateProvisioning, Subnet: sn}
	r.rows[user] = row
	return row, nil
}
func (r *Registry) UpdateSandbox(ctx context.Context, sb registry.Sandbox) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, ok := r.rows[sb.UserID]
	if !ok {
		return registry.ErrNotFound
	}
	sb.TokenHash = old.TokenHash // as the registry: never written here
	r.rows[sb.UserID] = sb
	return nil
}
func (r *Registry) SetSandboxToken(ctx context.Context, user string, tokenHash []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	row, ok := r.rows[user]
	if !ok {
		return registry.ErrNotFound
	}
	row.TokenHash = tokenHash
	r.rows[user] = row
	return nil
}
func (r *Registry) DeleteSandbox(ctx context.Context, user string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.rows, user)
	return nil
}
func (r *Registry) ReportWake(ctx context.Context, user string, at *time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	row, ok := r.rows[user]
	if !ok {
		return registry.ErrNotFound
	}
	row.ReportedWakeAt = at
	r.rows[user] = row
	return nil
}
func (r *Registry) CreatePoolSandbox(ctx context.Context, name, image string, pick registry.SubnetPicker) (registry.PoolSandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sn, err := pick(r.usedLocked())
	if err != nil {
		return registry.PoolSandbox{}, err
	}
	r.seq++
	p := registry.PoolSandbox{Name: name, State: registry.StateProvisioning, Subnet: sn, Image: image, CreatedAt: time.Unix(int64(r.seq), 0)}
	r.pool[name] = p
	return p, nil
}
func (r *Registry) PoolSandboxes(ctx context.Context) ([]registry.PoolSandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.poolFails > 0 {
		r.poolFails--
		return nil, fmt.Errorf("list pool sandboxes: the registry does not answer")
	}
	var out []registry.PoolSandbox
	for _, p := range r.pool {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}
func (r *Registry) UpdatePoolSandbox(ctx context.Context, p registry.PoolSandbox) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pool[p.Name]; !ok {
		return registry.ErrNotFound
	}
	r.pool[p.Name] = p
	return nil
}
func (r *Registry) DeletePoolSandbox(ctx context.Context, name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pool[name]; !ok {
		return registry.ErrNotFound
	}
	delete(r.pool, name)
	return nil
}
func (r *Registry) ClaimPoolSandbox(ctx context.Context, user, image string, tokenHash []byte) (registry.Sandbox, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.rows[user]; ok {
		return registry.Sandbox{}, fmt.Errorf("claim for %s: duplicate key", user)
	}
	var oldest *registry.PoolSandbox
	for _, p := range r.pool {
		if p.State == registry.PoolReady && p.Image == image && (oldest == nil || p.CreatedAt.Before(oldest.CreatedAt)) {
			p := p
			oldest = &p
		}
	}
	if oldest == nil {
		return registry.Sandbox{}, registry.ErrNotFound
	}
	delete(r.pool, oldest.Name)
	row := registry.Sandbox{UserID: user, Name: oldest.Name, State: registry.StatePaused, Subnet: oldest.Subnet,
		ContainerID: oldest.ContainerID, NetworkID: oldest.NetworkID, TokenHash: tokenHash}
	r.rows[user] = row
	return row, nil
}
func (r *Registry) LockUser(ctx context.Context, user string) (func(), error) {
	r.mu.Lock()
	onLock := r.onLock
	r.mu.Unlock()
	if onLock != nil {
		onLock(user)
	}
	r.mu.Lock()
	l := r.locks[user]
	if l == nil {
		l = &sync.Mutex{}
		r.locks[user] = l
	}
	r.mu.Unlock()
	l.Lock()
	return l.Unlock, nil
}
func (r *Registry) Audit(ctx context.Context, user, kind string, detail map[string]any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.audits = append(r.audits, user+" "+kind)
	return nil
}

// Row returns user's row, if there is one.
func (r *Registry) Row(user string) (registry.Sandbox, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	row, ok := r.rows[user]
	return row, ok
}

// PoolCount counts the pool rows in state ("": all).
func (r *Registry) PoolCount(state string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.pool {
		if state == "" || p.State == state {
			n++
		}
	}
	return n
}

// Put writes row as it is, made or not (a test's tampering).
func (r *Registry) Put(row registry.Sandbox) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows[row.UserID] = row
}

// Audits returns the audit events so far, as "user kind".
func (r *Registry) Audits() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.audits...)
}
