package lifecycletest

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/affido/affido/internal/sandboxapi"
)

// Agents are fake agents. Where one listens, and whether it is up, is the
// engine's to say (Locate); an agent's state is kept under the key Locate
// returns, so an engine whose agents keep their identity on their volumes
// (a real agent's /data/identity.json) keys them by volume, not address.
type Agents struct {
	// Locate returns the key of the agent listening at ep and whether it
	// is up (its sandbox runs unpaused).
	Locate func(ep netip.AddrPort) (key string, up bool)

	mu     sync.Mutex
	owner  map[string]string // claimed user
	token  map[string]string // its gateway token
	health int               // GET /health calls answered
	// beforeClaim, when set, runs before every claim is answered (another
	// manager binding the agent first).
	beforeClaim func(key string)
	busy        map[string]bool       // a request in flight
	due         map[string]*time.Time // next due time PrepareIdle reports
	dueFor      map[string]*time.Time // the same, by the claimed user, for agents not yet up
	claims      int
	wakes       map[string]int
	// idleGate, when set, holds every PrepareIdle until it is closed (or
	// the caller gives up): an agent slow to answer a pause.
	idleGate chan struct{}
}

// SetIdleGate makes PrepareIdle wait until gate is closed (nil: answer at once).
func (a *Agents) SetIdleGate(gate chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.idleGate = gate
}

// NewAgents returns fake agents located by locate.
func NewAgents(locate func(ep netip.AddrPort) (string, bool)) *Agents {
	return &Agents{Locate: locate, owner: map[string]string{}, token: map[string]string{}, busy: map[string]bool{}, due: map[string]*time.Time{}, dueFor: map[string]*time.Time{}, wakes: map[string]int{}}
}

func (a *Agents) at(ep netip.AddrPort) (string, error) {
	k, up := a.Locate(ep)
	if !up {
		return "", fmt.Errorf("connect %s: no running sandbox", ep)
	}
	return k, nil
}

// Health answers like GET /health.
func (a *Agents) Health(ctx context.Context, ep netip.AddrPort) (sandboxapi.Health, error) {
	k, err := a.at(ep)
	if err != nil {
		return sandboxapi.Health{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.health++
	u := a.owner[k]
	return sandboxapi.Health{Status: "ok", Claimed: u != "", User: u}, nil
}

// Claim binds the agent; one bound to another user refuses; the same user
// again replaces the token.
func (a *Agents) Claim(ctx context.Context, ep netip.AddrPort, user, token string) error {
	return a.claim(ep, user, token, false)
}

// ClaimIfUnclaimed is Claim that refuses to replace a token with
// sandboxapi.ErrClaimedAlready.
func (a *Agents) ClaimIfUnclaimed(ctx context.Context, ep netip.AddrPort, user, token string) error {
	return a.claim(ep, user, token, true)
}

func (a *Agents) claim(ep netip.AddrPort, user, token string, ifUnclaimed bool) error {
	k, err := a.at(ep)
	if err != nil {
		return err
	}
	a.mu.Lock()
	before := a.beforeClaim
	a.mu.Unlock()
	if before != nil {
		before(k)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch u := a.owner[k]; {
	case u != "" && u != user:
		return sandboxapi.ErrClaimedByOther
	case ifUnclaimed && u == user && a.token[k] != token:
		return sandboxapi.ErrClaimedAlready
	}
	a.owner[k], a.token[k] = user, token
	a.claims++
	return nil
}

// Token returns the gateway token the agent at ep was claimed with.
func (a *Agents) Token(ep netip.AddrPort) string {
	k, _ := a.Locate(ep)
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.token[k]
}

// HealthCalls counts the GET /health calls answered, to every agent.
func (a *Agents) HealthCalls() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.health
}

// SetBeforeClaim makes every claim run f (with the agent's key) before it
// is answered; nil: none. f may call Claim on another goroutine's behalf.
func (a *Agents) SetBeforeClaim(f func(key string)) {
	a.mu.Lock()
	a.beforeClaim = f
	a.mu.Unlock()
}

// ClaimKey binds the agent under key behind the manager's back, with token
// (another manager's bind).
func (a *Agents) ClaimKey(key, user, token string) {
	a.mu.Lock()
	a.owner[key], a.token[key] = user, token
	a.mu.Unlock()
}

// PrepareIdle refuses while the agent is busy, else reports its due time.
func (a *Agents) PrepareIdle(ctx context.Context, ep netip.AddrPort) (bool, *time.Time, error) {
	k, err := a.at(ep)
	if err != nil {
		return false, nil, err
	}
	a.mu.Lock()
	gate := a.idleGate
	a.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return false, nil, ctx.Err()
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	due := a.due[k]
	if due == nil {
		due = a.dueFor[a.owner[k]]
	}
	return a.busy[k], due, nil
}

// Wake counts a POST /wake; the agent's due time is then past.
func (a *Agents) Wake(ctx context.Context, ep netip.AddrPort) error {
	k, up := a.Locate(ep)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wakes[k]++
	if !up {
		return fmt.Errorf("connect %s: no running sandbox", ep)
	}
	delete(a.due, k)
	delete(a.dueFor, a.owner[k])
	return nil
}

// Owner returns the user the agent at ep is bound to.
func (a *Agents) Owner(ep netip.AddrPort) string {
	k, _ := a.Locate(ep)
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.owner[k]
}

// SetOwner binds the agent at ep behind the manager's back.
func (a *Agents) SetOwner(ep netip.AddrPort, user string) {
	k, _ := a.Locate(ep)
	a.mu.Lock()
	a.owner[k] = user
	a.mu.Unlock()
}

// SetBusy says whether the agent at ep has a request in flight.
func (a *Agents) SetBusy(ep netip.AddrPort, on bool) {
	k, _ := a.Locate(ep)
	a.mu.Lock()
	a.busy[k] = on
	a.mu.Unlock()
}

// SetDue sets the next due time the agent at ep reports when asked to go
// idle (nil: none).
func (a *Agents) SetDue(ep netip.AddrPort, at *time.Time) {
	k, _ := a.Locate(ep)
	a.mu.Lock()
	a.due[k] = at
	a.mu.Unlock()
}

// SetDueFor sets the due time the agent bound to user reports, before that
// agent is up (so no idle tier can come first).
func (a *Agents) SetDueFor(user string, at *time.Time) {
	a.mu.Lock()
	a.dueFor[user] = at
	a.mu.Unlock()
}

// Claims counts the claims that bound an agent.
func (a *Agents) Claims() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.claims
}

// Wakes counts the POST /wake calls, in all or (key != "") to one agent.
func (a *Agents) Wakes(key string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if key != "" {
		return a.wakes[key]
	}
	n := 0
	for _, w := range a.wakes {
		n += w
	}
	return n
}
