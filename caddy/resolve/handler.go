// Package resolve is the Caddy handler that asks the manager where a user's
// sandbox is (its /v1/resolve: the credentials, the owner, the sandbox
// brought up) and keeps the answer for a short time, so a warm request
// costs no round trip to the manager (issue 30's warm path). It replaces a
// forward_auth written out as a reverse_proxy, and behaves as it did on
// everything but a kept 200:
//
//   - the manager is asked with the client's headers and the method and URI
//     in X-Forwarded-Method and X-Forwarded-Uri; X-Forwarded-For is the
//     client's address (a client's own is dropped);
//   - while the manager restarts (a refused dial, a broken connection, or a
//     503 it marks X-Affido-Retry) it is asked again for TryDuration;
//   - any answer but a 2xx goes to the client as the manager gave it; a 2xx
//     puts X-Sandbox-Endpoint in the var the sandbox upstream reads.
//
// What is kept (cache.go): a 200 the manager marks with edgeapi.TTLHeader,
// for a GET or HEAD, under the sha256 of the user, the Cookie and
// Authorization headers as sent and whether the path activates, and only
// while the manager's lease is fresh (poll.go): the manager makes every
// Caddy forget a user's decisions before it answers a revoke or takes the
// sandbox down. Requests answered from the cache are reported to the
// manager as activity.
//
//	affido_resolve {
//		manager     {$AFFIDO_MANAGER}
//		control_key {$AFFIDO_CONTROL_KEY}
//		user        {re.sb.1}
//		path        {re.sb.2}
//	}
package resolve

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/affido/affido/internal/edgeapi"
	"github.com/affido/affido/internal/sandboxapi"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("affido_resolve", parseCaddyfile)
}

// Handler asks the manager and keeps its 200s. See the package comment.
type Handler struct {
	// Manager is the manager's host:port.
	Manager string `json:"manager,omitempty"`
	// ControlKey authenticates the polls (the manager's control key).
	ControlKey string `json:"control_key,omitempty"`
	// User and Path are placeholders for the user id and the path within
	// the sandbox, from the route's matcher.
	User string `json:"user,omitempty"`
	Path string `json:"path,omitempty"`
	// Var is where the endpoint goes (the sandbox upstream reads it).
	Var string `json:"var,omitempty"`
	// TryDuration is how long the manager is asked again while it
	// restarts (default 30 s), every TryInterval (default 100 ms).
	TryDuration caddy.Duration `json:"try_duration,omitempty"`
	TryInterval caddy.Duration `json:"try_interval,omitempty"`

	manager, key string
	id           string // this process's name in its polls
	cache        *Cache
	client       *http.Client
	log          *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.affido_resolve",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision checks the configuration and starts polling the manager.
func (h *Handler) Provision(ctx caddy.Context) error {
	repl := caddy.NewReplacer()
	h.manager = repl.ReplaceAll(h.Manager, "")
	h.key = repl.ReplaceAll(h.ControlKey, "")
	if h.manager == "" {
		return fmt.Errorf("affido_resolve: manager (host:port) is required")
	}
	if len(h.key) < sandboxapi.MinControlKeyLen {
		return fmt.Errorf("affido_resolve: the control key must be at least %d characters (got %d): is AFFIDO_CONTROL_KEY set?", sandboxapi.MinControlKeyLen, len(h.key))
	}
	if h.User == "" {
		return fmt.Errorf("affido_resolve: user (a placeholder for the user id) is required")
	}
	if h.Var == "" {
		h.Var = "sandbox_dial"
	}
	if h.TryDuration <= 0 {
		h.TryDuration = caddy.Duration(30 * time.Second)
	}
	if h.TryInterval <= 0 {
		h.TryInterval = caddy.Duration(100 * time.Millisecond)
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	h.id = hex.EncodeToString(b)
	h.cache = NewCache()
	h.log = ctx.Logger()
	h.client = &http.Client{
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: 40 * time.Second,
		},
		// The manager's answer is the answer: a redirect is not followed.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	go h.poll(ctx)
	return nil
}

// ServeHTTP answers from the cache or asks the manager; see the package
// comment.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	user := repl.ReplaceAll(h.User, "")
	path := repl.ReplaceAll(h.Path, "")
	keep := (r.Method == http.MethodGet || r.Method == http.MethodHead) && plainConnection(r)
	var k Key
	if keep {
		k = KeyOf(user, strings.Join(r.Header.Values("Cookie"), "\x00"), strings.Join(r.Header.Values("Authorization"), "\x00"), sandboxapi.Activating(path))
		if d, ok := h.cache.Get(k); ok {
			caddyhttp.SetVar(r.Context(), h.Var, d.Endpoint)
			return next.ServeHTTP(w, r)
		}
	}
	gen := h.cache.Begin()
	resp, err := h.ask(r, user, path)
	if err != nil {
		return caddyhttp.Error(http.StatusBadGateway, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	ep := resp.Header.Get(edgeapi.EndpointHeader)
	caddyhttp.SetVar(r.Context(), h.Var, ep)
	if ms, err := strconv.ParseInt(resp.Header.Get(edgeapi.TTLHeader), 10, 64); keep && err == nil && ms > 0 {
		h.cache.Put(k, Decision{
			User: user, Endpoint: ep, Activating: sandboxapi.Activating(path),
			Token: tokenSum(r), Until: time.Now().Add(time.Duration(ms) * time.Millisecond),
		}, gen)
	}
	return next.ServeHTTP(w, r)
}

// ask calls the manager's /v1/resolve for r, again while the manager
// restarts (see the package comment). The last answer stands when the time
// runs out; an error only when none came.
func (h *Handler) ask(r *http.Request, user, path string) (*http.Response, error) {
	target := "http://" + h.manager + "/v1/resolve?user=" + url.QueryEscape(user) + "&path=" + url.QueryEscape(path)
	deadline := time.Now().Add(time.Duration(h.TryDuration))
	for {
		req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, target, nil)
		if err != nil {
			return nil, err
		}
		req.Header = forwarded(r)
		req.Host = r.Host
		resp, err := h.client.Do(req)
		again := err != nil || (resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(edgeapi.RetryHeader) == "1")
		if !again || r.Context().Err() != nil || time.Now().Add(time.Duration(h.TryInterval)).After(deadline) {
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
		}
		t := time.NewTimer(time.Duration(h.TryInterval))
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return nil, r.Context().Err()
		}
	}
}

// hopHeaders are a single connection's, never passed on (RFC 9110 7.6.1),
// with the body's framing (the manager is asked with no body) and what
// the edge sets itself.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length",
	"Forwarded", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host",
	"X-Forwarded-Method", "X-Forwarded-Uri", sandboxapi.HeaderControlKey,
}

// forwarded is what the manager sees of r: its headers but a connection's,
// and where it came from.
func forwarded(r *http.Request) http.Header {
	h := r.Header.Clone()
	for _, c := range h.Values("Connection") {
		for _, f := range strings.Split(c, ",") {
			h.Del(strings.TrimSpace(f))
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		h.Set("X-Forwarded-For", ip)
	}
	proto := "http"
	if r.TLS != nil {
		proto = "https"
	}
	h.Set("X-Forwarded-Proto", proto)
	h.Set("X-Forwarded-Host", r.Host)
	h.Set("X-Forwarded-Method", r.Method)
	h.Set("X-Forwarded-Uri", r.URL.RequestURI())
	return h
}

// plainConnection reports whether r's Connection header names no header:
// one that does (Connection: Authorization) has that header dropped before
// the manager sees it, so the key (the headers as sent) would not be what
// the manager decided on. Such a request is asked for every time.
func plainConnection(r *http.Request) bool {
	for _, c := range r.Header.Values("Connection") {
		for _, f := range strings.Split(c, ",") {
			switch strings.ToLower(strings.TrimSpace(f)) {
			case "", "keep-alive", "close":
			default:
				return false
			}
		}
	}
	return true
}

// copyHeader copies the manager's answer's headers but a connection's.
func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		switch http.CanonicalHeaderKey(k) {
		case "Connection", "Keep-Alive", "Transfer-Encoding", "Trailer", "Upgrade", "Content-Length",
			edgeapi.EndpointHeader, edgeapi.TTLHeader:
			continue
		}
		dst[k] = append(dst[k][:0:0], vs...)
	}
}

// tokenSum is the hex sha256 of r's bearer token (as the manager reads it),
// "" for none: the manager records the token's use from it.
func tokenSum(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) <= 7 || !strings.EqualFold(a[:7], "bearer ") {
		return ""
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(a[7:])))
	return hex.EncodeToString(sum[:])
}

// parseCaddyfile reads the affido_resolve block (see the package comment).
func parseCaddyfile(hh httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	h := new(Handler)
	return h, h.UnmarshalCaddyfile(hh.Dispenser)
}

// UnmarshalCaddyfile reads the block's subdirectives.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		name := d.Val()
		if !d.NextArg() {
			return d.ArgErr()
		}
		val := d.Val()
		if d.NextArg() {
			return d.ArgErr()
		}
		switch name {
		case "manager":
			h.Manager = val
		case "control_key":
			h.ControlKey = val
		case "user":
			h.User = val
		case "path":
			h.Path = val
		case "var":
			h.Var = val
		case "try_duration", "try_interval":
			dur, err := caddy.ParseDuration(val)
			if err != nil {
				return d.Errf("%s: %v", name, err)
			}
			if name == "try_duration" {
				h.TryDuration = caddy.Duration(dur)
			} else {
				h.TryInterval = caddy.Duration(dur)
			}
		default:
			return d.Errf("affido_resolve: unknown subdirective %q", name)
		}
	}
	return nil
}

var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
