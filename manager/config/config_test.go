package config_test

import (
	"strings"
	"testing"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/config"
)

// The Kubernetes runtime needs the hash of Caddy's caller key: without it,
// or with anything but 64 hex digits (tried: empty, the key itself, a
// short hash, non-hex, the hash of an empty key), the manager refuses to start rather than make
// agents that answer nobody, or anybody.
func TestKubernetesNeedsTheCallerKeyHash(t *testing.T) {
	t.Setenv("AFFIDO_RUNTIME", "kubernetes")
	t.Setenv("AFFIDO_KUBE_POD_CIDR", "10.244.0.0/16")
	t.Setenv(sandboxapi.EnvControlKey, strings.Repeat("k", sandboxapi.MinControlKeyLen))
	good := sandboxapi.CallerKeyHash("a caller key of thirty-two bytes!")
	for _, bad := range []string{"", "a caller key of thirty-two bytes!", good[:62], strings.Repeat("z", 64), sandboxapi.CallerKeyHash("")} {
		t.Setenv("AFFIDO_KUBE_CALLER_KEY_SHA256", bad)
		if _, err := config.Load(); err == nil || !strings.Contains(err.Error(), "AFFIDO_KUBE_CALLER_KEY_SHA256") {
			t.Errorf("AFFIDO_KUBE_CALLER_KEY_SHA256=%q: %v, want an error naming it", bad, err)
		}
	}
	t.Setenv("AFFIDO_KUBE_CALLER_KEY_SHA256", good)
	c, err := config.Load()
	if err != nil {
		t.Fatalf("a good hash: %v", err)
	}
	if c.Kube.CallerKeyHash != good {
		t.Fatalf("CallerKeyHash %q, want %q", c.Kube.CallerKeyHash, good)
	}
}

// The manager does not start without the control listener's key (tried:
// none, one a character short), rather than send control calls Caddy
// refuses.
func TestControlKeyIsRequired(t *testing.T) {
	for _, bad := range []string{"", strings.Repeat("k", sandboxapi.MinControlKeyLen-1)} {
		t.Setenv(sandboxapi.EnvControlKey, bad)
		if _, err := config.Load(); err == nil || !strings.Contains(err.Error(), sandboxapi.EnvControlKey) {
			t.Errorf("%s=%q: %v, want an error naming it", sandboxapi.EnvControlKey, bad, err)
		}
	}
	t.Setenv(sandboxapi.EnvControlKey, strings.Repeat("k", sandboxapi.MinControlKeyLen))
	if _, err := config.Load(); err != nil {
		t.Fatal(err)
	}
}
