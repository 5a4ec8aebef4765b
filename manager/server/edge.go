package server

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/affido/affido/internal/edgeapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
)

// edgePoll answers Caddy's poll for its decision cache (internal/edgeapi,
// manager/edge): only with the control key, which Caddy and the manager
// alone hold; a touch names a valid user or the poll is refused whole.
func (s *Server) edgePoll(w http.ResponseWriter, r *http.Request) error {
	got := r.Header.Values(sandboxapi.HeaderControlKey)
	want := sha256.Sum256([]byte(s.ControlKey))
	if len(got) != 1 || len(s.ControlKey) < sandboxapi.MinControlKeyLen {
		return problem.New(http.StatusUnauthorized, "unauthenticated", "the edge's poll needs the control key")
	}
	if sum := sha256.Sum256([]byte(got[0])); subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
		return problem.New(http.StatusUnauthorized, "unauthenticated", "the edge's poll needs the control key")
	}
	var p edgeapi.Poll
	dec := json.NewDecoder(io.LimitReader(r.Body, 4<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil || p.Caddy == "" || len(p.Caddy) > 64 {
		return problem.New(http.StatusBadRequest, "bad-poll", "a poll is JSON with caddy (1 to 64 characters), epoch, acked and touched")
	}
	for _, t := range p.Touched {
		if !sandboxapi.ValidUser(t.User) {
			return problem.New(http.StatusBadRequest, "bad-poll", "a touched user is not a user id")
		}
		for _, tok := range t.Tokens {
			if b, err := hex.DecodeString(tok); err != nil || len(b) != sha256.Size {
				return problem.New(http.StatusBadRequest, "bad-poll", "a touched token is not a hex sha256")
			}
		}
	}
	writeJSON(w, s.Decisions.Poll(p, r.Context().Done()))
	return nil
}

// TouchEdge records what Caddy answered from its cache as a resolve would
// have: the sandbox's activity and the API tokens' use (manager/edge calls
// it for each poll's touches).
func (s *Server) TouchEdge(t edgeapi.Touch) {
	if s.Resolver != nil {
		s.Resolver.Touch(t.User, t.Active)
	}
	for _, tok := range t.Tokens {
		var sum [sha256.Size]byte
		if b, err := hex.DecodeString(tok); err == nil && len(b) == sha256.Size {
			copy(sum[:], b)
			s.TokenUse.record(sum)
		}
	}
}

// keepFor is how long Caddy may keep the 200 resolve is about to give r:
// EdgeTTL, never past the credential's own expiry, and only for a GET or
// HEAD (a write by cookie is checked for its site every time). Zero: not
// at all.
func (s *Server) keepFor(r *http.Request) time.Duration {
	if s.Decisions == nil || s.EdgeTTL <= 0 {
		return 0
	}
	if m := forwardedMethod(r); m != http.MethodGet && m != http.MethodHead {
		return 0
	}
	session, bearer := credentials(r)
	k := keyOf(sessionCred, session)
	if bearer != "" {
		k = keyOf(apiTokenCred, bearer)
	}
	return s.Credentials.keepFor(k, s.EdgeTTL)
}
