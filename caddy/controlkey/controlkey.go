// Package controlkey is a Caddy request matcher that holds the sandbox
// control listener shut to everyone but the manager: a request matches only
// when it carries the control key in the X-Affido-Control-Key header,
// compared in constant time.
//
// Reaching the control network is not enough to use it: any local user of a
// shared host, or any pod where the network plugin does not enforce
// NetworkPolicies, can send a request there. The key is generated at the
// stack's first start and given only to the manager and to Caddy, never to a
// sandbox; Caddy removes the header before it proxies to an agent.
//
//	@manager affido_control_key {$AFFIDO_CONTROL_KEY}
//
// A configured key shorter than MinKeyLen (an unset variable) stops Caddy
// from starting: the listener fails closed.
package controlkey

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/affido/affido/internal/sandboxapi"
)

// Header carries the control key from the manager to Caddy.
const Header = sandboxapi.HeaderControlKey

// MinKeyLen is the shortest key accepted (32 hex characters: 128 bits).
const MinKeyLen = sandboxapi.MinControlKeyLen

func init() {
	caddy.RegisterModule(Matcher{})
}

// Matcher matches requests that carry the control key.
type Matcher struct {
	// Key is the control key, usually {$AFFIDO_CONTROL_KEY}.
	Key string `json:"key,omitempty"`

	sum [sha256.Size]byte
}

// CaddyModule returns the Caddy module information.
func (Matcher) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.matchers.affido_control_key",
		New: func() caddy.Module { return new(Matcher) },
	}
}

// Provision refuses a missing or short key.
func (m *Matcher) Provision(caddy.Context) error {
	key := caddy.NewReplacer().ReplaceAll(m.Key, "")
	if len(key) < MinKeyLen {
		return fmt.Errorf("affido_control_key: the control key must be at least %d characters (got %d): is AFFIDO_CONTROL_KEY set?", MinKeyLen, len(key))
	}
	m.sum = sha256.Sum256([]byte(key))
	return nil
}

// Match reports whether r carries the key. Both sides are hashed first, so
// the comparison takes the same time whatever the presented length.
func (m *Matcher) Match(r *http.Request) bool {
	got := r.Header.Values(Header)
	if len(got) != 1 {
		return false
	}
	sum := sha256.Sum256([]byte(got[0]))
	return subtle.ConstantTimeCompare(sum[:], m.sum[:]) == 1
}

// UnmarshalCaddyfile reads `affido_control_key <key>`.
func (m *Matcher) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the matcher's name
	if !d.NextArg() {
		return d.ArgErr()
	}
	m.Key = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

var (
	_ caddy.Provisioner        = (*Matcher)(nil)
	_ caddyhttp.RequestMatcher = (*Matcher)(nil)
	_ caddyfile.Unmarshaler    = (*Matcher)(nil)
)
