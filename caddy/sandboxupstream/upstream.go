// Package sandboxupstream is a Caddy dynamic upstream module that sends a
// request to the sandbox endpoint the manager approved for it, and nowhere else.
//
// The forward_auth step stores the manager's X-Sandbox-Endpoint answer in a
// Caddy var; this module reads that var, which clients cannot write, and
// accepts it only as a literal IP:port inside the configured sandbox CIDRs.
// Hostnames, unix sockets and addresses outside the pool yield no upstream,
// so Caddy answers 503 instead of dialing them.
package sandboxupstream

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
)

func init() {
	caddy.RegisterModule(Upstream{})
}

// DefaultVar is the Caddy var the endpoint is read from when none is configured.
const DefaultVar = "sandbox_dial"

// Upstream returns the one sandbox endpoint stored in a request var, after
// checking that it is an IP:port inside an allowed prefix.
type Upstream struct {
	// Var names the Caddy var holding the endpoint.
	Var string `json:"var,omitempty"`
	// Allow lists the CIDR prefixes a sandbox endpoint may be in.
	Allow []string `json:"allow,omitempty"`

	prefixes []netip.Prefix
}

// CaddyModule returns the Caddy module information.
func (Upstream) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.reverse_proxy.upstreams.affido_sandbox",
		New: func() caddy.Module { return new(Upstream) },
	}
}

// Provision parses the allowed prefixes.
func (u *Upstream) Provision(caddy.Context) error {
	if u.Var == "" {
		u.Var = DefaultVar
	}
	u.prefixes = u.prefixes[:0]
	for _, s := range u.Allow {
		p, err := netip.ParsePrefix(caddy.NewReplacer().ReplaceAll(s, ""))
		if err != nil {
			return fmt.Errorf("parse allowed sandbox prefix %q: %w", s, err)
		}
		u.prefixes = append(u.prefixes, p.Masked())
	}
	return nil
}

// Validate refuses a configuration that would allow nothing.
func (u *Upstream) Validate() error {
	if len(u.prefixes) == 0 {
		return fmt.Errorf("affido_sandbox: at least one allowed prefix is required")
	}
	return nil
}

// GetUpstreams returns the validated endpoint, or an error when the var is
// missing or names anything but an allowed IP:port.
func (u *Upstream) GetUpstreams(r *http.Request) ([]*reverseproxy.Upstream, error) {
	raw, _ := caddyhttp.GetVar(r.Context(), u.Var).(string)
	ap, err := u.Check(raw)
	if err != nil {
		return nil, err
	}
	return []*reverseproxy.Upstream{{Dial: ap.String()}}, nil
}

// Check parses raw as a literal IP:port and reports whether it lies in an
// allowed prefix.
func (u *Upstream) Check(raw string) (netip.AddrPort, error) {
	if raw == "" {
		return netip.AddrPort{}, fmt.Errorf("affido_sandbox: no endpoint in var %s", u.Var)
	}
	ap, err := netip.ParseAddrPort(raw)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("affido_sandbox: endpoint %q is not an IP:port: %w", raw, err)
	}
	if ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("affido_sandbox: endpoint %q has port 0", raw)
	}
	addr := ap.Addr().Unmap()
	for _, p := range u.prefixes {
		if p.Contains(addr) {
			return netip.AddrPortFrom(addr, ap.Port()), nil
		}
	}
	return netip.AddrPort{}, fmt.Errorf("affido_sandbox: endpoint %q is outside the sandbox pool", raw)
}

// UnmarshalCaddyfile sets up the module from Caddyfile tokens:
//
//	dynamic affido_sandbox {
//	    var   <name>
//	    allow <cidr...>
//	}
func (u *Upstream) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "var":
			if !d.NextArg() {
				return d.ArgErr()
			}
			u.Var = d.Val()
		case "allow":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			u.Allow = append(u.Allow, args...)
		default:
			return d.Errf("unrecognized affido_sandbox option %q", d.Val())
		}
	}
	return nil
}

var (
	_ caddy.Provisioner           = (*Upstream)(nil)
	_ caddy.Validator             = (*Upstream)(nil)
	_ reverseproxy.UpstreamSource = (*Upstream)(nil)
	_ caddyfile.Unmarshaler       = (*Upstream)(nil)
)
