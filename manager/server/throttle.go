package server

import (
	"net"
	"net/http"
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

// failed records one failed authentication from addr.
func (t *authThrottle) failed(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.m[addr]
	if l == nil {
		if len(t.m) >= 10000 {
			t.prune()
		}
		l = rate.NewLimiter(rate.Every(t.every), t.burst)
		t.m[addr] = l
	}
	l.Allow()
}

// prune forgets addresses that have all their failures back. Caller holds mu.
func (t *authThrottle) prune() {
	for a, l := range t.m {
		if l.Tokens() >= float64(t.burst) {
			delete(t.m, a)
		}
	}
}

// sourceAddr is the client's address: Caddy puts it in X-Forwarded-For
// (replacing whatever an untrusted client sent); without Caddy, the peer.
func sourceAddr(r *http.Request) string {
	if xff := r.Header.Get("X-Forwarded-For"); xff != "" {
		first, _, _ := strings.Cut(xff, ",")
		return strings.TrimSpace(first)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
