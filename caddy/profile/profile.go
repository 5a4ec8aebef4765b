// Package profile is a Caddy HTTP handler that serves this Caddy's Go
// profiles over a window (internal/profiling) for `affido bench --profile`.
//
// It belongs on the sandbox control listener, after the control key check,
// with the route's prefix stripped:
//
//	@profile path /_profile/*
//	handle @profile {
//	    uri strip_prefix /_profile
//	    route {
//	        affido_profile
//	    }
//	}
//
// Caddy's own admin API serves /debug/pprof too, but only inside Caddy's
// container (127.0.0.1:2019), and without the block and mutex sampling
// this handler switches on for its window.
package profile

import (
	"net/http"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/affido/affido/internal/profiling"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("affido_profile", func(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
		var p Handler
		return &p, p.UnmarshalCaddyfile(h.Dispenser)
	})
}

// Handler answers GET /<kind>?seconds=N with one of profiling.Kinds; it
// never calls the next handler.
type Handler struct {
	h http.Handler
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.affido_profile",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision builds the profile routes.
func (p *Handler) Provision(caddy.Context) error {
	p.h = profiling.Handler()
	return nil
}

// ServeHTTP serves the profile.
func (p *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	p.h.ServeHTTP(w, r)
	return nil
}

// UnmarshalCaddyfile reads `affido_profile`, which takes no arguments.
func (p *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive's name
	if d.NextArg() || d.NextBlock(0) {
		return d.ArgErr()
	}
	return nil
}

var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
