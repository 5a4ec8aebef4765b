package server

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/affido/affido/agent/identity"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
)

// claim binds the sandbox to a user (the manager's call, through Caddy's
// control listener, which alone sets the control header). A sandbox that
// belongs to one user is never bound to another.
func (s *Server) claim(w http.ResponseWriter, r *http.Request) error {
	if r.Header.Get(sandboxapi.HeaderControl) != "1" {
		return problem.New(http.StatusForbidden, sandboxapi.ProblemNotControl, "a sandbox is claimed only by the manager, through the control path")
	}
	var c sandboxapi.Claim
	if err := decodeBody(w, r, &c); err != nil {
		return err
	}
	claim := s.cfg.Identity.Claim
	if c.IfUnclaimed {
		claim = s.cfg.Identity.ClaimIfUnclaimed
	}
	err := claim(c.User, c.Token)
	switch {
	case errors.Is(err, identity.ErrClaimedByOther):
		return problem.New(http.StatusConflict, sandboxapi.ProblemClaimedByOther, "the sandbox belongs to another user")
	case errors.Is(err, identity.ErrClaimedAlready):
		return problem.New(http.StatusConflict, sandboxapi.ProblemClaimedAlready, "the sandbox belongs to this user already, under another token")
	case errors.Is(err, identity.ErrInvalid):
		return problem.New(http.StatusBadRequest, sandboxapi.ProblemBadClaim, err.Error())
	case err != nil:
		return fmt.Errorf("claim for %s: %w", c.User, err)
	}
	s.cfg.Log.Info("claimed", "user", c.User)
	return s.health(w, r)
}

// onlyClaimed answers 503 to every route but GET /health and POST /claim
// while the sandbox belongs to nobody: there is no owner to serve, and
// storage must not open before there is one.
func (s *Server) onlyClaimed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open := (r.Method == http.MethodGet && r.URL.Path == sandboxapi.HealthPath) ||
			(r.Method == http.MethodPost && r.URL.Path == sandboxapi.ClaimPath)
		if _, _, claimed := s.cfg.Identity.Current(); !claimed && !open {
			s.fail(w, r, problem.New(http.StatusServiceUnavailable, sandboxapi.ProblemUnclaimed, "the sandbox has no user yet").Retry(1))
			return
		}
		next.ServeHTTP(w, r)
	})
}
