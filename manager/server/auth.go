package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/registry"
)

// Accounts is the web client's account store (the registry).
type Accounts interface {
	// PasswordHash returns registry.ErrUnauthenticated for a user that does
	// not exist or has no password.
	PasswordHash(ctx context.Context, user string) (string, error)
	CreateSession(ctx context.Context, user, userAgent string, ttl time.Duration) (string, error)
	DeleteSession(ctx context.Context, token string) error
	Sessions(ctx context.Context, user, current string) ([]registry.SessionInfo, error)
	// RevokeSession and RevokeToken return registry.ErrNotFound for an id
	// the user does not have.
	RevokeSession(ctx context.Context, user string, id int64) error
	CreateNamedToken(ctx context.Context, user, name string) (registry.TokenInfo, string, error)
	Tokens(ctx context.Context, user string) ([]registry.TokenInfo, error)
	RevokeToken(ctx context.Context, user string, id int64) error
	// SignUp returns registry.ErrBadInvite or registry.ErrUserExists.
	SignUp(ctx context.Context, user, hash, invite string, open bool) error
}

// DefaultSessionTTL is how long a web session lasts.
const DefaultSessionTTL = 30 * 24 * time.Hour

// Sign-in attempts are limited two ways: per account (accountLocks: wrong
// passwords lock that account's password sign-in, never an address), and
// per address whatever the account, a ceiling against spraying one
// password over many accounts: 50 failed sign-ins and sign-ups at once,
// then one more every 6 s; a success gives its count back. Neither shares
// its counts with the credential throttles (throttle.go), so wrong
// passwords never refuse a token and bad tokens never refuse a sign-in.
// At most hashLimit password hashes run at once (19 MiB each).
const (
	signInAddrBurst = 50
	signInAddrEvery = 6 * time.Second
	hashLimit       = 4
)

// authRoutes adds sign-in, sign-up, sign-out and the owner's account routes.
func (s *Server) authRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /auth/sign-in", s.serve(s.signIn))
	mux.HandleFunc("POST /auth/sign-out", s.serve(s.signOut))
	mux.HandleFunc("POST /auth/sign-up", s.serve(s.signUp))
	mux.HandleFunc("GET /api/me", s.serve(s.me))
	mux.HandleFunc("GET /api/sessions", s.ownerRead(s.sessions))
	mux.HandleFunc("DELETE /api/sessions/{id}", s.serve(s.revokeSession))
	mux.HandleFunc("GET /api/tokens", s.ownerRead(s.tokens))
	mux.HandleFunc("POST /api/tokens", s.serve(s.createToken))
	mux.HandleFunc("DELETE /api/tokens/{id}", s.serve(s.revokeToken))
}

func (s *Server) signInGuards() (perAddress *authThrottle, locks *accountLocks) {
	s.signInOnce.Do(func() {
		s.signInAddr = newAuthThrottle(signInAddrEvery, signInAddrBurst)
		s.locks = newAccountLocks()
		s.hashSem = make(chan struct{}, hashLimit)
	})
	return s.signInAddr, s.locks
}

// hashing runs f while holding one of the hashLimit slots, or fails when
// ctx ends first.
func (s *Server) hashing(ctx context.Context, f func()) error {
	s.signInGuards()
	select {
	case s.hashSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.hashSem }()
	f()
	return nil
}

// tooManyFromAddress refuses a sign-in or sign-up from an address past the
// ceiling.
func tooManyFromAddress(wait time.Duration) error {
	return problem.New(http.StatusTooManyRequests, "too-many-failures",
		"too many failed sign-ins from this address; try again later").Retry(int(wait.Seconds() + 0.999))
}

// authBody reads the JSON body of an /auth write. Such a write must come
// from this origin and say JSON, cookie or not: another site must not sign
// a browser in (login CSRF) or out.
func authBody(w http.ResponseWriter, r *http.Request, v any) error {
	if err := checkCookieWrite(r, r.Method, r.URL.Path); err != nil {
		return err
	}
	if v == nil {
		return nil
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil || dec.More() {
		return problem.Errorf(http.StatusBadRequest, "bad-json", "the body is not the expected JSON: %v", err)
	}
	return nil
}

// setSession sets (or, with token "", clears) the session cookie: HttpOnly,
// SameSite=Lax, and Secure when the site is served over https
// (AFFIDO_SECURE_COOKIES: Caddy here speaks plain http behind whatever
// terminates TLS, so the request cannot tell).
func (s *Server) setSession(w http.ResponseWriter, r *http.Request, token string, ttl time.Duration) {
	c := &http.Cookie{Name: SessionCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: s.SecureCookies || r.TLS != nil}
	if token == "" {
		c.MaxAge = -1
	} else {
		c.MaxAge = int(ttl.Seconds())
	}
	http.SetCookie(w, c)
}

func (s *Server) sessionTTL() time.Duration {
	if s.SessionTTL > 0 {
		return s.SessionTTL
	}
	return DefaultSessionTTL
}

func (s *Server) hashParams() account.Params {
	if s.HashParams != (account.Params{}) {
		return s.HashParams
	}
	return account.DefaultParams
}

type credentialsBody struct {
	User     string `json:"user"`
	Password string `json:"password"`
	Invite   string `json:"invite,omitempty"`
}

// signIn checks a user's password and starts a session. Wrong passwords
// (and unknown users, which answer the same) lock that account for a
// while (429 account-locked, with Retry-After, even for the right
// password) and count against the address's ceiling.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request) error {
	var body credentialsBody
	if err := authBody(w, r, &body); err != nil {
		return err
	}
	if body.Invite != "" {
		return problem.New(http.StatusBadRequest, "bad-json", "an invite goes to /auth/sign-up")
	}
	perAddress, locks := s.signInGuards()
	verdict := abandoned
	if sandboxapi.ValidUser(body.User) { // other names exist nowhere: only the address counts
		if wait, ok := locks.begin(body.User); !ok {
			secs := int(wait.Seconds() + 0.999)
			return problem.Errorf(http.StatusTooManyRequests, "account-locked",
				"too many wrong passwords for %s: its password sign-in is locked for %d s; sessions and API tokens already made still work",
				body.User, secs).Retry(secs)
		}
		defer func() { locks.end(body.User, verdict) }()
	}
	reserved, wait, allowed := perAddress.reserve(sourceAddr(r))
	if !allowed {
		return tooManyFromAddress(wait)
	}
	hash, err := s.Accounts.PasswordHash(r.Context(), body.User)
	if err != nil && !errors.Is(err, registry.ErrUnauthenticated) {
		reserved.cancel()
		return registryDown(err)
	}
	ok := false
	herr := s.hashing(r.Context(), func() {
		if errors.Is(err, registry.ErrUnauthenticated) {
			// Spend the same time as a real check, so timing does not tell
			// which user names exist.
			_, _ = account.Verify(body.Password, s.dummyHash())
			return
		}
		var verr error
		if ok, verr = account.Verify(body.Password, hash); verr != nil {
			s.Log.Error("sign-in: stored hash unreadable", "user", body.User, "err", verr)
		}
	})
	if herr != nil {
		reserved.cancel()
		return nil // the client went away
	}
	if !ok {
		verdict = wrong
		return problem.New(http.StatusUnauthorized, "wrong-password", "wrong user name or password")
	}
	verdict = right
	reserved.cancel() // a success costs nothing
	return s.startSession(w, r, body.User)
}

func (s *Server) startSession(w http.ResponseWriter, r *http.Request, user string) error {
	token, err := s.Accounts.CreateSession(r.Context(), user, r.UserAgent(), s.sessionTTL())
	if err != nil {
		return registryDown(err)
	}
	s.guard().known.add(keyOf(sessionCred, token))
	s.setSession(w, r, token, s.sessionTTL())
	writeJSONStatus(w, http.StatusOK, map[string]any{"user": user})
	return nil
}

// dummyHash is a hash of nothing anyone knows, with the current parameters.
func (s *Server) dummyHash() string {
	s.dummyOnce.Do(func() {
		s.dummy, _ = account.Hash(registry.NewToken(), s.hashParams())
	})
	return s.dummy
}

func (s *Server) signOut(w http.ResponseWriter, r *http.Request) error {
	if err := authBody(w, r, nil); err != nil {
		return err
	}
	if session, _ := credentials(r); session != "" {
		// Whose it is, so that Caddy forgets that user's decisions alone:
		// a cookie that names no session has nothing kept anywhere, and a
		// stranger's sign-out flushes nobody's.
		owner, _, lookupErr := s.Auth.UserForSession(r.Context(), session)
		err := s.Accounts.DeleteSession(r.Context(), session)
		s.Credentials.ForgetSession(session)
		switch {
		case lookupErr == nil:
			s.Credentials.ForgetEdge(owner)
		case !errors.Is(lookupErr, registry.ErrUnauthenticated): // whose is not known: everyone's
			s.Credentials.ForgetEdge("")
		}
		s.guard().known.forget(keyOf(sessionCred, session))
		if err != nil {
			return registryDown(err)
		}
	}
	s.setSession(w, r, "", 0)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// signUp creates an account: with an invite (affido admin invite), or
// without one when the operator turned open sign-up on.
func (s *Server) signUp(w http.ResponseWriter, r *http.Request) error {
	var body credentialsBody
	if err := authBody(w, r, &body); err != nil {
		return err
	}
	if !sandboxapi.ValidUser(body.User) {
		return problem.New(http.StatusBadRequest, "bad-user", "a user name is 1 to 64 letters, digits, _ or -")
	}
	if body.Invite == "" && !s.OpenSignUp {
		return problem.New(http.StatusForbidden, "sign-up-closed", "sign-up needs an invite from the operator (affido admin invite USER)")
	}
	perAddress, _ := s.signInGuards()
	reserved, wait, allowed := perAddress.reserve(sourceAddr(r))
	if !allowed {
		return tooManyFromAddress(wait)
	}
	var hash string
	var err error
	if herr := s.hashing(r.Context(), func() { hash, err = account.Hash(body.Password, s.hashParams()) }); herr != nil {
		reserved.cancel()
		return nil // the client went away
	}
	if err != nil {
		return fmt.Errorf("hash the password of %s: %w", body.User, err) // a weak password is the client's (fail)
	}
	err = s.Accounts.SignUp(r.Context(), body.User, hash, body.Invite, s.OpenSignUp)
	switch {
	case errors.Is(err, registry.ErrBadInvite), errors.Is(err, registry.ErrUserExists):
		return err
	case err != nil:
		reserved.cancel() // the registry's failure, not the client's
		return registryDown(err)
	}
	reserved.cancel()
	return s.startSession(w, r, body.User)
}

// owner authenticates a request to the owner's account routes.
func (s *Server) owner(w http.ResponseWriter, r *http.Request) (string, error) {
	user, _, err := s.authorize(w, r, "", r.Method, r.URL.Path)
	return user, err
}

func (s *Server) me(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	writeJSONStatus(w, http.StatusOK, map[string]any{"user": user})
	return nil
}

// ownerRead answers a read of the owner's own records: read gives the
// body; any error of it is the registry's (503).
func (s *Server) ownerRead(read func(r *http.Request, user string) (any, error)) http.HandlerFunc {
	return s.serve(func(w http.ResponseWriter, r *http.Request) error {
		user, err := s.owner(w, r)
		if err != nil {
			return err
		}
		v, err := read(r, user)
		if err != nil {
			return registryDown(err)
		}
		writeJSONStatus(w, http.StatusOK, v)
		return nil
	})
}

func (s *Server) sessions(r *http.Request, user string) (any, error) {
	current, _ := credentials(r)
	list, err := s.Accounts.Sessions(r.Context(), user, current)
	return map[string]any{"sessions": list}, err
}

func (s *Server) tokens(r *http.Request, user string) (any, error) {
	list, err := s.Accounts.Tokens(r.Context(), user)
	return map[string]any{"tokens": list}, err
}

// createToken makes a named API token; the answer is the only time the
// token is shown.
func (s *Server) createToken(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	var body struct {
		Name string `json:"name"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || strings.TrimSpace(body.Name) == "" || len(body.Name) > 100 {
		return problem.New(http.StatusBadRequest, "bad-token-name", `send {"name": "..."} (1 to 100 bytes)`)
	}
	info, token, err := s.Accounts.CreateNamedToken(r.Context(), user, body.Name)
	if err != nil {
		return registryDown(err)
	}
	s.guard().known.add(keyOf(apiTokenCred, token))
	writeJSONStatus(w, http.StatusCreated, map[string]any{"id": info.ID, "name": info.Name, "created_at": info.CreatedAt,
		"token": token, "note": "this is the only time the token is shown"})
	return nil
}

func (s *Server) revokeSession(w http.ResponseWriter, r *http.Request) error {
	return s.revoke(w, r, "session", s.Accounts.RevokeSession)
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) error {
	return s.revoke(w, r, "token", s.Accounts.RevokeToken)
}

func (s *Server) revoke(w http.ResponseWriter, r *http.Request, what string, del func(context.Context, string, int64) error) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return problem.New(http.StatusBadRequest, "bad-id", "an id is a positive integer")
	}
	err = del(r.Context(), user, id)
	s.Credentials.ForgetUser(user) // even on an error: the delete may have committed
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return problem.Errorf(http.StatusNotFound, "unknown-"+what, "no %s %d", what, id)
	case err != nil:
		return registryDown(err)
	}
	writeJSONStatus(w, http.StatusOK, map[string]any{"revoked": id})
	return nil
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// signInState is the Server's lazily made sign-in state.
type signInState struct {
	signInOnce sync.Once
	signInAddr *authThrottle // per address
	locks      *accountLocks // per user name
	hashSem    chan struct{}
	dummyOnce  sync.Once
	dummy      string
}
