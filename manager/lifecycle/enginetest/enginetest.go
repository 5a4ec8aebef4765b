// Package enginetest is the lifecycle's contract suite for engines: it
// drives real lifecycle.Managers over the engine under test, with the
// in-memory registry and fake agents of lifecycletest, through a user's
// whole life: first request, claim from the warm pool, the idle tiers
// (stop, the first tier, remove), a wake at a stored time, reset, a
// manager restart, and two managers racing for one user.
//
// The agents are fakes located by the engine (Harness.Locate): the suite
// tests the engine and the lifecycle over it, not the agent.
package enginetest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/lifecycle/lifecycletest"
	"github.com/affido/affido/manager/registry"
)

// Harness is one engine under test, fresh for each case.
type Harness struct {
	Engine lifecycle.Engine
	Stack  string // the engine's stack: the lifecycle names objects with it
	// Locate returns the key of the agent listening at ep (stable across
	// restarts of its sandbox: identity lives on the volumes) and whether
	// it is up.
	Locate func(ep netip.AddrPort) (key string, up bool)
	// Volumes reports whether sandbox's two volumes exist; nil: asks
	// Engine.List.
	Volumes func(sandbox string) bool
	// Timeout bounds every wait of the suite (default 20 s).
	Timeout time.Duration
	// Subnets is the pool sandbox subnets are cut from (default
	// 10.99.0.0/16); an engine that makes real networks needs a free one.
	Subnets netip.Prefix
}

// Run runs every case, each on a fresh Harness.
func Run(t *testing.T, fresh func(t *testing.T) Harness) {
	cases := []struct {
		name string
		run  func(*suite)
	}{
		{"FirstRequest", (*suite).firstRequest},
		{"ClaimFromPool", (*suite).claimFromPool},
		{"Stop", (*suite).stop},
		{"FirstIdleTier", (*suite).firstIdleTier},
		{"WakeAtStoredTime", (*suite).wakeAtStoredTime},
		{"Remove", (*suite).remove},
		{"Reset", (*suite).reset},
		{"ReconcileAfterRestart", (*suite).reconcileAfterRestart},
		{"TwoManagersRace", (*suite).twoManagersRace},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := fresh(t)
			if h.Timeout == 0 {
				h.Timeout = 20 * time.Second
			}
			if !h.Subnets.IsValid() {
				h.Subnets = netip.MustParsePrefix("10.99.0.0/16")
			}
			s := &suite{t: t, h: h, reg: lifecycletest.NewRegistry(), agents: lifecycletest.NewAgents(h.Locate)}
			c.run(s)
		})
	}
}

type suite struct {
	t      *testing.T
	h      Harness
	reg    *lifecycletest.Registry
	agents *lifecycletest.Agents
}

const image = "sha256:contract"

// manager starts a Manager on the suite's engine, registry and agents and
// waits for its first reconcile. stop ends it (a manager going away).
func (s *suite) manager(cfg lifecycle.Config) (m *lifecycle.Manager, stop func()) {
	s.t.Helper()
	cfg.Stack = s.h.Stack
	cfg.Subnets = s.h.Subnets
	cfg.ImageID = image
	cfg.Tick = 20 * time.Millisecond
	cfg.ProbeInterval = 5 * time.Millisecond
	cfg.RequestGrace = 50 * time.Millisecond
	cfg.ProvisionTimeout = s.h.Timeout
	cfg.BringUpTimeout = s.h.Timeout
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("AFFIDO_CONTRACT_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	m = lifecycle.New(s.h.Engine, s.reg, s.agents, cfg, log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	s.t.Cleanup(stop)
	s.eventually("the manager's first reconcile", m.EventsUp)
	return m, stop
}

func (s *suite) resolve(m *lifecycle.Manager, user string) netip.AddrPort {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
	defer cancel()
	ep, err := m.Resolve(ctx, user, true)
	if err != nil {
		s.t.Fatalf("resolve %s: %v", user, err)
	}
	return ep
}

// eventually polls cond until it holds, failing the test at the deadline.
func (s *suite) eventually(what string, cond func() bool) {
	s.t.Helper()
	deadline := time.Now().Add(s.h.Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out after %s waiting for %s", s.h.Timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// status is the engine's status of sandbox name, "" when it has none.
func (s *suite) status(name string) lifecycle.Status {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
	defer cancel()
	c, err := s.h.Engine.Inspect(ctx, lifecycle.Names{Stack: s.h.Stack, Sandbox: name})
	if errors.Is(err, lifecycle.ErrNotFound) {
		return ""
	}
	if err != nil {
		s.t.Fatalf("inspect %s: %v", name, err)
	}
	return c.Status
}

func (s *suite) volumes(name string) bool {
	s.t.Helper()
	if s.h.Volumes != nil {
		return s.h.Volumes(name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
	defer cancel()
	inv, err := s.h.Engine.List(ctx)
	if err != nil {
		s.t.Fatalf("list: %v", err)
	}
	return len(inv.Volumes[name]) == 2
}

func (s *suite) row(user string) registry.Sandbox {
	s.t.Helper()
	row, ok := s.reg.Row(user)
	if !ok {
		s.t.Fatalf("%s has no registry row", user)
	}
	return row
}

// audits counts user's audit events of kind.
func (s *suite) audits(user, kind string) int {
	n := 0
	for _, a := range s.reg.Audits() {
		if a == user+" "+kind {
			n++
		}
	}
	return n
}

func (s *suite) canPause() bool {
	_, ok := s.h.Engine.(lifecycle.Pauser)
	return ok
}

// firstRequest: a user without a sandbox gets one, running, bound to them,
// its endpoint recorded.
func (s *suite) firstRequest() {
	m, _ := s.manager(lifecycle.Config{})
	ep := s.resolve(m, "alice")
	if got := s.status("alice"); got != lifecycle.StatusRunning {
		s.t.Fatalf("alice's sandbox is %q, want running", got)
	}
	if got := s.agents.Owner(ep); got != "alice" {
		s.t.Fatalf("agent at %s bound to %q", ep, got)
	}
	if row := s.row("alice"); row.State != registry.StateRunning || row.Endpoint != ep.String() {
		s.t.Fatalf("row %+v, want running at %s", row, ep)
	}
	if !s.volumes("alice") {
		s.t.Fatal("alice's volumes are missing")
	}
	if again := s.resolve(m, "alice"); again != ep {
		s.t.Fatalf("second resolve %s, first %s", again, ep)
	}
}

// claimFromPool: the pool holds a ready sandbox (running) that is
// nobody's; a new user's request claims it under its pool name and binds
// its agent.
func (s *suite) claimFromPool() {
	m, _ := s.manager(lifecycle.Config{WarmPool: 1})
	s.eventually("a ready pool sandbox", func() bool { return s.reg.PoolCount(registry.PoolReady) == 1 })
	if err := m.SetPool(context.Background(), 0, false); err != nil { // no refill: what runs next is the claim
		s.t.Fatal(err)
	}
	pools, _ := s.reg.PoolSandboxes(context.Background())
	name := pools[0].Name
	if got, want := s.status(name), lifecycle.StatusRunning; got != want {
		s.t.Fatalf("ready pool sandbox %s is %q, want %q", name, got, want)
	}
	ep := s.resolve(m, "bob")
	if row := s.row("bob"); row.Name != name {
		s.t.Fatalf("bob got %s, not the pool's %s", row.Name, name)
	}
	if got := s.agents.Owner(ep); got != "bob" {
		s.t.Fatalf("claimed agent bound to %q", got)
	}
	if s.audits("bob", "sandbox.created") != 0 {
		s.t.Fatal("a claim created a sandbox")
	}
}

// idleDown resolves user on a manager with tiers and waits until the
// sandbox is in engine status want, volumes kept; then a request brings
// it back, still bound to user.
func (s *suite) idleDown(tiers lifecycle.Tiers, want lifecycle.Status, stored string) {
	m, _ := s.manager(lifecycle.Config{Tiers: tiers})
	ep := s.resolve(m, "alice")
	s.eventually("alice's sandbox "+string(want), func() bool { return s.status("alice") == want })
	if !s.volumes("alice") {
		s.t.Fatal("the idle tier took the volumes")
	}
	s.eventually("the registry to say "+stored, func() bool { return s.row("alice").State == stored })
	again := s.resolve(m, "alice")
	if got := s.agents.Owner(again); got != "alice" {
		s.t.Fatalf("back at %s (was %s), agent bound to %q", again, ep, got)
	}
}

// stop: the stop tier stops the sandbox; its volumes stay.
func (s *suite) stop() {
	s.idleDown(lifecycle.Tiers{Stop: 300 * time.Millisecond}, lifecycle.StatusStopped, registry.StateStopped)
}

// firstIdleTier: the first idle tier pauses where the engine can pause and
// stops where it cannot.
func (s *suite) firstIdleTier() {
	if s.canPause() {
		s.idleDown(lifecycle.Tiers{Pause: 300 * time.Millisecond}, lifecycle.StatusPaused, registry.StatePaused)
		return
	}
	s.idleDown(lifecycle.Tiers{Pause: 300 * time.Millisecond}, lifecycle.StatusStopped, registry.StateStopped)
}

// remove: the remove tier removes the container and keeps the volumes;
// the next request makes the container again on them.
func (s *suite) remove() {
	s.idleDown(lifecycle.Tiers{Remove: 300 * time.Millisecond}, "", registry.StateRemoved)
}

// wakeAtStoredTime: an agent going idle with work due later has its due
// time stored before its sandbox goes down, and is brought up and woken
// then.
func (s *suite) wakeAtStoredTime() {
	m, _ := s.manager(lifecycle.Config{Tiers: lifecycle.Tiers{Pause: 300 * time.Millisecond}})
	// Set before the sandbox is up: on a busy machine the idle tier could
	// otherwise ask the agent before the test had told it its due time.
	due := time.Now().Add(7 * time.Second)
	s.agents.SetDueFor("alice", &due)
	ep := s.resolve(m, "alice")
	key, _ := s.h.Locate(ep)
	s.eventually("alice's sandbox to go down", func() bool { return s.status("alice") != lifecycle.StatusRunning })
	if row := s.row("alice"); row.WakeAt == nil || !row.WakeAt.Equal(due) {
		s.t.Fatalf("sandbox went down with wake_at %v stored, want %v", row.WakeAt, due)
	}
	s.eventually("the wake", func() bool { return s.agents.Wakes(key) >= 1 })
	// Before a resume was measured, the wake lead is the tier's default: at
	// most 3 s (a stop's; an engine without pause stops at the first tier).
	if early := time.Until(due); early > 3500*time.Millisecond {
		s.t.Fatalf("woken %s before its time", early)
	}
	// The audit event is recorded after the wake it reports.
	s.eventually("the sandbox.woken audit event", func() bool { return s.audits("alice", "sandbox.woken") > 0 })
}

// reset removes container and volumes and the row.
func (s *suite) reset() {
	m, _ := s.manager(lifecycle.Config{})
	s.resolve(m, "alice")
	if err := m.Reset(context.Background(), "alice"); err != nil {
		s.t.Fatal(err)
	}
	if got := s.status("alice"); got != "" {
		s.t.Fatalf("after reset the sandbox is %q", got)
	}
	if s.volumes("alice") {
		s.t.Fatal("reset left the volumes")
	}
	if _, ok := s.reg.Row("alice"); ok {
		s.t.Fatal("reset left the row")
	}
}

// reconcileAfterRestart: a new manager adopts what the last one left,
// running or removed, and stops nothing.
func (s *suite) reconcileAfterRestart() {
	m1, stop1 := s.manager(lifecycle.Config{})
	ep := s.resolve(m1, "alice")
	s.resolve(m1, "bob")
	if err := m1.Evict(context.Background(), "bob"); err != nil {
		s.t.Fatal(err)
	}
	before := len(s.reg.Audits())
	stop1()
	m2, _ := s.manager(lifecycle.Config{})
	if got := s.status("alice"); got != lifecycle.StatusRunning {
		s.t.Fatalf("after a manager restart alice's sandbox is %q", got)
	}
	if again := s.resolve(m2, "alice"); again != ep {
		s.t.Fatalf("alice at %s after the restart, %s before", again, ep)
	}
	for _, a := range s.reg.Audits()[before:] {
		if strings.HasPrefix(a, "alice ") {
			s.t.Fatalf("the restart touched alice's running sandbox: %s", a)
		}
	}
	bob := s.resolve(m2, "bob")
	if got := s.agents.Owner(bob); got != "bob" {
		s.t.Fatalf("bob's sandbox bound to %q", got)
	}
}

// twoManagersRace: two managers on one registry get the same user's first
// requests at once; one sandbox is made, and both answer its endpoint.
func (s *suite) twoManagersRace() {
	m1, _ := s.manager(lifecycle.Config{})
	m2, _ := s.manager(lifecycle.Config{})
	var wg sync.WaitGroup
	eps := make([]netip.AddrPort, 6)
	errs := make([]error, len(eps))
	for i := range eps {
		m := m1
		if i%2 == 1 {
			m = m2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
			defer cancel()
			eps[i], errs[i] = m.Resolve(ctx, "carol", true)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			s.t.Fatalf("resolve %d: %v", i, err)
		}
		if eps[i] != eps[0] {
			s.t.Fatalf("two endpoints for one user: %s and %s", eps[0], eps[i])
		}
	}
	if n := s.audits("carol", "sandbox.created"); n != 1 {
		s.t.Fatalf("%d sandboxes created for one user (audits %s)", n, strings.Join(s.reg.Audits(), "; "))
	}
	if got := s.agents.Owner(eps[0]); got != "carol" {
		s.t.Fatalf("agent bound to %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.h.Timeout)
	defer cancel()
	inv, err := s.h.Engine.List(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	if n := len(inv.Containers["carol"]); n != 1 {
		s.t.Fatalf("%d containers for carol", n)
	}
}
