// Package provision creates and drives sandbox containers through the Docker
// Engine API: one internal network, two named volumes and one hardened agent
// container per sandbox, all named and labelled so they can be found again.
package provision

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/affido/affido/internal/sandboxapi"
)

// Labels put on every object the manager creates. A sandbox is known by
// its name (LabelSandbox); which user it belongs to is the registry's to
// say, since a warm-pool sandbox is made before it has a user. LabelUser is
// set only on sandboxes made for a user, for people reading `docker ps`.
const (
	LabelManaged = "affido.managed"
	LabelStack   = "affido.stack"
	LabelSandbox = "affido.sandbox"
	LabelPool    = "affido.pool"
	LabelUser    = "affido.user"
)

// poolPrefix starts every warm-pool sandbox name. User ids
// (sandboxapi.ValidUser) cannot hold a dot, so a pool name never equals a
// user's.
const poolPrefix = "pool."

// validPool is the syntax of a pool sandbox name.
var validPool = regexp.MustCompile(`^pool\.[0-9a-f]{16}$`)

// ValidSandbox reports whether name is a well-formed sandbox name: a user
// id (a sandbox made for that user) or a pool name.
func ValidSandbox(name string) bool { return sandboxapi.ValidUser(name) || validPool.MatchString(name) }

// IsPoolName reports whether name was made by NewPoolName.
func IsPoolName(name string) bool { return strings.HasPrefix(name, poolPrefix) }

// NewPoolName returns a fresh warm-pool sandbox name.
func NewPoolName() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms.
	return poolPrefix + hex.EncodeToString(b)
}

// Names are the Docker object names of one sandbox. Stack separates two
// installations (dev and the test run) on one engine; Sandbox is the name
// the registry records for the sandbox (the user id for a sandbox made for
// its user, a pool name for one claimed from the warm pool).
type Names struct {
	Stack, Sandbox string
}

// NamesFor returns the names of sandbox in stack, or an error for a bad name.
func NamesFor(stack, sandbox string) (Names, error) {
	if !ValidSandbox(sandbox) {
		return Names{}, fmt.Errorf("invalid sandbox name %q", sandbox)
	}
	return Names{Stack: stack, Sandbox: sandbox}, nil
}

func (n Names) Container() string       { return n.Stack + "-" + n.Sandbox + "-agent" }
func (n Names) Network() string         { return n.Stack + "-" + n.Sandbox + "-net" }
func (n Names) SessionVolume() string   { return n.Stack + "-" + n.Sandbox + "-session" }
func (n Names) WorkspaceVolume() string { return n.Stack + "-" + n.Sandbox + "-workspace" }

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
