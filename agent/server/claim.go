package server

import (
	"errors"
	"net/http"

	"github.com/affido/affido/agent/identity"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
)

// claim binds the sandbox to a user (the manager's call, through Caddy's
// control listener, which alone sets the control header). A sandbox that
// belongs to one user is never bound to another.
func (s *Server) claim(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(sandboxapi.HeaderControl) != "1" {
		problem.Write(w, http.StatusForbidden, sandboxapi.ProblemNotControl, "a sandbox is claimed only by the manager, through the control path")
		return
	}
	var c sandboxapi.Claim
	if !decodeBody(w, r, &c) {
		return
	}
	err := s.cfg.Identity.Claim(c.User, c.Token)
	switch {
	case errors.Is(err, identity.ErrClaimedByOther):
		problem.Write(w, http.StatusConflict, sandboxapi.ProblemClaimedByOther, "the sandbox belongs to another user")
	case errors.Is(err, identity.ErrInvalid):
		problem.Write(w, http.StatusBadRequest, sandboxapi.ProblemBadClaim, err.Error())
	case err != nil:
		s.cfg.Log.Error("claim", "user", c.User, "err", err)
		problem.Write(w, http.StatusInternalServerError, "identity", err.Error())
	default:
		s.cfg.Log.Info("claimed", "user", c.User)
		s.health(w, r)
	}
}

// onlyClaimed answers 503 to every route but GET /health and POST /claim
// while the sandbox belongs to nobody: there is no owner to serve, and
// storage must not open before there is one.
func (s *Server) onlyClaimed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open := (r.Method == http.MethodGet && r.URL.Path == sandboxapi.HealthPath) ||
			(r.Method == http.MethodPost && r.URL.Path == sandboxapi.ClaimPath)
		if _, _, claimed := s.cfg.Identity.Current(); !claimed && !open {
			problem.RetryAfter(w, http.StatusServiceUnavailable, 1, sandboxapi.ProblemUnclaimed, "the sandbox has no user yet")
			return
		}
		next.ServeHTTP(w, r)
	})
}
