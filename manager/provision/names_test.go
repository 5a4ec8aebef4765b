package provision

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/affido/affido/internal/sandboxapi"
)

func TestNamesFor(t *testing.T) {
	n, err := NamesFor("affido", "dev-user")
	if err != nil {
		t.Fatal(err)
	}
	got := []string{n.Container(), n.Network(), n.SessionVolume(), n.WorkspaceVolume()}
	want := []string{"affido-dev-user-agent", "affido-dev-user-net", "affido-dev-user-session", "affido-dev-user-workspace"}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("name %d = %q, want %q", i, got[i], want[i])
		}
	}
	l := n.Labels()
	if l[LabelManaged] != "true" || l[LabelSandbox] != "dev-user" || l[LabelUser] != "dev-user" || l[LabelStack] != "affido" || l[LabelPool] != "" {
		t.Errorf("labels = %v", l)
	}
}

func TestPoolNames(t *testing.T) {
	name := NewPoolName()
	n, err := NamesFor("affido", name)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Pool() || sandboxapi.ValidUser(name) {
		t.Fatalf("%s: a pool name must not be a user id", name)
	}
	if l := n.Labels(); l[LabelPool] != "true" || l[LabelUser] != "" || l[LabelSandbox] != name {
		t.Errorf("labels = %v", l)
	}
	if NewPoolName() == name {
		t.Error("two pool names alike")
	}
	for _, bad := range []string{"pool.", "pool.xyz", "pool.0123456789abcdef0", "pool/../x"} {
		if _, err := NamesFor("affido", bad); err == nil {
			t.Errorf("NamesFor(%q): no error", bad)
		}
	}
}

func TestNamesForRefusesBadUsers(t *testing.T) {
	for _, u := range []string{"", "..", "a/b", "a.b", "%2e%2e", "a b", "ü", strings.Repeat("x", 65), "a\x00"} {
		if _, err := NamesFor("affido", u); err == nil {
			t.Errorf("NamesFor(%q): no error", u)
		}
	}
	if _, err := NamesFor("affido", strings.Repeat("x", 64)); err != nil {
		t.Errorf("64 chars: %v", err)
	}
}

// Two different users never share an object name of the same kind.
func TestNamesDoNotCollide(t *testing.T) {
	users := []string{"a", "a-net", "a-agent", "a-session", "a-workspace", "net", "a-a", "a_net"}
	seen := map[string]string{}
	for _, u := range users {
		n, _ := NamesFor("s", u)
		for kind, name := range map[string]string{"c": n.Container(), "n": n.Network(), "v1": n.SessionVolume(), "v2": n.WorkspaceVolume()} {
			k := kind[:1] + ":" + name
			if prev, ok := seen[k]; ok && prev != u {
				t.Errorf("%s used by %s and %s", k, prev, u)
			}
			seen[k] = u
		}
	}
}

func TestAddressesInSubnet(t *testing.T) {
	sn := netip.MustParsePrefix("10.213.0.16/28")
	if got := SandboxIP(sn).String(); got != "10.213.0.18" {
		t.Errorf("SandboxIP = %s", got)
	}
	if got := GatewayIP(sn).String(); got != "10.213.0.30" {
		t.Errorf("GatewayIP = %s", got)
	}
}
