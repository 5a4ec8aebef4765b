package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/config"
	"github.com/affido/affido/manager/spend"
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

// Approvals expire after a week unless AFFIDO_APPROVAL_TTL says otherwise;
// web calls are priced and rate limited by default. Tried: a TTL of zero,
// a negative one, a word; a negative price; a rate that is no number.
func TestApprovalTTLAndWebSpend(t *testing.T) {
	t.Setenv(sandboxapi.EnvControlKey, strings.Repeat("k", sandboxapi.MinControlKeyLen))
	c, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.ApprovalTTL != 168*time.Hour || c.WebPrices != (spend.WebPrices{Search: spend.USD(0.005), Fetch: spend.USD(0.001)}) || c.WebPerMinute != 30 {
		t.Fatalf("defaults: ttl %v, prices %+v, per minute %d", c.ApprovalTTL, c.WebPrices, c.WebPerMinute)
	}
	for _, bad := range []struct{ key, value string }{
		{sandboxapi.EnvApprovalTTL, "0s"}, {sandboxapi.EnvApprovalTTL, "-1h"}, {sandboxapi.EnvApprovalTTL, "a week"},
		{"AFFIDO_PRICE_FETCH", "-0.01"}, {"AFFIDO_PRICE_WEB_SEARCH", "free"}, {"AFFIDO_WEB_PER_MINUTE", "lots"},
	} {
		t.Run(bad.key+"="+bad.value, func(t *testing.T) {
			t.Setenv(bad.key, bad.value)
			if _, err := config.Load(); err == nil || !strings.Contains(err.Error(), bad.key) {
				t.Fatalf("%v, want an error naming %s", err, bad.key)
			}
		})
	}
	t.Setenv(sandboxapi.EnvApprovalTTL, "90s")
	t.Setenv("AFFIDO_PRICE_WEB_SEARCH", "0.009")
	if c, err = config.Load(); err != nil || c.ApprovalTTL != 90*time.Second || c.WebPrices.Search != 9000 {
		t.Fatalf("%v: ttl %v, search price %d", err, c.ApprovalTTL, c.WebPrices.Search)
	}
}

// On Kubernetes the sandboxes live in a namespace of their own, by default
// the control plane's with "-sandboxes", and never in the control plane's.
func TestKubernetesSandboxNamespace(t *testing.T) {
	t.Setenv("AFFIDO_RUNTIME", "kubernetes")
	t.Setenv("AFFIDO_KUBE_POD_CIDR", "10.244.0.0/16")
	t.Setenv(sandboxapi.EnvControlKey, strings.Repeat("k", sandboxapi.MinControlKeyLen))
	t.Setenv("AFFIDO_KUBE_CALLER_KEY_SHA256", sandboxapi.CallerKeyHash("a caller key of thirty-two bytes!"))
	t.Setenv("AFFIDO_KUBE_NAMESPACE", "acme")
	c, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Kube.Namespace != "acme" || c.Kube.SandboxNamespace != "acme-sandboxes" {
		t.Fatalf("namespaces %q and %q, want acme and acme-sandboxes", c.Kube.Namespace, c.Kube.SandboxNamespace)
	}
	t.Setenv("AFFIDO_KUBE_SANDBOX_NAMESPACE", "acme")
	if _, err := config.Load(); err == nil || !strings.Contains(err.Error(), "AFFIDO_KUBE_SANDBOX_NAMESPACE") {
		t.Fatalf("the sandboxes in the control plane's namespace: %v, want an error naming AFFIDO_KUBE_SANDBOX_NAMESPACE", err)
	}
}
