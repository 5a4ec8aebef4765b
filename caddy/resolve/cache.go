package resolve

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/affido/affido/internal/edgeapi"
)

// Key names one decision without holding the credential: the sha256 of the
// user, the session cookie, the bearer token and whether the path activates.
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
// it may be kept.
type Decision struct {
	User       string
	Endpoint   string
	Activating bool
	Token      string // hex sha256 of the API token, "" for a session
	Until      time.Time
}

// Cache keeps decisions while the manager's lease on it is fresh. Without a
// fresh lease it answers nothing and forgets everything: a manager that
// cannot reach this Caddy waits the lease out before it revokes or pauses,
// so nothing stale outlives it.
type Cache struct {
	now     func() time.Time
	max     int // entries
	maxUser int // entries of one user

	mu         sync.Mutex
	m          map[Key]Decision
	perUser    map[string]int
	swept      time.Time // the last scan for expired entries
	leaseUntil time.Time
	epoch      string // the manager process the lease and acked are of
	acked      uint64
	// gen counts forgets and lapses: a decision asked for before one is
	// not stored (Begin, then Put).
	gen uint64
	// touched are the users answered from the cache since the last poll.
	touched map[string]*touch
}

type touch struct {
	active bool
	tokens map[string]bool
}

// maxEntries bounds the cache, maxPerUser one user's part of it (each
// credential and each other cookie a client sends makes another key): past
// them a new decision is not kept, and the request asks the manager.
const (
	maxEntries = 20000
	maxPerUser = 64
)

// NewCache returns an empty cache with no lease.
func NewCache() *Cache {
	return &Cache{now: time.Now, max: maxEntries, maxUser: maxPerUser, m: map[Key]Decision{},
		perUser: map[string]int{}, touched: map[string]*touch{}}
}

// deleteLocked drops k's entry. Caller holds mu.
func (c *Cache) deleteLocked(k Key, d Decision) {
	delete(c.m, k)
	if c.perUser[d.User]--; c.perUser[d.User] <= 0 {
		delete(c.perUser, d.User)
	}
}

// clearLocked drops every entry. Caller holds mu.
func (c *Cache) clearLocked() {
	clear(c.m)
	clear(c.perUser)
}

// Get returns k's decision if the lease and the decision are fresh, and
// records the user as touched.
func (c *Cache) Get(k Key) (Decision, bool) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.leasedLocked(now) {
		return Decision{}, false
	}
	d, ok := c.m[k]
	if !ok {
		return Decision{}, false
	}
	if !now.Before(d.Until) {
		c.deleteLocked(k, d)
		return Decision{}, false
	}
	var tokens []string
	if d.Token != "" {
		tokens = []string{d.Token}
	}
	c.touchLocked(d.User, d.Activating, tokens)
	return d, true
}

// touchLocked records user as answered from the cache, with the API
// tokens used (at most 16 kept). Caller holds mu.
func (c *Cache) touchLocked(user string, active bool, tokens []string) {
	t := c.touched[user]
	if t == nil {
		t = &touch{}
		c.touched[user] = t
	}
	t.active = t.active || active
	for _, tok := range tokens {
		if len(t.tokens) >= 16 {
			break
		}
		if t.tokens == nil {
			t.tokens = map[string]bool{}
		}
		t.tokens[tok] = true
	}
}

// Begin returns the generation to hand to Put once the manager answered.
func (c *Cache) Begin() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// Put keeps d under k, unless a forget or a lapse came since Begin returned
// gen, or the lease is not fresh.
func (c *Cache) Put(k Key, d Decision, gen uint64) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen || !c.leasedLocked(now) || !now.Before(d.Until) {
		return
	}
	if old, ok := c.m[k]; ok {
		c.deleteLocked(k, old)
	}
	if len(c.m) >= c.max && now.Sub(c.swept) >= time.Second { // drop the expired, once a second at most
		c.swept = now
		for k2, d2 := range c.m {
			if !now.Before(d2.Until) {
				c.deleteLocked(k2, d2)
			}
		}
	}
	if len(c.m) >= c.max || c.perUser[d.User] >= c.maxUser {
		return
	}
	c.m[k] = d
	c.perUser[d.User]++
}

// Apply takes the manager's answer to a poll sent at sent: its forgets
// first, then its lease, counted from sent.
func (c *Cache) Apply(a edgeapi.Answer, sent time.Time) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leasedLocked(now)
	if a.Epoch != c.epoch || a.All {
		c.clearLocked()
		c.gen++
		c.epoch = a.Epoch
	} else if len(a.Forget) > 0 {
		c.gen++
		forget := map[string]bool{}
		for _, u := range a.Forget {
			forget[u] = true
		}
		for k, d := range c.m {
			if forget[d.User] {
				c.deleteLocked(k, d)
			}
		}
	}
	c.acked = a.Seq
	if until := sent.Add(time.Duration(a.LeaseMS) * time.Millisecond); until.After(c.leaseUntil) && now.Before(until) {
		c.leaseUntil = until
	}
}

// Lapse ends the lease now (the manager could not be polled, or answered
// something else): from here on every request asks the manager.
func (c *Cache) Lapse() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leaseUntil = time.Time{}
	c.clearLocked()
	c.gen++
}

// Poll returns this Caddy's next poll (with id) and forgets the touches it
// carries; Untouch gives them back when the poll failed.
func (c *Cache) Poll(id string) edgeapi.Poll {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := edgeapi.Poll{Caddy: id, Epoch: c.epoch, Acked: c.acked}
	for u, t := range c.touched {
		e := edgeapi.Touch{User: u, Active: t.active}
		for tok := range t.tokens {
			e.Tokens = append(e.Tokens, tok)
		}
		p.Touched = append(p.Touched, e)
	}
	c.touched = map[string]*touch{}
	return p
}

// Untouch gives back the touches of a poll that did not reach the manager.
func (c *Cache) Untouch(ts []edgeapi.Touch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range ts {
		c.touchLocked(e.User, e.Active, e.Tokens)
	}
}

// leasedLocked reports whether the lease is fresh; when it is not, it
// forgets everything. Caller holds mu.
func (c *Cache) leasedLocked(now time.Time) bool {
	if now.Before(c.leaseUntil) {
		return true
	}
	if len(c.m) > 0 || !c.leaseUntil.IsZero() {
		c.clearLocked()
		c.gen++
		c.leaseUntil = time.Time{}
	}
	return false
}
