// Package provision creates and drives sandbox containers through the Docker
// Engine API: one internal network, two named volumes and one hardened agent
// container per user, all named and labelled so they can be found again.
package provision

import (
	"fmt"
	"regexp"
)

// Labels put on every object the manager creates.
const (
	LabelManaged = "affido.managed"
	LabelUser    = "affido.user"
	LabelStack   = "affido.stack"
)

// validUser is the user id syntax Caddy's route accepts too.
var validUser = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// ValidUser reports whether id is a well-formed user id.
func ValidUser(id string) bool { return validUser.MatchString(id) }

// Names are the Docker object names of one user's sandbox. Stack separates
// two installations (dev and the test run) on one engine.
type Names struct {
	Stack, User string
}

// NamesFor returns the names for user in stack, or an error for a bad user id.
func NamesFor(stack, user string) (Names, error) {
	if !ValidUser(user) {
		return Names{}, fmt.Errorf("invalid user id %q", user)
	}
	return Names{Stack: stack, User: user}, nil
}

func (n Names) Container() string       { return n.Stack + "-" + n.User + "-agent" }
func (n Names) Network() string         { return n.Stack + "-" + n.User + "-net" }
func (n Names) SessionVolume() string   { return n.Stack + "-" + n.User + "-session" }
func (n Names) WorkspaceVolume() string { return n.Stack + "-" + n.User + "-workspace" }

// Labels returns the labels of every object of this sandbox.
func (n Names) Labels() map[string]string {
	return map[string]string{LabelManaged: "true", LabelUser: n.User, LabelStack: n.Stack}
}
