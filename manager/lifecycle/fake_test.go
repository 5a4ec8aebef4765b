package lifecycle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/manager/lifecycle/lifecycletest"
	"github.com/affido/affido/manager/subnet"
)

// In-memory fakes of the engine, the registry and the agents, joined so
// that an agent answers only while its container runs unpaused.

type fakeContainer struct {
	id, name string
	status   Status
	ip       netip.Addr
	hung     bool // its agent answers nothing until the process is started again
}

type fakeEngine struct {
	mu         sync.Mutex
	containers map[string]*fakeContainer // by sandbox name
	networks   map[string]string         // sandbox name -> id
	volumes    map[string]bool           // volume names
	seq        int
	heavy      int // creates and starts running now
	maxHeavy   int // most at once
	creates    int
	slow       time.Duration // each create and start takes this long
	gate       chan struct{} // if set, each create waits for a value
	events     chan Event
	failCreate bool
	bare       bool // no networks: Create needs only the volumes
}

func newFakeEngine() *fakeEngine {
	return &fakeEngine{containers: map[string]*fakeContainer{}, networks: map[string]string{}, volumes: map[string]bool{},
		events: make(chan Event, 256)}
}

var _ Engine = (*fakeEngine)(nil)

func (e *fakeEngine) heavyOp(ctx context.Context) func() {
	e.mu.Lock()
	e.heavy++
	e.maxHeavy = max(e.maxHeavy, e.heavy)
	slow, gate := e.slow, e.gate
	e.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
		}
	}
	if slow > 0 {
		select {
		case <-time.After(slow):
		case <-ctx.Done():
		}
	}
	return func() { e.mu.Lock(); e.heavy--; e.mu.Unlock() }
}

func (e *fakeEngine) Inspect(ctx context.Context, n Names) (Container, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.containers[n.Sandbox]
	if c == nil {
		return Container{}, ErrNotFound
	}
	return Container{ID: c.id, Sandbox: c.name, Status: c.status, Endpoint: netip.AddrPortFrom(c.ip, 8080)}, nil
}

func (e *fakeEngine) Create(ctx context.Context, n Names, sn netip.Prefix) (Container, error) {
	defer e.heavyOp(ctx)()
	e.mu.Lock()
	if e.failCreate {
		e.mu.Unlock()
		return Container{}, fmt.Errorf("create %s: engine refused", n.Sandbox)
	}
	if (e.networks[n.Sandbox] == "" && !e.bare) || !e.volumes[n.Sandbox+"/session"] || !e.volumes[n.Sandbox+"/workspace"] {
		e.mu.Unlock()
		return Container{}, fmt.Errorf("create %s: network or volumes missing", n.Sandbox)
	}
	if e.containers[n.Sandbox] == nil {
		e.seq++
		e.creates++
		e.containers[n.Sandbox] = &fakeContainer{id: fmt.Sprintf("c%d", e.seq), name: n.Sandbox, status: StatusStopped, ip: subnet.SandboxIP(sn)}
	}
	e.mu.Unlock()
	return e.Inspect(ctx, n)
}

func (e *fakeEngine) byID(id string) *fakeContainer {
	for _, c := range e.containers {
		if c.id == id {
			return c
		}
	}
	return nil
}

func (e *fakeEngine) set(id string, from, to Status, kind EventKind) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.byID(id)
	if c == nil {
		return fmt.Errorf("no container %s", id)
	}
	if c.status != from {
		return fmt.Errorf("container %s is %s, not %s", id, c.status, from)
	}
	c.status = to
	select {
	case e.events <- Event{Sandbox: c.name, Kind: kind}:
	default:
	}
	return nil
}

func (e *fakeEngine) Start(ctx context.Context, id string) error {
	defer e.heavyOp(ctx)()
	e.mu.Lock()
	if c := e.byID(id); c != nil {
		c.hung = false // a new process
	}
	e.mu.Unlock()
	return e.set(id, StatusStopped, StatusRunning, EventStarted)
}

// hang makes the agent of sandbox name stop answering, as a frozen or
// deadlocked process does, until its container is started again or
// replaced.
func (e *fakeEngine) hang(name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.containers[name].hung = true
}
func (e *fakeEngine) Pause(ctx context.Context, id string) error {
	return e.set(id, StatusRunning, StatusPaused, EventPaused)
}
func (e *fakeEngine) Unpause(ctx context.Context, id string) error {
	return e.set(id, StatusPaused, StatusRunning, EventUnpaused)
}
func (e *fakeEngine) Stop(ctx context.Context, id string) error {
	e.mu.Lock()
	c := e.byID(id)
	stopped := c != nil && c.status == StatusStopped
	e.mu.Unlock()
	if stopped { // idempotent, as the contract asks
		return nil
	}
	return e.set(id, StatusRunning, StatusStopped, EventDied)
}

func (e *fakeEngine) RemoveContainer(ctx context.Context, n Names) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.containers, n.Sandbox)
	return nil
}

func (e *fakeEngine) EnsureNetwork(ctx context.Context, n Names, sn netip.Prefix) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.networks[n.Sandbox] == "" {
		e.seq++
		e.networks[n.Sandbox] = fmt.Sprintf("n%d", e.seq)
	}
	return e.networks[n.Sandbox], nil
}
func (e *fakeEngine) ConnectGateway(ctx context.Context, n Names, id string, sn netip.Prefix) error {
	return nil
}
func (e *fakeEngine) GatewaySandboxes(ctx context.Context) (map[string]bool, error) {
	return map[string]bool{}, nil
}
func (e *fakeEngine) EnsureVolumes(ctx context.Context, n Names) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.volumes[n.Sandbox+"/session"], e.volumes[n.Sandbox+"/workspace"] = true, true
	return nil
}
func (e *fakeEngine) RemoveAll(ctx context.Context, n Names) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.containers, n.Sandbox)
	delete(e.networks, n.Sandbox)
	delete(e.volumes, n.Sandbox+"/session")
	delete(e.volumes, n.Sandbox+"/workspace")
	return nil
}
func (e *fakeEngine) List(ctx context.Context) (Inventory, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	inv := NewInventory()
	for name, c := range e.containers {
		inv.Containers[name] = append(inv.Containers[name], Container{ID: c.id, Sandbox: name, Status: c.status})
	}
	for name := range e.networks {
		inv.Networks[name] = append(inv.Networks[name], name)
	}
	return inv, nil
}
func (e *fakeEngine) Events(ctx context.Context) (<-chan Event, <-chan error) {
	return e.events, make(chan error)
}

// status is a sandbox's container status, "" when it has none.
func (e *fakeEngine) status(name string) Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.containers[name]; c != nil {
		return c.status
	}
	return ""
}

func (e *fakeEngine) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.containers)
}

func (e *fakeEngine) hasVolumes(name string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.volumes[name+"/session"] && e.volumes[name+"/workspace"]
}

// fakeRegistry is the in-memory registry.
type fakeRegistry = lifecycletest.Registry

var (
	newFakeRegistry          = lifecycletest.NewRegistry
	_               Registry = (*fakeRegistry)(nil)
)

// fakeAgents are the agents of the fake engine's containers, by address:
// one answers only while its container runs unpaused.
type fakeAgents = lifecycletest.Agents

func newFakeAgents(eng *fakeEngine) *fakeAgents {
	return lifecycletest.NewAgents(func(ep netip.AddrPort) (string, bool) {
		eng.mu.Lock()
		defer eng.mu.Unlock()
		for _, c := range eng.containers {
			if c.ip == ep.Addr() && c.status == StatusRunning && !c.hung {
				return ep.Addr().String(), true
			}
		}
		return ep.Addr().String(), false
	})
}

var _ Agent = (*fakeAgents)(nil)

// rig is a Manager on the fakes, with a clock the test moves.
type rig struct {
	t      *testing.T
	m      *Manager
	eng    *fakeEngine
	reg    *fakeRegistry
	agents *fakeAgents
	clock  *fakeClock
	cancel context.CancelFunc
}

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

const testImage = "sha256:test"

func newRig(t *testing.T, cfg Config) *rig {
	t.Helper()
	eng := newFakeEngine()
	reg := newFakeRegistry()
	return newRigOn(t, cfg, eng, reg, newFakeAgents(eng))
}

// newRigOn starts a Manager on existing fakes (a manager restart).
func newRigOn(t *testing.T, cfg Config, eng *fakeEngine, reg *fakeRegistry, agents *fakeAgents) *rig {
	t.Helper()
	cfg.Stack = "t"
	cfg.Subnets = netip.MustParsePrefix("10.99.0.0/16")
	if cfg.ImageID == "" {
		cfg.ImageID = testImage
	}
	if cfg.Tick == 0 {
		cfg.Tick = 5 * time.Millisecond
	}
	cfg.ProbeInterval = time.Millisecond
	clock := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	m := New(eng, reg, agents, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	m.now = clock.Now
	return &rig{t: t, m: m, eng: eng, reg: reg, agents: agents, clock: clock, cancel: func() {}}
}

// run starts the manager's loops (reconcile, pool, scans).
func (r *rig) run() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.t.Cleanup(cancel)
	go r.m.Run(ctx)
	r.eventually("the first reconcile", r.m.EventsUp)
}

// restart stops this manager and starts another on the same fakes.
func (r *rig) restart(cfg Config) *rig {
	r.cancel()
	n := newRigOn(r.t, cfg, r.eng, r.reg, r.agents)
	n.clock.now = r.clock.Now()
	n.run()
	return n
}

func (r *rig) resolve(user string) (netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.m.Resolve(ctx, user, true)
}

func (r *rig) mustResolve(user string) netip.AddrPort {
	r.t.Helper()
	ep, err := r.resolve(user)
	if err != nil {
		r.t.Fatalf("resolve %s: %v", user, err)
	}
	return ep
}

// eventually waits for cond, failing the test after 10 s.
func (r *rig) eventually(what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func (r *rig) state(user string) State {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	if b := r.m.boxes[user]; b != nil {
		return b.state
	}
	return ""
}

// resolveAll resolves every user at once and returns the errors.
func (r *rig) resolveAll(users []string) []error {
	errs := make([]error, len(users))
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = r.resolve(u)
		}()
	}
	wg.Wait()
	return errs
}
