// Package outbound is the one HTTP client for every URL a user or a model
// chose (notification endpoints, fetch_url and its redirects). The address a
// connection goes to is checked when it is dialled, so a name that resolves
// inward, a redirect and a DNS answer that changes between check and use are
// all caught at the only moment that counts: loopback, private, link-local,
// CGNAT, multicast, unspecified and the other special-purpose ranges (IANA's
// registries, through code.dny.dev/ssrf), the control network and the
// sandbox pool are refused, for IPv4 and IPv6 alike, with IPv4-mapped IPv6
// addresses unmapped first. An operator can allow ranges explicitly; nothing
// is allowed by default.
package outbound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

// MaxRedirects is how many redirects one request may follow.
const MaxRedirects = 5

// ErrRefused is wrapped by every error for an address the guard refuses.
var ErrRefused = errors.New("outbound address refused")

// ErrTooManyRedirects is returned when a request is redirected more than
// MaxRedirects times.
var ErrTooManyRedirects = errors.New("too many redirects")

// Config says which addresses the client may reach beyond the public ones.
type Config struct {
	// Allow lists ranges the operator explicitly allows (for example a
	// notification service on the local network); they win over every
	// refusal. Empty by default.
	Allow []netip.Prefix
	// Deny lists ranges refused on top of the special-purpose ones: the
	// control network and the sandbox pool, whatever addresses they use.
	Deny []netip.Prefix
	// Timeout bounds one whole request, redirects included (default 10 s).
	Timeout time.Duration
}

// Guard checks dialled addresses.
type Guard struct {
	allow []netip.Prefix
	g     *ssrf.Guardian
}

// NewGuard returns the address check of cfg.
func NewGuard(cfg Config) *Guard {
	var deny4, deny6 []netip.Prefix
	for _, p := range cfg.Deny {
		if p.Addr().Is4() {
			deny4 = append(deny4, p.Masked())
		} else {
			deny6 = append(deny6, p.Masked())
		}
	}
	return &Guard{
		allow: cfg.Allow,
		g:     ssrf.New(ssrf.WithAnyPort(), ssrf.WithDeniedV4Prefixes(deny4...), ssrf.WithDeniedV6Prefixes(deny6...)),
	}
}

// Check says whether addr may be dialled: nil, or an error wrapping ErrRefused.
func (g *Guard) Check(addr netip.Addr) error {
	addr = addr.Unmap()
	for _, p := range g.allow {
		if p.Contains(addr) {
			return nil
		}
	}
	if err := g.g.SafeAddr(addr); err != nil {
		return fmt.Errorf("%w: %s (allow a range with AFFIDO_OUTBOUND_ALLOW)", ErrRefused, addr)
	}
	return nil
}

// control is the net.Dialer hook: it runs after name resolution, on the
// address the socket is about to connect to.
func (g *Guard) control(network, address string, _ syscall.RawConn) error {
	if network != "tcp4" && network != "tcp6" {
		return fmt.Errorf("%w: network %s", ErrRefused, network)
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrRefused, address, err)
	}
	return g.Check(ap.Addr())
}

// NewClient returns the guarded client: every connection checked at dial
// time, no proxy from the environment, at most MaxRedirects redirects, each
// to http or https only.
func NewClient(cfg Config) *http.Client {
	g := NewGuard(cfg)
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	return &http.Client{
		Transport: g.Transport(timeout),
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > MaxRedirects {
				return fmt.Errorf("%w: more than %d", ErrTooManyRedirects, MaxRedirects)
			}
			if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
				return fmt.Errorf("%w: redirect to scheme %q", ErrRefused, req.URL.Scheme)
			}
			return nil
		},
	}
}

// DialContext dials address with every connection's address checked
// when it is dialled (TCP only).
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second, Control: g.control}
	return d.DialContext(ctx, network, address)
}

// Transport is the guarded client's transport: it dials with DialContext,
// uses no proxy from the environment and follows no redirect (a client
// does). headerTimeout bounds the wait for a response's headers.
func (g *Guard) Transport(headerTimeout time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           g.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          20,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: headerTimeout,
	}
}

// ErrBadURL is wrapped for a URL that is not an absolute http or https URL.
var ErrBadURL = errors.New("not an http or https URL")

// CheckURL says, before anything is sent, whether raw may be used as a
// destination: an absolute http or https URL whose host resolves only to
// addresses the guard allows. The guarded client checks again when it
// dials; this is for refusing a bad URL when it is saved.
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("%w: %q", ErrBadURL, raw)
	}
	host := u.Hostname()
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return fmt.Errorf("resolve %s: %w", host, err)
		}
		addrs = ips
	}
	for _, a := range addrs {
		if err := g.Check(a); err != nil {
			return err
		}
	}
	return nil
}
