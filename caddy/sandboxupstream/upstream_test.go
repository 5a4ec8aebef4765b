package sandboxupstream

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func provisioned(t *testing.T, allow ...string) *Upstream {
	t.Helper()
	u := &Upstream{Allow: allow}
	if err := u.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	if err := u.Validate(); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestCheck(t *testing.T) {
	u := provisioned(t, "10.213.0.0/16")
	tests := []struct {
		raw  string
		want string // empty: refused
	}{
		{"10.213.0.2:8080", "10.213.0.2:8080"},
		{"10.213.255.14:1", "10.213.255.14:1"},
		{"[::ffff:10.213.0.2]:8080", "10.213.0.2:8080"},
		{"10.214.0.2:8080", ""},           // outside the pool
		{"127.0.0.1:9090", ""},            // the manager, loopback
		{"10.213.0.2", ""},                // no port
		{"10.213.0.2:0", ""},              // port 0
		{"sandbox-manager:9090", ""},      // hostname
		{"localhost:2019", ""},            // Caddy admin by name
		{"unix//var/run/docker.sock", ""}, // unix socket
		{"unix//var/run/docker.sock|10.213.0.2:80", ""},
		{"10.213.0.2:8080, 10.214.0.2:8080", ""}, // two values joined by Caddy
		{"", ""},
		{" 10.213.0.2:8080", ""},
	}
	for _, tt := range tests {
		got, err := u.Check(tt.raw)
		if tt.want == "" {
			if err == nil {
				t.Errorf("Check(%q) = %s, want refusal", tt.raw, got)
			}
			continue
		}
		if err != nil || got.String() != tt.want {
			t.Errorf("Check(%q) = %s, %v; want %s", tt.raw, got, err, tt.want)
		}
	}
}

func TestGetUpstreamsReadsOnlyTheVar(t *testing.T) {
	u := provisioned(t, "10.213.0.0/16")
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Sandbox-Endpoint", "10.213.0.2:8080") // a client header is not the var
	ctx := context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{})
	if ups, err := u.GetUpstreams(r.WithContext(ctx)); err == nil {
		t.Fatalf("no var: got upstreams %v", ups)
	}
	ctx = context.WithValue(r.Context(), caddyhttp.VarsCtxKey, map[string]any{DefaultVar: "10.213.0.18:8080"})
	ups, err := u.GetUpstreams(r.WithContext(ctx))
	if err != nil || len(ups) != 1 || ups[0].Dial != "10.213.0.18:8080" {
		t.Fatalf("GetUpstreams = %v, %v", ups, err)
	}
}

func TestValidateNeedsAPrefix(t *testing.T) {
	u := &Upstream{}
	if err := u.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	if err := u.Validate(); err == nil {
		t.Fatal("no allowed prefix: Validate passed")
	}
	if err := (&Upstream{Allow: []string{"not-a-cidr"}}).Provision(caddy.Context{}); err == nil {
		t.Fatal("bad prefix: Provision passed")
	}
}
