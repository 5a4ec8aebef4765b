package lifecycle

import (
	"strings"
	"testing"
)

func TestLabels(t *testing.T) {
	l := Names{Stack: "affido", Sandbox: "dev-user"}.Labels()
	if l[LabelManaged] != "true" || l[LabelSandbox] != "dev-user" || l[LabelUser] != "dev-user" || l[LabelStack] != "affido" || l[LabelPool] != "" {
		t.Errorf("labels = %v", l)
	}
}

func TestPoolNames(t *testing.T) {
	name := NewPoolName()
	n := Names{Stack: "affido", Sandbox: name}
	if !n.Pool() || ValidUser(name) || !ValidSandbox(name) {
		t.Fatalf("%s: a pool name must be a sandbox name and not a user id", name)
	}
	if l := n.Labels(); l[LabelPool] != "true" || l[LabelUser] != "" || l[LabelSandbox] != name {
		t.Errorf("labels = %v", l)
	}
	if NewPoolName() == name {
		t.Error("two pool names alike")
	}
	for _, bad := range []string{"pool.", "pool.xyz", "pool.0123456789abcdef0", "pool/../x"} {
		if ValidSandbox(bad) {
			t.Errorf("ValidSandbox(%q) = true", bad)
		}
	}
}

func TestBadUserIDsAreNotSandboxNames(t *testing.T) {
	for _, u := range []string{"", "..", "a/b", "a.b", "%2e%2e", "a b", "ü", strings.Repeat("x", 65), "a\x00"} {
		if ValidSandbox(u) || ValidUser(u) {
			t.Errorf("%q accepted", u)
		}
	}
	if !ValidUser(strings.Repeat("x", 64)) {
		t.Error("64 characters refused")
	}
}
