package server

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Failed authentications with a credential this manager has not seen
// succeed (see knownCredentials) are counted three ways, each a token
// bucket: per credential (5, then one every 10 s), so a stale cookie a
// browser keeps sending is refused on its own; per address and the user
// whose sandbox is asked for (20, then one every 3 s; the account routes
// and pages count as user ""); and per address whatever the user (100,
// then one a second), against spraying across users. While one has no
// failure left, such a request gets 429 before any lookup, unless the same
// credential is being looked up right now (a new token's first requests,
// arriving together): then that answer decides. A success gives its counts
// back. A known credential skips all three.
const (
	credFailureBurst = 5
	credFailureEvery = 10 * time.Second
	userFailureBurst = 20
	userFailureEvery = 3 * time.Second
	addrFailureBurst = 100
	addrFailureEvery = time.Second
)

// authThrottle is a token bucket per key (an address, an address and a
// user, a credential): each failed attempt spends a token; a token comes
// back every `every`, up to burst.
type authThrottle struct {
	mu    sync.Mutex
	every time.Duration
	burst int
	now   func() time.Time
	m     map[string]*bucket
}

// bucket is one key's tokens as of last.
type bucket struct {
	tokens float64
	last   time.Time
}

func newAuthThrottle(every time.Duration, burst int) *authThrottle {
	return &authThrottle{every: every, burst: burst, now: time.Now, m: map[string]*bucket{}}
}

// reserve spends one of key's tokens now, before the attempt is judged, so
// attempts in flight at once cannot all pass; cancel the reservation to
// give the token back (a success). ok is false, with the wait, when none
// is left (and nothing is spent).
func (t *authThrottle) reserve(key string) (r reservation, wait time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucket(key)
	if b.tokens < 1 {
		wait = time.Duration((1 - b.tokens) * float64(t.every))
		return reservation{}, max(wait, time.Second), false
	}
	b.tokens--
	return reservation{t, key}, 0, true
}

// failed spends one of key's tokens, if one is left.
func (t *authThrottle) failed(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.bucket(key); b.tokens >= 1 {
		b.tokens--
	}
}

// bucket returns key's bucket, filled up to now, making one (within
// maxTracked) if there is none. Caller holds mu.
func (t *authThrottle) bucket(key string) *bucket {
	now := t.now()
	b := t.m[key]
	if b == nil {
		if len(t.m) >= maxTracked {
			t.prune(now)
		}
		if len(t.m) >= maxTracked { // all still throttled: start over rather than grow
			t.m = map[string]*bucket{}
		}
		b = &bucket{tokens: float64(t.burst), last: now}
		t.m[key] = b
	}
	t.fill(b, now)
	return b
}

func (t *authThrottle) fill(b *bucket, now time.Time) {
	if now.After(b.last) {
		b.tokens = min(float64(t.burst), b.tokens+float64(now.Sub(b.last))/float64(t.every))
		b.last = now
	}
}

// prune forgets keys that have all their tokens back. Caller holds mu.
func (t *authThrottle) prune(now time.Time) {
	for k, b := range t.m {
		if t.fill(b, now); b.tokens >= float64(t.burst) {
			delete(t.m, k)
		}
	}
}

// reservation is a token reserve spent; the zero value holds none.
type reservation struct {
	t   *authThrottle
	key string
}

// cancel gives the token back (to a key forgotten meanwhile, nothing).
func (r reservation) cancel() {
	if r.t == nil {
		return
	}
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	if b := r.t.m[r.key]; b != nil {
		r.t.fill(b, r.t.now())
		b.tokens = min(float64(r.t.burst), b.tokens+1)
	}
}

// maxTracked bounds the keys a throttle remembers.
const maxTracked = 10000

// limit is one throttle and the key an attempt counts against in it.
type limit struct {
	thr *authThrottle
	key string
}

// reserveAll reserves a token of each limit, all or none; wait is the
// refusing limit's.
func reserveAll(limits ...limit) (res []reservation, wait time.Duration, ok bool) {
	for _, l := range limits {
		r, w, ok := l.thr.reserve(l.key)
		if !ok {
			cancelAll(res)
			return nil, w, false
		}
		res = append(res, r)
	}
	return res, 0, true
}

func cancelAll(res []reservation) {
	for _, r := range res {
		r.cancel()
	}
}

// Credentials are remembered as known for a week after their last
// success, at most 50 000 of them.
const (
	knownFor = 7 * 24 * time.Hour
	maxKnown = 50000
)

// knownCredentials remembers which credentials authenticated here lately,
// by their sha256 (credKey), so that the failed-auth throttles, which
// exist to make guessing slow, never refuse a credential that is not a
// guess. Being known grants nothing: a known credential is still looked up
// (the cache or Postgres) and refused if it was revoked or expired, which
// also forgets it. So someone failing behind the same address as its owner
// cannot lock the owner out, and a guesser gains nothing from it.
type knownCredentials struct {
	mu  sync.Mutex
	now func() time.Time
	m   map[credKey]time.Time // the last success
}

func newKnownCredentials() *knownCredentials {
	return &knownCredentials{now: time.Now, m: map[credKey]time.Time{}}
}

func (k *knownCredentials) has(key credKey) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	at, ok := k.m[key]
	return ok && k.now().Sub(at) < knownFor
}

// add records a success of key. When full, it forgets what is past
// knownFor or, if nothing is, the credential that succeeded longest ago.
func (k *knownCredentials) add(key credKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.now()
	if _, ok := k.m[key]; !ok && len(k.m) >= maxKnown {
		var oldest credKey
		var oldestAt time.Time
		for c, at := range k.m {
			if now.Sub(at) >= knownFor {
				delete(k.m, c)
			} else if oldestAt.IsZero() || at.Before(oldestAt) {
				oldest, oldestAt = c, at
			}
		}
		if len(k.m) >= maxKnown {
			delete(k.m, oldest)
		}
	}
	k.m[key] = now
}

func (k *knownCredentials) forget(key credKey) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.m, key)
}

// lookups are the credential lookups in flight, so that a request whose
// credential is being looked up already can wait for that answer.
type lookups struct {
	mu sync.Mutex
	m  map[credKey]*flight
}

type flight struct {
	n    int
	done chan struct{} // closed when the last lookup of the key ends
}

// start records a lookup of k; the returned func ends it.
func (l *lookups) start(k credKey) func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[credKey]*flight{}
	}
	f := l.m[k]
	if f == nil {
		f = &flight{done: make(chan struct{})}
		l.m[k] = f
	}
	f.n++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if f.n--; f.n == 0 {
			close(f.done)
			delete(l.m, k)
		}
	}
}

// wait waits, at most d, for the lookups of k in flight to end; false if
// there were none, or they did not end in time.
func (l *lookups) wait(ctx context.Context, k credKey, d time.Duration) bool {
	l.mu.Lock()
	f := l.m[k]
	l.mu.Unlock()
	if f == nil {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// authGuard is the Server's lazily made failed-auth state for credentials.
type authGuard struct {
	once          sync.Once
	flights       lookups
	known         *knownCredentials
	perCredential *authThrottle
	perUser       *authThrottle // per address and user
	perAddress    *authThrottle
}

func (s *Server) guard() *authGuard {
	g := &s.authGuard
	g.once.Do(func() {
		g.known = newKnownCredentials()
		g.perCredential = newAuthThrottle(credFailureEvery, credFailureBurst)
		g.perUser = newAuthThrottle(userFailureEvery, userFailureBurst)
		g.perAddress = newAuthThrottle(addrFailureEvery, addrFailureBurst)
	})
	return g
}

// limits are the throttles a failure of credential k, presented from
// address src for user's resources, counts against: broadest first, so a
// refused attempt makes no entry in the narrower ones.
func (g *authGuard) limits(src, user string, k credKey) []limit {
	return []limit{
		{g.perAddress, src},
		{g.perUser, src + " " + user},
		{g.perCredential, string(k.kind) + string(k.sum[:])},
	}
}

// sourceAddr is the client's address as the throttles count it: Caddy puts
// it in X-Forwarded-For (replacing whatever an untrusted client sent);
// without Caddy, the peer. An IPv6 address counts as its /64, which one
// client usually holds whole.
func sourceAddr(r *http.Request) string {
	s := r.Header.Get("X-Forwarded-For")
	if s != "" {
		s, _, _ = strings.Cut(s, ",")
		s = strings.TrimSpace(s)
	} else if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		s = host
	} else {
		s = r.RemoteAddr
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Is6() && !a.Is4In6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return s
}
