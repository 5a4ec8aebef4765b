// Package lifecycle keeps every user's sandbox in the right state: it
// provisions, claims from the warm pool or resumes a sandbox when a request
// needs it (through a bounded admission queue), walks idle sandboxes down
// the pause → stop → remove tiers, never pauses one under a request, wakes
// sleeping ones when their stored deadline comes, keeps the warm pool full,
// and reconciles its view with the engine's.
//
// The engine and the registry are interfaces this package owns (ports.go);
// each operation has its own file.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/subnet"
)

// ErrCapacity is returned when no more sandboxes may run and none can be freed.
var ErrCapacity = errors.New("sandbox capacity reached")

// ErrClaimedByOther is returned when a sandbox's agent says it belongs to
// another user than the registry does; it is never bound again. Agent.Claim
// returns it too.
var ErrClaimedByOther = sandboxapi.ErrClaimedByOther

// ErrClaimedAlready: the agent is the user's already, under a token
// another bind gave it (the answer to a claim if_unclaimed).
var ErrClaimedAlready = sandboxapi.ErrClaimedAlready

// QueuedError is returned when a request's budget ran out before its
// sandbox was up. The work goes on; RetryAfter is when to ask again.
type QueuedError struct {
	RetryAfter time.Duration
	Position   int // place in the admission queue; 0 when no longer queued
}

func (e *QueuedError) Error() string {
	return fmt.Sprintf("sandbox is still being brought up (queue position %d); retry after %s", e.Position, e.RetryAfter)
}

// Config is the lifecycle policy.
type Config struct {
	Stack      string       // names the engine objects (Names)
	Subnets    netip.Prefix // the pool user subnets are cut from
	SubnetBits int
	Tiers      Tiers
	MaxRunning int // 0: unlimited
	// ImageID is the agent image's id; a pool sandbox made from another
	// is retired.
	ImageID string
	// WarmPool is how many unclaimed sandboxes are kept ready.
	WarmPool int
	// Admission is how many engine-heavy bring-ups (create, start) run at
	// once; the rest wait their turn in arrival order.
	Admission int
	// ProvisionTimeout is a request's budget when its sandbox needs work;
	// past it the request gets a QueuedError and the work goes on, for at
	// most BringUpTimeout.
	ProvisionTimeout time.Duration
	BringUpTimeout   time.Duration
	// RequestGrace is how long after any request (passive ones included) a
	// sandbox is not paused: the request may still be on its way to it.
	RequestGrace  time.Duration
	ProbeInterval time.Duration // readiness poll interval
	Tick          time.Duration // idle, wake and pool scan interval
}

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.ProbeInterval, 10*time.Millisecond)
	def(&c.ProvisionTimeout, 30*time.Second)
	def(&c.BringUpTimeout, 2*time.Minute)
	def(&c.RequestGrace, 500*time.Millisecond)
	def(&c.Tick, time.Second)
	if c.SubnetBits == 0 {
		c.SubnetBits = 28
	}
	if c.Admission <= 0 {
		c.Admission = 4
	}
	// A heavy bring-up holds a registry connection (the user's lock) while
	// it makes more registry calls: stay well below the registry's pool.
	c.Admission = min(c.Admission, 16)
}

// Manager owns the sandboxes of one stack.
type Manager struct {
	onReset   func(ctx context.Context, user string) error // see OnReset
	onUnserve func(user string)                            // see OnUnserve
	eng       Engine
	pauser    Pauser   // nil: the engine cannot pause; the first idle tier stops
	nets      Networks // nil: the engine has no per-sandbox networks; it reports addresses
	reg       Registry
	agent     Agent
	cfg       Config
	log       *slog.Logger
	metrics   *Metrics
	adm       *admission

	mu       sync.Mutex
	boxes    map[string]*box           // by user
	byName   map[string]string         // sandbox name -> user
	pool     map[string]*poolBox       // by pool sandbox name
	resume   map[State][]time.Duration // recent resume times per tier (wake.go)
	poolKick chan struct{}
	// adopted is closed once the first reconcile (Adopt) has read the
	// registry and the engine: the pool fills only after it.
	adopted     chan struct{}
	adoptedOnce sync.Once
	queued      map[string]bool    // users whose sandbox reconcile should look at now
	lookAt      map[*box]time.Time // when each sandbox's last reconcile asked to be looked at again
	// looks are the sandboxes an engine event named since the manager last
	// read the engine for them: reconcile reads it before anything else,
	// and requests do not go straight to them meanwhile.
	looks map[*box]bool
	kick  chan struct{} // something was queued

	eventsUp  atomic.Bool
	now       func() time.Time
	hungProbe time.Duration // wake.go
}

// box is the in-memory view of one user's sandbox. op serializes the steps
// taken on it (one at a time per sandbox); the other fields are guarded by
// Manager.mu. Only reconcile's steps, Evict and Reset change state; a
// request only records that it wants the sandbox and waits for the answer.
type box struct {
	op opLock

	user     string
	name     string // the sandbox name the registry records; "" until read
	state    State
	endpoint netip.AddrPort
	subnet   netip.Prefix
	// lastActive is the last activating request: the idle tiers count
	// from it. lastRequest is the last request of any kind: no pause
	// within RequestGrace of it.
	lastActive, lastRequest time.Time
	// wanted is when the oldest request not yet answered by a bring-up
	// came (zero: none). It outlives a request that gave up waiting, so
	// asking again later finds the sandbox up. wantedActive: one of those
	// requests was activating, so the bring-up that answers it is activity
	// (the idle tiers count from the answer, not from the wait's start).
	wanted       time.Time
	wantedActive bool
	waiters      []chan upResult // the requests waiting for the next bring-up's outcome
	wakeAt       *time.Time      // stored: when the scheduler brings the sandbox back
	// reported is the agent's own last report of its next due time.
	reported *time.Time
	// restartAt is the wake time stored for the last restart after a death
	// (wake.go): a second death within crashWindow is not restarted.
	restartAt time.Time
	// wokeFor is the due time the last wake brought the sandbox up for,
	// ahead of it: no idle tier puts it down again before then.
	wokeFor time.Time
	// silent: its agent did not answer when the sandbox last went down, so
	// its wake probes it and replaces a container whose agent still does
	// not answer, and starts early enough for that (wake.go).
	silent bool
	// frozen: this manager paused the sandbox after its agent answered
	// /pause, and nothing changed it since (setState clears it): a resume
	// needs neither the engine's look nor the agent's /health.
	frozen bool
}

// upResult is a bring-up's answer to the requests that waited for it.
type upResult struct {
	ep  netip.AddrPort
	err error
}

// New returns a Manager. Call Run to start its background loops.
func New(eng Engine, reg Registry, agent Agent, cfg Config, log *slog.Logger, m *Metrics) *Manager {
	cfg.defaults()
	if m == nil {
		m = NewMetrics(func() map[string]int { return nil })
	}
	mgr := &Manager{eng: eng, reg: reg, agent: agent, cfg: cfg, log: log, metrics: m,
		boxes: map[string]*box{}, byName: map[string]string{}, pool: map[string]*poolBox{},
		poolKick: make(chan struct{}, 1), adopted: make(chan struct{}), queued: map[string]bool{}, lookAt: map[*box]time.Time{}, looks: map[*box]bool{}, kick: make(chan struct{}, 1), now: time.Now, hungProbe: hungProbe}
	mgr.adm = newAdmission(cfg.Admission)
	mgr.pauser, _ = eng.(Pauser)
	mgr.nets, _ = eng.(Networks)
	return mgr
}

// boxLocked returns user's box, making it. Caller holds m.mu.
func (m *Manager) boxLocked(user string) *box {
	b := m.boxes[user]
	if b == nil {
		b = &box{op: newOpLock(), user: user, state: Unknown, lastActive: m.now()}
		m.boxes[user] = b
	}
	return b
}

func (m *Manager) box(user string) *box {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boxLocked(user)
}

// names returns the engine names of a sandbox called name.
func (m *Manager) names(name string) Names {
	return Names{Stack: m.cfg.Stack, Sandbox: name}
}

// noteRow records what the registry says of b's sandbox.
func (m *Manager) noteRow(b *box, row registry.Sandbox) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b.name, b.subnet = row.Name, row.Subnet
	m.byName[row.Name] = b.user
}

func (m *Manager) pickSubnet(used []netip.Prefix) (netip.Prefix, error) {
	return subnet.Allocate(m.cfg.Subnets, m.cfg.SubnetBits, used)
}

// setState records b's new state (and, when it is up, its endpoint).
func (m *Manager) setState(b *box, state State, ep netip.AddrPort) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b.state, b.frozen = state, false
	if ep.IsValid() || !state.up() {
		b.endpoint = ep
	}
}

// servingLocked reports whether requests may go straight to b's endpoint:
// a bring-up of this manager saw its agent answer, bound to b's user, and
// no engine event came since. Caller holds m.mu.
func (m *Manager) servingLocked(b *box) bool {
	return b.state == Running && b.endpoint.IsValid() && !m.looks[b]
}

// endpoint is where a sandbox's agent listens: on an engine with
// networks, the fixed address in its subnet (with the port the engine
// reports); on another, the address the engine reports once the container
// runs (a Pod's IP), asking the engine again if c predates the start.
func (m *Manager) endpoint(ctx context.Context, n Names, sn netip.Prefix, c Container) (netip.AddrPort, error) {
	if m.nets != nil {
		port := uint16(8080)
		if c.Endpoint.IsValid() {
			port = c.Endpoint.Port()
		}
		return netip.AddrPortFrom(subnet.SandboxIP(sn), port), nil
	}
	if c.Status == StatusRunning && c.Endpoint.IsValid() {
		return c.Endpoint, nil
	}
	c, err := m.eng.Inspect(ctx, n)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if !c.Endpoint.IsValid() {
		return netip.AddrPort{}, fmt.Errorf("sandbox %s is %s and has no address yet", n.Sandbox, c.Status)
	}
	return c.Endpoint, nil
}

// recheckEvery is how often a wait for /health looks whether the
// container still runs. A container stopped or paused behind the manager's
// back while its agent was awaited (a `docker stop` during a bring-up)
// never answers; without the look the wait lasted BringUpTimeout.
const recheckEvery = time.Second

// errNotRunningWhileAwaited says the container stopped, paused or went
// while waitHealthy waited for its agent.
var errNotRunningWhileAwaited = errors.New("the container stopped running while its agent was awaited")

// waitHealthy polls the agent's /health every ProbeInterval until it
// answers, and every recheckEvery looks at the container: one that no
// longer runs ends the wait with errNotRunningWhileAwaited.
func (m *Manager) waitHealthy(ctx context.Context, n Names, ep netip.AddrPort) (sandboxapi.Health, error) {
	t := time.NewTicker(m.cfg.ProbeInterval)
	defer t.Stop()
	recheck := time.Now().Add(recheckEvery)
	for {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		h, err := m.agent.Health(pctx, ep)
		cancel()
		if err == nil {
			return h, nil
		}
		if now := time.Now(); now.After(recheck) {
			recheck = now.Add(recheckEvery)
			c, ierr := m.eng.Inspect(ctx, n)
			if errors.Is(ierr, ErrNotFound) || ierr == nil && (c.Status == StatusStopped || c.Status == StatusPaused) {
				return h, fmt.Errorf("wait for /health at %s: %w (%s)", ep, errNotRunningWhileAwaited, c.Status)
			}
		}
		select {
		case <-ctx.Done():
			return h, fmt.Errorf("wait for /health at %s: %w (last: %v)", ep, ctx.Err(), err)
		case <-t.C:
		}
	}
}

func (m *Manager) audit(user, kind string, detail map[string]any) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := m.reg.Audit(ctx, user, kind, detail); err != nil {
		m.log.Warn("audit event not recorded", "user", user, "kind", kind, "err", err)
	}
}

func wakeDetail(t *time.Time) map[string]any {
	if t == nil {
		return nil
	}
	return map[string]any{"wake_at": t.UTC().Format(time.RFC3339Nano)}
}

// EventsUp reports whether the engine's event stream is connected.
func (m *Manager) EventsUp() bool { return m.eventsUp.Load() }
