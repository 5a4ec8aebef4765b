// Package resolve holds the edge's side of issue 30's warm path: Caddy
// keeping the manager's forward_auth decisions for a short time, so a warm
// request costs no round trip to the manager. Only the cache is here yet;
// the handler that asks the manager and the manager's pushes are designed
// in docs/architecture.md ("The warm path's next step") and not built, and
// nothing uses this package.
package resolve

import (
	"crypto/sha256"
	"net/netip"
	"sync"
	"time"
)

// Key names one decision without holding the credential: the sha256 of the
// user, the credential (cookie or bearer) and whether the path activates.
type Key [sha256.Size]byte

// KeyOf returns the key of a request for user's sandbox.
func KeyOf(user, session, bearer string, activating bool) Key {
	h := sha256.New()
	for _, s := range []string{user, session, bearer} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	if activating {
		h.Write([]byte{1})
	}
	var k Key
	h.Sum(k[:0])
	return k
}

// Decision is the manager's 200: whose sandbox, where it is, and until when
// it may be kept (the TTL, or the session's expiry if sooner).
type Decision struct {
	User       string
	Endpoint   netip.AddrPort
	Activating bool
	Until      time.Time
}

// Cache keeps decisions while the manager's lease on it is fresh. Without a
// fresh lease it answers nothing and forgets everything: a manager that
// cannot reach this Caddy to push a forget waits the lease out before it
// revokes or pauses, so nothing stale outlives it.
//
// A nil *Cache keeps nothing.
type Cache struct {
	now func() time.Time

	mu         sync.Mutex
	m          map[Key]Decision
	leaseUntil time.Time
	// gen counts forgets and lapses: a decision asked for before one is
	// not stored (Begin, then Put).
	gen uint64
	// touched are the users answered from the cache since the last
	// Touched, true if any of their requests activated.
	touched map[string]bool
}

// NewCache returns an empty cache with no lease.
func NewCache() *Cache {
	return &Cache{now: time.Now, m: map[Key]Decision{}, touched: map[string]bool{}}
}

// Get returns k's decision if the lease and the decision are fresh, and
// records the user as touched.
func (c *Cache) Get(k Key) (Decision, bool) {
	if c == nil {
		return Decision{}, false
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leasedLocked(now) {
		return Decision{}, false
	}
	d, ok := c.m[k]
	if !ok || !now.Before(d.Until) {
		return Decision{}, false
	}
	c.touched[d.User] = c.touched[d.User] || d.Activating
	return d, true
}

// Begin returns the generation to hand to Put once the manager answered.
func (c *Cache) Begin() uint64 {
	if c == nil {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Put keeps d under k, unless a forget or a lapse came since Begin returned
// gen, or the lease is not fresh.
func (c *Cache) Put(k Key, d Decision, gen uint64) {
	if c == nil {
		return
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen || !c.leasedLocked(now) || !now.Before(d.Until) {
		return
	}
	c.m[k] = d
}

// Forget drops user's decisions, or with user "" all of them.
func (c *Cache) Forget(user string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if user == "" {
		clear(c.m)
		return
	}
	for k, d := range c.m {
		if d.User == user {
			delete(c.m, k)
		}
	}
}

// Lease lets the cache answer until until. A lease that comes after the last
// one lapsed starts from an empty cache.
func (c *Cache) Lease(until time.Time) {
	if c == nil {
		return
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leasedLocked(now)
	if until.After(c.leaseUntil) {
		c.leaseUntil = until
	}
}

// leasedLocked reports whether the lease is fresh; when it is not, it
// forgets everything. Caller holds mu.
func (c *Cache) leasedLocked(now time.Time) bool {
	if now.Before(c.leaseUntil) {
		return true
	}
	if len(c.m) > 0 || !c.leaseUntil.IsZero() {
		clear(c.m)
		c.gen++
		c.leaseUntil = time.Time{}
	}
	return false
}

// Touched returns and forgets the users answered from the cache since the
// last call, each with whether a request of theirs activated: the manager
// records them as activity, as it records a resolve.
func (c *Cache) Touched() map[string]bool {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.touched
	c.touched = map[string]bool{}
	return t
}
