// Package browser is the agents' browser, held by the manager: one browser
// sandbox per user (Debian's Chromium in a container on no network at all,
// its profile on a volume of its own), driven over CDP (chromedp) on the
// agent's behalf, whose every connection out arrives here and goes through
// the guarded outbound client (the proxy: checked at dial time, for every
// page, redirect, subresource and WebSocket alike). The sandbox is made on
// the first browser tool call and follows the idle tiers of the agent
// sandboxes: paused, stopped, removed; the profile stays.
//
// The agent decides nothing here: whether a call may run is its owner's
// rules (agent/policy). This package refuses, whatever the rules, what no
// rule may allow: typing into a password field, acting on a page of
// another site than the one the call names.
package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Engine makes and runs the browser sandboxes (manager/provision's
// Browsers on Docker).
type Engine interface {
	// Up makes sure the user's browser sandbox runs: made if missing,
	// started or unpaused.
	Up(ctx context.Context, user string) error
	// Bridge starts a bridge in the running sandbox and returns its
	// standard input and output (internal/browserapi).
	Bridge(ctx context.Context, user string) (io.ReadWriteCloser, error)
	Pause(ctx context.Context, user string) error
	Stop(ctx context.Context, user string) error
	// Remove removes the sandbox's container; its profile volume stays.
	Remove(ctx context.Context, user string) error
	// Purge removes the container and the profile volume.
	Purge(ctx context.Context, user string) error
	// List returns the stack's browser sandboxes: user -> Docker state.
	List(ctx context.Context) (map[string]string, error)
}

// Config is the service's.
type Config struct {
	Engine Engine
	// Dial is the guarded dialer, Transport the guarded transport (it
	// follows no redirect: the browser does, through the proxy again).
	Dial      func(ctx context.Context, network, address string) (net.Conn, error)
	Transport http.RoundTripper
	// TunnelPorts are more ports a CONNECT may reach than 443, 80, 8443
	// and 8080 (tests).
	TunnelPorts map[string]bool
	// The idle tiers (0: never).
	IdlePause, IdleStop, IdleRemove time.Duration
	// Timeout bounds one operation (a page load, a click and what it
	// starts); default 30 s.
	Timeout time.Duration
	Log     *slog.Logger
	Now     func() time.Time
	// Audit records an event in the user's Activity (the sandbox's
	// tiers, each action, the owner's take-over); nil: none.
	Audit func(user, kind string, detail map[string]any)
}

// Errors the gateway maps to problem responses.
var (
	ErrBadRequest = errors.New("bad browser request")
	ErrNoPage     = errors.New("no page is open")
	ErrOtherSite  = errors.New("the page is on another site")
	ErrPassword   = errors.New("typing into a password field is refused")
	ErrNoElement  = errors.New("no such element")
	ErrBrowser    = errors.New("the browser sandbox failed")
	ErrPage       = errors.New("the page failed")
	ErrBusy       = errors.New("the browser is busy")
	ErrOwnSite    = errors.New("the tab is on this platform's own site")
)

// Service is every user's browser.
type Service struct {
	cfg Config

	mu    sync.Mutex
	users map[string]*userState
}

// userState is one user's browser: one operation at a time.
type userState struct {
	op      turn // held through an operation, and by the sweeper
	sess    *session
	lastUse time.Time
	tier    tier
	refused *refusals
	// lastURL is each agent's tab's page after its last action: a tab
	// lost with its sandbox (paused, stopped, removed, killed) opens there
	// again, with the profile's cookies.
	lastURL map[string]string
}

type tier int

const (
	tierUp tier = iota
	tierPaused
	tierStopped
	tierRemoved
)

var tierNames = [...]string{"up", "paused", "stopped", "removed"}

// New returns the service.
func New(cfg Config) *Service {
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{cfg: cfg, users: map[string]*userState{}}
}

func (s *Service) user(id string) *userState {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[id]
	if u == nil {
		u = &userState{tier: tierRemoved, refused: &refusals{}, lastURL: map[string]string{}}
		s.users[id] = u
	}
	return u
}

// Reset removes the user's browser sandbox and its profile (the user's
// reset: sign-ins and tabs go), after the action under way.
func (s *Service) Reset(ctx context.Context, user string) error {
	u := s.user(user)
	u.op.Lock()
	defer u.op.Unlock()
	if u.sess != nil {
		u.sess.close()
		u.sess = nil
	}
	if err := s.cfg.Engine.Purge(ctx, user); err != nil {
		return fmt.Errorf("%w: %v", ErrBrowser, err)
	}
	u.lastURL = map[string]string{}
	u.tier = tierRemoved
	return nil
}

// Close ends every session (the sandboxes stay as they are), each after
// the action under way.
func (s *Service) Close() {
	s.mu.Lock()
	users := make([]*userState, 0, len(s.users))
	for _, u := range s.users {
		users = append(users, u)
	}
	s.mu.Unlock()
	for _, u := range users {
		u.op.Lock()
		if u.sess != nil {
			u.sess.close()
			u.sess = nil
		}
		u.op.Unlock()
	}
}

// maxWaiting bounds the actions of one user waiting for the one under
// way; past it an action is refused at once (ErrBusy).
const maxWaiting = 4

// turn is one user's lock: an action takes it, giving up when its request
// ends, and no more than maxWaiting wait for it.
type turn struct {
	ch      chan struct{}
	once    sync.Once
	waiting atomic.Int32
}

func (t *turn) c() chan struct{} {
	t.once.Do(func() { t.ch = make(chan struct{}, 1) })
	return t.ch
}

// take waits for the turn until ctx ends.
func (t *turn) take(ctx context.Context) error {
	if t.waiting.Add(1) > maxWaiting {
		t.waiting.Add(-1)
		return fmt.Errorf("%w: %d browser actions are already waiting", ErrBusy, maxWaiting)
	}
	defer t.waiting.Add(-1)
	select {
	case t.c() <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: the action waited for the one before it until its request ended", ErrBusy)
	}
}

// Lock waits for the turn, however long.
func (t *turn) Lock() { t.c() <- struct{}{} }

// TryLock takes the turn if it is free.
func (t *turn) TryLock() bool {
	select {
	case t.c() <- struct{}{}:
		return true
	default:
		return false
	}
}

func (t *turn) Unlock() { <-t.c() }

// refusals keeps the last addresses the proxy refused for a user.
type refusals struct {
	mu     sync.Mutex
	list   []string
	n      int
	logged time.Time // the start of the current second
	quiet  int       // refusals in it
}

// logBurst is how many refusals of one user are logged in a second: a
// page that loops on a refused address cannot flood the log.
const logBurst = 30

// add records one; it reports whether to log it.
func (r *refusals) add(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	r.list = append(r.list, s)
	if len(r.list) > 20 {
		r.list = r.list[len(r.list)-20:]
	}
	if time.Since(r.logged) >= time.Second {
		r.logged, r.quiet = time.Now(), 0
	}
	r.quiet++
	return r.quiet <= logBurst
}

// since returns how many were refused after mark, and the latest ones.
func (r *refusals) since(mark int) (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.n - mark
	l := r.list
	if n < len(l) {
		l = l[len(l)-n:]
	}
	return n, append([]string(nil), l...)
}

func (r *refusals) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}
