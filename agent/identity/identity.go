// Package identity keeps whom the sandbox belongs to: the user and the
// gateway token the manager bound it to with POST /claim. A container can
// start long before any user exists (a warm pool), so the agent learns its
// identity over the control path, never from its environment.
//
// The identity lives in identity.json next to the session database, in the
// agent's data directory, which the tools' uid cannot enter (agent/privsep).
// Once a sandbox holds one user's data it is never bound to another.
package identity

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/affido/affido/internal/atomicfile"
	"github.com/affido/affido/internal/sandboxapi"
)

// FileName is the identity's file in the data directory.
const FileName = "identity.json"

// ErrClaimedByOther is returned for a claim by another user than the one
// the sandbox belongs to.
var ErrClaimedByOther = sandboxapi.ErrClaimedByOther

// ErrInvalid is returned for a malformed user id or token.
var ErrInvalid = errors.New("invalid claim")

// MaxToken bounds a token's length in bytes.
const MaxToken = 512

// Store is the sandbox's identity. It is safe for concurrent use.
type Store struct {
	path string

	mu    sync.RWMutex
	user  string
	token string
}

type record struct {
	User  string `json:"user"`
	Token string `json:"token"`
}

// Load reads the identity kept in dir. A missing file is an unclaimed
// sandbox; a file that cannot be read or holds no valid identity is an
// error, never an unclaimed sandbox (that would let anyone claim it).
func Load(dir string) (*Store, error) {
	s := &Store{path: filepath.Join(dir, FileName)}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load identity: %w", err)
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("load identity %s: %w", s.path, err)
	}
	if err := check(r.User, r.Token); err != nil {
		return nil, fmt.Errorf("load identity %s: %w", s.path, err)
	}
	s.user, s.token = r.User, r.Token
	return s, nil
}

// Current returns the user and token; ok is false while unclaimed.
func (s *Store) Current() (user, token string, ok bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.user, s.token, s.user != ""
}

// User returns the user the sandbox belongs to ("" while unclaimed).
func (s *Store) User() string {
	user, _, _ := s.Current()
	return user
}

// Token returns the gateway token ("" while unclaimed).
func (s *Store) Token() string {
	_, token, _ := s.Current()
	return token
}

// ErrClaimedAlready is returned by ClaimIfUnclaimed when the sandbox
// belongs to the user already, under another token.
var ErrClaimedAlready = sandboxapi.ErrClaimedAlready

// ClaimIfUnclaimed is Claim that never replaces a token: a sandbox that
// belongs to user under another token is refused with ErrClaimedAlready
// (the same token again is accepted, so a retried call succeeds).
func (s *Store) ClaimIfUnclaimed(user, token string) error {
	if err := check(user, token); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.user == user && s.token != token {
		return ErrClaimedAlready
	}
	return s.claimLocked(user, token)
}

// Claim binds the sandbox to user with token. The first claim stores both;
// a claim by the same user replaces the token (the manager rotates it); a
// claim by another user is refused with ErrClaimedByOther. Nothing is
// written unless the claim is accepted, and the claim holds in memory only
// once it is on disk.
func (s *Store) Claim(user, token string) error {
	if err := check(user, token); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.claimLocked(user, token)
}

// claimLocked is Claim's work. Caller holds s.mu and checked the claim.
func (s *Store) claimLocked(user, token string) error {
	switch {
	case s.user != "" && s.user != user:
		return ErrClaimedByOther
	case s.user == user && s.token == token:
		return nil
	}
	if err := s.write(record{User: user, Token: token}); err != nil {
		return fmt.Errorf("claim for %s: %w", user, err)
	}
	s.user, s.token = user, token
	return nil
}

func check(user, token string) error {
	if !sandboxapi.ValidUser(user) {
		return fmt.Errorf("%w: a user id is 1 to 64 letters, digits, _ or -", ErrInvalid)
	}
	if token == "" || len(token) > MaxToken {
		return fmt.Errorf("%w: a token is 1 to %d bytes", ErrInvalid, MaxToken)
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] > '~' {
			return fmt.Errorf("%w: a token is printable ASCII without spaces", ErrInvalid)
		}
	}
	return nil
}

// write replaces the file atomically: a temporary file (0600), fsynced,
// renamed over the old one, and the directory fsynced.
func (s *Store) write(r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(s.path, b, 0o600)
}
