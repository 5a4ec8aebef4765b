// Package lifecycle keeps every user's sandbox in the right state: it
// provisions or resumes a sandbox when a request needs it, walks idle
// sandboxes down the pause → stop → remove tiers, wakes sleeping ones when
// their stored deadline comes, and reconciles its view with Docker's.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/affido/affido/manager/provision"
	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/subnet"
)

// ErrCapacity is returned when no more sandboxes may run and none can be freed.
var ErrCapacity = errors.New("sandbox capacity reached")

// Engine is the container runtime the manager drives. *provision.Docker
// implements it against a real engine. Inspect returns provision.ErrNotFound
// for a missing container; every other method is idempotent where Docker is.
type Engine interface {
	Names(user string) (provision.Names, error)
	Inspect(ctx context.Context, n provision.Names) (provision.Container, error)
	EnsureNetwork(ctx context.Context, n provision.Names, sn netip.Prefix) (string, error)
	EnsureVolumes(ctx context.Context, n provision.Names) error
	ConnectGateway(ctx context.Context, n provision.Names, networkID string, sn netip.Prefix) error
	GatewayNetworks(ctx context.Context) (map[string]bool, error)
	Create(ctx context.Context, n provision.Names, sn netip.Prefix, token string) (provision.Container, error)
	Start(ctx context.Context, id string) error
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
	Stop(ctx context.Context, id string) error
	RemoveContainer(ctx context.Context, n provision.Names) error
	RemoveAll(ctx context.Context, n provision.Names) error
	List(ctx context.Context) (provision.Inventory, error)
	Events(ctx context.Context) (<-chan provision.Event, <-chan error)
}

// Agent is how the manager talks to a sandbox's agent.
type Agent interface {
	// Health returns nil once the agent answers GET /health with 200.
	Health(ctx context.Context, ep netip.AddrPort) error
	// PrepareIdle asks the agent to close its storage (POST /pause?if_idle=1).
	// busy is true on 409; wakeAt is the agent's next due time, if any.
	PrepareIdle(ctx context.Context, ep netip.AddrPort) (busy bool, wakeAt *time.Time, err error)
	// Wake asks the agent to reopen storage and run due work (POST /wake).
	Wake(ctx context.Context, ep netip.AddrPort) error
}

// Config is the lifecycle policy.
type Config struct {
	Pool             netip.Prefix
	SubnetBits       int
	Tiers            Tiers
	MaxRunning       int           // 0: unlimited
	ProvisionTimeout time.Duration // whole resolve budget when work is needed
	ProbeInterval    time.Duration // readiness poll interval
	Tick             time.Duration // idle and wake scan interval
}

// Manager owns the sandboxes of one stack.
type Manager struct {
	eng     Engine
	reg     *registry.Store
	agent   Agent
	cfg     Config
	log     *slog.Logger
	metrics *Metrics

	mu     sync.Mutex
	boxes  map[string]*box
	resume map[string][]time.Duration // recent resume times per tier (wake.go)

	eventsUp atomic.Bool
	now      func() time.Time
}

// box is the in-memory view of one sandbox. op serializes Docker operations
// for the user (concurrent first requests wait for the one provisioning);
// the other fields are guarded by Manager.mu.
type box struct {
	op sync.Mutex

	user       string
	state      string // running, paused, stopped, removed, provisioning, unknown
	dirty      bool   // a Docker event arrived; check Docker before trusting state
	endpoint   netip.AddrPort
	subnet     netip.Prefix
	lastActive time.Time
	wakeAt     *time.Time
	// reported is the agent's own last report of its next due time.
	reported *time.Time
	// stopping is set while the manager itself stops or removes the
	// container, so its "die" event is not taken for a crash.
	stopping    bool
	restartedAt time.Time
}

// New returns a Manager. Call Run to start its background loops.
func New(eng Engine, reg *registry.Store, agent Agent, cfg Config, log *slog.Logger, m *Metrics) *Manager {
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = 20 * time.Millisecond
	}
	if cfg.ProvisionTimeout <= 0 {
		cfg.ProvisionTimeout = 30 * time.Second
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.SubnetBits == 0 {
		cfg.SubnetBits = 28
	}
	return &Manager{eng: eng, reg: reg, agent: agent, cfg: cfg, log: log, metrics: m, boxes: map[string]*box{}, now: time.Now}
}

func (m *Manager) box(user string) *box {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.boxes[user]
	if b == nil {
		b = &box{user: user, state: "unknown", lastActive: m.now()}
		m.boxes[user] = b
	}
	return b
}

// Resolve returns the endpoint of user's sandbox, provisioning, starting or
// unpausing it first, and only once its agent answers /health. activating
// requests count as activity for the idle tiers.
func (m *Manager) Resolve(ctx context.Context, user string, activating bool) (netip.AddrPort, error) {
	b := m.box(user)
	m.mu.Lock()
	if activating {
		b.lastActive = m.now()
	}
	if b.state == "running" && !b.dirty && b.endpoint.IsValid() {
		ep := b.endpoint
		m.mu.Unlock()
		return ep, nil
	}
	m.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, m.cfg.ProvisionTimeout)
	defer cancel()
	b.op.Lock()
	defer b.op.Unlock()
	m.mu.Lock()
	if b.state == "running" && !b.dirty && b.endpoint.IsValid() { // another request did the work
		ep := b.endpoint
		m.mu.Unlock()
		return ep, nil
	}
	m.mu.Unlock()
	return m.ensureRunning(ctx, b)
}

// ensureRunning brings b to running. Caller holds b.op.
func (m *Manager) ensureRunning(ctx context.Context, b *box) (netip.AddrPort, error) {
	n, err := m.eng.Names(b.user)
	if err != nil {
		return netip.AddrPort{}, err
	}
	// Cheap path: Docker already runs it (manager restart, or a Docker event).
	m.mu.Lock()
	known := b.subnet.IsValid()
	m.mu.Unlock()
	if known {
		if c, err := m.eng.Inspect(ctx, n); err == nil && c.Running() && c.Endpoint.IsValid() {
			if err := m.waitHealthy(ctx, c.Endpoint); err == nil {
				m.setState(b, "running", c.Endpoint)
				return c.Endpoint, nil
			}
		}
	}

	lock, err := m.reg.LockUser(ctx, b.user)
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer lock.Release(b.user)

	row, err := m.reg.Sandbox(ctx, b.user)
	if errors.Is(err, registry.ErrNotFound) {
		row, err = m.reg.CreateSandbox(ctx, b.user, func(used []netip.Prefix) (netip.Prefix, error) {
			return subnet.Allocate(m.cfg.Pool, m.cfg.SubnetBits, used)
		})
		if err == nil {
			m.audit(b.user, "sandbox.allocated", map[string]any{"subnet": row.Subnet.String()})
		}
	}
	if err != nil {
		return netip.AddrPort{}, err
	}
	m.mu.Lock()
	b.subnet = row.Subnet
	m.mu.Unlock()

	c, err := m.eng.Inspect(ctx, n)
	switch {
	case errors.Is(err, provision.ErrNotFound):
		if err := m.makeRoom(ctx, b); err != nil {
			return netip.AddrPort{}, err
		}
		if c, err = m.provision(ctx, n, &row); err != nil {
			return netip.AddrPort{}, err
		}
	case err != nil:
		return netip.AddrPort{}, err
	}

	switch c.Status {
	case "running":
	case "paused":
		start := time.Now()
		if err := m.eng.Unpause(ctx, c.ID); err != nil {
			return netip.AddrPort{}, err
		}
		m.metrics.Unpause.Observe(time.Since(start).Seconds())
		m.audit(b.user, "sandbox.unpaused", nil)
	case "created", "exited", "dead":
		if err := m.makeRoom(ctx, b); err != nil {
			return netip.AddrPort{}, err
		}
		start := time.Now()
		if row.NetworkID != "" { // Caddy may have been recreated since.
			if err := m.eng.ConnectGateway(ctx, n, row.NetworkID, row.Subnet); err != nil {
				return netip.AddrPort{}, err
			}
		}
		if err := m.eng.Start(ctx, c.ID); err != nil {
			return netip.AddrPort{}, err
		}
		m.metrics.Start.Observe(time.Since(start).Seconds())
		m.audit(b.user, "sandbox.started", nil)
	default:
		return netip.AddrPort{}, fmt.Errorf("sandbox %s is %s", b.user, c.Status)
	}

	ep := netip.AddrPortFrom(provision.SandboxIP(row.Subnet), m.port(c))
	if err := m.waitHealthy(ctx, ep); err != nil {
		return netip.AddrPort{}, fmt.Errorf("sandbox %s not ready: %w", b.user, err)
	}
	row.State, row.ContainerID, row.Endpoint = registry.StateRunning, c.ID, ep.String()
	row.LastActiveAt, row.WakeAt = m.now(), nil
	if err := m.reg.UpdateSandbox(ctx, row); err != nil {
		return netip.AddrPort{}, err
	}
	m.mu.Lock()
	b.wakeAt = nil
	m.mu.Unlock()
	m.setState(b, "running", ep)
	return ep, nil
}

// setStopping marks that the manager itself is taking b's container down.
func (m *Manager) setStopping(b *box, on bool) {
	m.mu.Lock()
	b.stopping = on
	m.mu.Unlock()
}

func (m *Manager) port(c provision.Container) uint16 {
	if c.Endpoint.IsValid() {
		return c.Endpoint.Port()
	}
	return 8080
}

// provision creates network, volumes and container for a user whose
// container does not exist. Every step is idempotent, so a manager killed
// half way resumes here without leaving a second copy of anything.
func (m *Manager) provision(ctx context.Context, n provision.Names, row *registry.Sandbox) (provision.Container, error) {
	start := time.Now()
	netID, err := m.eng.EnsureNetwork(ctx, n, row.Subnet)
	if err != nil {
		return provision.Container{}, err
	}
	if err := m.eng.EnsureVolumes(ctx, n); err != nil {
		return provision.Container{}, err
	}
	if err := m.eng.ConnectGateway(ctx, n, netID, row.Subnet); err != nil {
		return provision.Container{}, err
	}
	token := registry.NewToken()
	row.NetworkID, row.TokenHash, row.State = netID, registry.HashToken(token), registry.StateProvisioning
	if err := m.reg.UpdateSandbox(ctx, *row); err != nil {
		return provision.Container{}, err
	}
	c, err := m.eng.Create(ctx, n, row.Subnet, token)
	if err != nil {
		return provision.Container{}, err
	}
	m.metrics.Provision.Observe(time.Since(start).Seconds())
	m.audit(n.User, "sandbox.created", map[string]any{"container": c.ID, "network": netID})
	return c, nil
}

// waitHealthy polls the agent's /health every ProbeInterval until it answers.
func (m *Manager) waitHealthy(ctx context.Context, ep netip.AddrPort) error {
	t := time.NewTicker(m.cfg.ProbeInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := m.agent.Health(pctx, ep)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for /health at %s: %w (last: %v)", ep, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func (m *Manager) setState(b *box, state string, ep netip.AddrPort) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b.state, b.dirty = state, false
	if ep.IsValid() || state != "running" {
		b.endpoint = ep
	}
}

func (m *Manager) audit(user, kind string, detail map[string]any) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.reg.Audit(ctx, user, kind, detail); err != nil {
		m.log.Warn("audit event not recorded", "user", user, "kind", kind, "err", err)
	}
}

// makeRoom frees a running slot for b when MaxRunning is reached, pausing
// the least recently active idle sandbox. Caller holds b.op.
func (m *Manager) makeRoom(ctx context.Context, b *box) error {
	if m.cfg.MaxRunning <= 0 {
		return nil
	}
	for {
		m.mu.Lock()
		var running []*box
		for _, o := range m.boxes {
			if o != b && o.state == "running" {
				running = append(running, o)
			}
		}
		sort.Slice(running, func(i, j int) bool { return running[i].lastActive.Before(running[j].lastActive) }) // least recently active first
		m.mu.Unlock()
		if len(running) < m.cfg.MaxRunning {
			return nil
		}
		freed := false
		for _, o := range running {
			if !o.op.TryLock() { // busy with its own operation
				continue
			}
			ok, err := m.pause(ctx, o)
			o.op.Unlock()
			if err != nil {
				m.log.Warn("free capacity: pause failed", "user", o.user, "err", err)
			}
			if ok {
				freed = true
				break
			}
		}
		if !freed {
			return ErrCapacity
		}
	}
}

// pause asks the agent to go idle, stores its next wake time and only then
// pauses the container. It reports false when the agent is busy. Caller
// holds b.op.
func (m *Manager) pause(ctx context.Context, b *box) (bool, error) {
	m.mu.Lock()
	ep, state := b.endpoint, b.state
	m.mu.Unlock()
	if state != "running" {
		return false, nil
	}
	wakeAt, ok, err := m.prepareIdle(ctx, b, ep)
	if !ok || err != nil {
		return false, err
	}
	n, _ := m.eng.Names(b.user)
	c, err := m.eng.Inspect(ctx, n)
	if err != nil {
		return false, err
	}
	if err := m.store(ctx, b, registry.StatePaused, wakeAt); err != nil {
		return false, err
	}
	start := time.Now()
	if err := m.eng.Pause(ctx, c.ID); err != nil {
		return false, err
	}
	m.metrics.Pause.Observe(time.Since(start).Seconds())
	m.setState(b, "paused", netip.AddrPort{})
	m.audit(b.user, "sandbox.paused", wakeDetail(wakeAt))
	return true, nil
}

// prepareIdle asks the agent whether it may go idle. An agent that does not
// answer (hung, or without the route) is treated as idle.
func (m *Manager) prepareIdle(ctx context.Context, b *box, ep netip.AddrPort) (*time.Time, bool, error) {
	if !ep.IsValid() {
		return nil, true, nil
	}
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	busy, wakeAt, err := m.agent.PrepareIdle(actx, ep)
	if err != nil {
		// A hung agent: go by what it last reported. Work due now keeps it
		// running; a future wake time is stored like an answer would be.
		m.mu.Lock()
		reported := b.reported
		m.mu.Unlock()
		if reported != nil && !reported.After(m.now()) {
			m.log.Info("agent did not answer /pause and last reported work due; keeping it running", "user", b.user, "err", err)
			return nil, false, nil
		}
		m.log.Info("agent did not answer /pause; using its last reported wake time", "user", b.user, "wake_at", reported, "err", err)
		return reported, true, nil
	}
	if busy {
		return nil, false, nil
	}
	return wakeAt, true, nil
}

// store writes the new state and wake time to the registry before the
// container changes, so a crash in between cannot lose a wake.
func (m *Manager) store(ctx context.Context, b *box, state string, wakeAt *time.Time) error {
	row, err := m.reg.Sandbox(ctx, b.user)
	if err != nil {
		return err
	}
	row.State, row.WakeAt = state, wakeAt
	m.mu.Lock()
	row.LastActiveAt = b.lastActive
	b.wakeAt = wakeAt
	m.mu.Unlock()
	return m.reg.UpdateSandbox(ctx, row)
}

func wakeDetail(t *time.Time) map[string]any {
	if t == nil {
		return nil
	}
	return map[string]any{"wake_at": t.UTC().Format(time.RFC3339Nano)}
}

// stop stops the container (from running or paused). Caller holds b.op.
func (m *Manager) stop(ctx context.Context, b *box) error {
	m.mu.Lock()
	ep, state, wakeAt := b.endpoint, b.state, b.wakeAt
	m.mu.Unlock()
	if state == "running" {
		w, ok, err := m.prepareIdle(ctx, b, ep)
		if !ok || err != nil {
			return err
		}
		wakeAt = w
	}
	n, _ := m.eng.Names(b.user)
	c, err := m.eng.Inspect(ctx, n)
	if err != nil {
		return err
	}
	if err := m.store(ctx, b, registry.StateStopped, wakeAt); err != nil {
		return err
	}
	m.setStopping(b, true)
	defer m.setStopping(b, false)
	if c.Status == "paused" { // a frozen process cannot handle SIGTERM
		if err := m.eng.Unpause(ctx, c.ID); err != nil {
			return err
		}
	}
	if err := m.eng.Stop(ctx, c.ID); err != nil {
		return err
	}
	m.setState(b, "stopped", netip.AddrPort{})
	m.audit(b.user, "sandbox.stopped", wakeDetail(wakeAt))
	return nil
}

// remove removes the container; network and volumes stay. Caller holds b.op.
func (m *Manager) remove(ctx context.Context, b *box) error {
	m.mu.Lock()
	ep, state, wakeAt := b.endpoint, b.state, b.wakeAt
	m.mu.Unlock()
	if state == "running" {
		w, ok, err := m.prepareIdle(ctx, b, ep)
		if !ok || err != nil {
			return err
		}
		wakeAt = w
	}
	if err := m.store(ctx, b, registry.StateRemoved, wakeAt); err != nil {
		return err
	}
	m.setStopping(b, true)
	defer m.setStopping(b, false)
	n, _ := m.eng.Names(b.user)
	if err := m.eng.RemoveContainer(ctx, n); err != nil {
		return err
	}
	m.setState(b, "removed", netip.AddrPort{})
	m.audit(b.user, "sandbox.removed", wakeDetail(wakeAt))
	return nil
}

// Evict removes user's container now, keeping network and volumes.
func (m *Manager) Evict(ctx context.Context, user string) error {
	b := m.box(user)
	b.op.Lock()
	defer b.op.Unlock()
	n, err := m.eng.Names(user)
	if err != nil {
		return err
	}
	m.setStopping(b, true)
	defer m.setStopping(b, false)
	if err := m.eng.RemoveContainer(ctx, n); err != nil {
		return err
	}
	if row, err := m.reg.Sandbox(ctx, user); err == nil {
		row.State = registry.StateRemoved
		if err := m.reg.UpdateSandbox(ctx, row); err != nil {
			return err
		}
	} else if !errors.Is(err, registry.ErrNotFound) {
		return err
	}
	m.setState(b, "removed", netip.AddrPort{})
	m.audit(user, "sandbox.evicted", nil)
	return nil
}

// Reset removes everything of user's sandbox: container, network, volumes
// and the registry row. The user and their credentials stay.
func (m *Manager) Reset(ctx context.Context, user string) error {
	b := m.box(user)
	b.op.Lock()
	defer b.op.Unlock()
	n, err := m.eng.Names(user)
	if err != nil {
		return err
	}
	m.setStopping(b, true)
	if err := m.eng.RemoveAll(ctx, n); err != nil {
		return err
	}
	if err := m.reg.DeleteSandbox(ctx, user); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.boxes, user)
	m.mu.Unlock()
	m.audit(user, "sandbox.reset", nil)
	return nil
}

// Status is one sandbox as the admin command shows it.
type Status struct {
	User       string     `json:"user"`
	State      string     `json:"state"`
	Endpoint   string     `json:"endpoint,omitempty"`
	Subnet     string     `json:"subnet"`
	LastActive time.Time  `json:"last_active"`
	WakeAt     *time.Time `json:"wake_at,omitempty"`
}

// Sandboxes lists the registry's sandboxes with the manager's live state.
func (m *Manager) Sandboxes(ctx context.Context) ([]Status, error) {
	rows, err := m.reg.Sandboxes(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(rows))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rows {
		s := Status{User: r.UserID, State: r.State, Endpoint: r.Endpoint, Subnet: r.Subnet.String(), LastActive: r.LastActiveAt, WakeAt: r.WakeAt}
		if b := m.boxes[r.UserID]; b != nil && b.state != "unknown" {
			s.State, s.LastActive = b.state, b.lastActive
		}
		out = append(out, s)
	}
	return out, nil
}

// EventsUp reports whether the Docker event stream is connected.
func (m *Manager) EventsUp() bool { return m.eventsUp.Load() }
