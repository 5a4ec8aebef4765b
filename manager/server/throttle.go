package server

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// authThrottle limits failed authentications per source address: each
// failure spends a token; while none is left the address gets 429 before any
// credential is looked up, so guessing tokens costs the registry nothing.
type authThrottle struct {
	mu    sync.Mutex
	every time.Duration // one failure forgiven per interval
	burst int           // failures allowed at once
	m     map[string]*rate.Limiter
}

func newAuthThrottle(every time.Duration, burst int) *authThrottle {
	return &authThrottle{every: every, burst: burst, m: map[string]*rate.Limiter{}}
}

// blocked reports whether addr has no failures left, and how long until it has.
func (t *authThrottle) blocked(addr string) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.m[addr]
	if l == nil || l.Tokens() >= 1 {
		return 0, false
	}
	r := l.Reserve()
	wait := r.Delay()
	r.Cancel()
	if wait < time.Second {
		wait = time.Second
	}
	return wait, true
}

// reserve spends one of key's tokens now, before the attempt is judged, so
// attempts in flight at once cannot all pass; cancel the reservation to
// give the token back (a success). ok is false, with the wait, when none
// is left (and nothing is spent).
func (t *authThrottle) reserve(key string) (r *rate.Reservation, wait time.Duration, ok bool) {
	t.mu.Lock()
	l := t.limiter(key)
	t.mu.Unlock()
	r = l.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return nil, max(d, time.Second), false
	}
	return r, 0, true
}

// failed records one failed authentication from addr.
func (t *authThrottle) failed(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.limiter(addr).Allow()
}

// limiter returns key's limiter, making one (within maxTracked) if there
// is none. Caller holds mu.
func (t *authThrottle) limiter(key string) *rate.Limiter {
	l := t.m[key]
	if l == nil {
		if len(t.m) >= maxTracked {
			t.prune()
		}
		if len(t.m) >= maxTracked { // all still throttled: start over rather than grow
			t.m = map[string]*rate.Limiter{}
		}
		l = rate.NewLimiter(rate.Every(t.every), t.burst)
		t.m[key] = l
	}
	return l
}

// prune forgets addresses that have all their failures back. Caller holds mu.
func (t *authThrottle) prune() {
	for a, l := range t.m {
		if l.Tokens() >= float64(t.burst) {
			delete(t.m, a)
		}
	}
}

// maxTracked bounds the addresses the throttle remembers.
const maxTracked = 10000

// sourceAddr is the client's address as the throttle counts it: Caddy puts
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
