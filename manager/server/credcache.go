package server

import (
	"crypto/sha256"
	"errors"
	"sync"
	"time"

	"github.com/affido/affido/manager/registry"
)

// DefaultCredentialCacheSize bounds a CredentialCache's entries.
const DefaultCredentialCacheSize = 10000

// CredentialCache remembers for a short while whose a session or API token
// is, so that a warm request through forward_auth costs no Postgres round
// trip. It keeps only successes, under the sha256 of the credential (never
// the credential): an unknown token always goes to Postgres, which the
// failed-auth throttles bound, and cannot grow the cache. An entry lives at
// most the TTL and never past the session's own expiry.
//
// Every revoke path of this process forgets what it revokes before it
// answers, so the next request is refused; with Edge set, Caddy's kept
// decisions are forgotten too, before the forget returns. Another manager
// process has its own cache: there a revoked credential still works for at
// most the TTL.
//
// A nil *CredentialCache caches nothing.
type CredentialCache struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.RWMutex
	m  map[credKey]credEntry
	// gen counts forgets. A lookup stores its answer only if no forget
	// came between its start and its end: a revoke that commits while a
	// lookup is in flight must not be undone by that lookup's answer.
	gen uint64

	// Edge, if set, forgets Caddy's kept decisions of a user ("": all)
	// and returns once none can be used (manager/edge).
	Edge interface{ Forget(user string) }
}

type credKind uint8

const (
	sessionCred credKind = iota + 1
	apiTokenCred
)

// credKey names a credential without holding it; a session token and an
// API token with the same text are different credentials.
type credKey struct {
	kind credKind
	sum  [sha256.Size]byte
}

func keyOf(kind credKind, token string) credKey {
	return credKey{kind, sha256.Sum256([]byte(token))}
}

type credEntry struct {
	user  string
	until time.Time
	// expires is the credential's own end (a session's), zero for none.
	expires time.Time
}

// NewCredentialCache returns a cache whose entries live ttl; with ttl <= 0
// it returns nil, which caches nothing.
func NewCredentialCache(ttl time.Duration) *CredentialCache {
	if ttl <= 0 {
		return nil
	}
	return &CredentialCache{ttl: ttl, max: DefaultCredentialCacheSize, now: time.Now, m: map[credKey]credEntry{}}
}

// lookup answers k's user from the cache or, if it has none or fresh is
// set, calls load (the registry) and keeps a success until the TTL or the
// credential's own expiry (load's expires; zero: none), whichever comes
// first. A credential load refuses is dropped.
func (c *CredentialCache) lookup(k credKey, fresh bool, load func() (user string, expires time.Time, err error)) (string, error) {
	if c == nil {
		user, _, err := load()
		return user, err
	}
	now := c.now()
	c.mu.RLock()
	e, cached := c.m[k]
	gen := c.gen
	c.mu.RUnlock()
	if cached && !fresh && now.Before(e.until) {
		return e.user, nil
	}
	user, expires, err := load()
	if err != nil {
		if cached && errors.Is(err, registry.ErrUnauthenticated) {
			c.drop(k, e.until)
		}
		return "", err
	}
	until := now.Add(c.ttl)
	if !expires.IsZero() && expires.Before(until) {
		until = expires
	}
	if now.Before(until) {
		c.store(k, credEntry{user, until, expires}, gen, now)
	}
	return user, nil
}

func (c *CredentialCache) store(k credKey, e credEntry, gen uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		c.evict(now)
	}
	c.m[k] = e
}

// evict drops the expired entries or, if none is, the one that expires
// first. Caller holds mu.
func (c *CredentialCache) evict(now time.Time) {
	var first credKey
	var firstUntil time.Time
	freed := false
	for k, e := range c.m {
		switch {
		case !now.Before(e.until):
			delete(c.m, k)
			freed = true
		case firstUntil.IsZero() || e.until.Before(firstUntil):
			first, firstUntil = k, e.until
		}
	}
	if !freed && !firstUntil.IsZero() {
		delete(c.m, first)
	}
}

// drop removes k's entry, unless another replaced it meanwhile.
func (c *CredentialCache) drop(k credKey, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok && e.until.Equal(until) {
		delete(c.m, k)
	}
}

// ForgetSession drops the session token's entry (sign-out, or a session
// the operator rewrote). The caller makes the edge forget too (ForgetEdge),
// knowing whose the session was.
func (c *CredentialCache) ForgetSession(token string) {
	if c == nil {
		return
	}
	k := keyOf(sessionCred, token)
	c.mu.Lock()
	c.gen++
	delete(c.m, k)
	c.mu.Unlock()
}

// ForgetEdge makes the edge forget user's kept decisions (user "": every
// user's) and returns once none can be used; nothing without an edge.
func (c *CredentialCache) ForgetEdge(user string) {
	if c != nil && c.Edge != nil {
		c.Edge.Forget(user)
	}
}

// ForgetUser drops every entry of user, sessions and API tokens: a session
// or token revoked by its id (the cache does not know ids), or a new
// password, which ends the user's sessions. The user's other credentials
// are looked up again on their next use.
func (c *CredentialCache) ForgetUser(user string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.gen++
	for k, e := range c.m {
		if e.user == user {
			delete(c.m, k)
		}
	}
	c.mu.Unlock()
	c.ForgetEdge(user)
}

// keepFor is how long the edge may keep a decision the credential k made
// now, at most max: until the credential's own expiry. Zero when k is not
// in the cache (a lookup a forget overtook) or the cache is off.
func (c *CredentialCache) keepFor(k credKey, max time.Duration) time.Duration {
	if c == nil {
		return 0
	}
	now := c.now()
	c.mu.RLock()
	e, ok := c.m[k]
	c.mu.RUnlock()
	if !ok || !now.Before(e.until) {
		return 0
	}
	if !e.expires.IsZero() {
		max = min(max, e.expires.Sub(now))
	}
	return max
}

// size is the number of entries, expired or not.
func (c *CredentialCache) size() int {
	if c == nil {
		return 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
