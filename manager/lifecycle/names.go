package lifecycle

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"
	"strings"

	"github.com/affido/affido/internal/sandboxapi"
)

// Labels every engine puts on the objects it makes for a stack. A sandbox
// is known by its name (LabelSandbox); which user it belongs to is the
// registry's to say, since a warm-pool sandbox is made before it has a
// user. LabelUser is set only on sandboxes made for a user, for people
// reading `docker ps`.
const (
	LabelManaged = "affido.managed"
	LabelStack   = "affido.stack"
	LabelSandbox = "affido.sandbox"
	LabelPool    = "affido.pool"
	LabelUser    = "affido.user"
)

// poolPrefix starts every warm-pool sandbox name. User ids cannot hold a
// dot, so a pool name never equals a user's.
const poolPrefix = "pool."

// validPool is the syntax of a pool sandbox name.
var validPool = regexp.MustCompile(`^pool\.[0-9a-f]{16}$`)

// ValidUser reports whether id is a well-formed user id (the contract's,
// which Caddy's route checks too).
func ValidUser(id string) bool { return sandboxapi.ValidUser(id) }

// ValidSandbox reports whether name is a well-formed sandbox name: a user
// id (a sandbox made for that user) or a pool name.
func ValidSandbox(name string) bool { return ValidUser(name) || validPool.MatchString(name) }

// IsPoolName reports whether name was made by NewPoolName.
func IsPoolName(name string) bool { return strings.HasPrefix(name, poolPrefix) }

// NewPoolName returns a fresh warm-pool sandbox name.
func NewPoolName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms.
	return poolPrefix + hex.EncodeToString(b)
}

// Pool reports whether these are a warm-pool sandbox's names.
func (n Names) Pool() bool { return IsPoolName(n.Sandbox) }

// Labels returns the labels of every object of this sandbox.
func (n Names) Labels() map[string]string {
	l := map[string]string{LabelManaged: "true", LabelStack: n.Stack, LabelSandbox: n.Sandbox}
	if n.Pool() {
		l[LabelPool] = "true"
	} else {
		l[LabelUser] = n.Sandbox
	}
	return l
}
