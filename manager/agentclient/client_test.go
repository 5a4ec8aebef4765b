package agentclient_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/agentclient"
)

var ep = netip.MustParseAddrPort("10.213.0.10:8080")

const testControlKey = "0123456789abcdef0123456789abcdef"

// proxy stands in for Caddy's control listener: it answers with status and
// body, and records what it got.
func proxy(t *testing.T, status int, body string, got *http.Request, claim *sandboxapi.Claim) *agentclient.Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		*got = *r.Clone(context.Background())
		if claim != nil {
			json.NewDecoder(r.Body).Decode(claim)
		}
		w.WriteHeader(status)
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return agentclient.New(srv.URL, testControlKey)
}

func TestClaim(t *testing.T) {
	var got http.Request
	var claim sandboxapi.Claim
	c := proxy(t, 200, `{"status":"ok","claimed":true,"user":"alice"}`, &got, &claim)
	if err := c.Claim(context.Background(), ep, "alice", "tok-a"); err != nil {
		t.Fatal(err)
	}
	if got.Method != "POST" || got.URL.Path != "/_sandbox/"+ep.String()+sandboxapi.ClaimPath || got.Header.Get(sandboxapi.HeaderControl) != "1" {
		t.Fatalf("sent %s %s with control header %q", got.Method, got.URL.Path, got.Header.Get(sandboxapi.HeaderControl))
	}
	if k := got.Header.Values(sandboxapi.HeaderControlKey); len(k) != 1 || k[0] != testControlKey {
		t.Fatalf("sent control key %q, want the manager's", k)
	}
	if claim != (sandboxapi.Claim{User: "alice", Token: "tok-a"}) {
		t.Fatalf("sent %+v", claim)
	}

	c = proxy(t, 409, `{"type":"https://affido.dev/problems/claimed-by-other"}`, &got, nil)
	if err := c.Claim(context.Background(), ep, "bob", "tok-b"); !errors.Is(err, sandboxapi.ErrClaimedByOther) {
		t.Fatalf("409: %v, want ErrClaimedByOther", err)
	}
	for _, status := range []int{400, 403, 502, 503} {
		c = proxy(t, status, `{}`, &got, nil)
		if err := c.Claim(context.Background(), ep, "bob", "tok-b"); err == nil || errors.Is(err, sandboxapi.ErrClaimedByOther) {
			t.Fatalf("%d: %v", status, err)
		}
	}
}

func TestClaimIfUnclaimed(t *testing.T) {
	var got http.Request
	var claim sandboxapi.Claim
	c := proxy(t, 200, `{"status":"ok","claimed":true,"user":"alice"}`, &got, &claim)
	if err := c.ClaimIfUnclaimed(context.Background(), ep, "alice", "tok-a"); err != nil {
		t.Fatal(err)
	}
	if claim != (sandboxapi.Claim{User: "alice", Token: "tok-a", IfUnclaimed: true}) {
		t.Fatalf("sent %+v", claim)
	}
	c = proxy(t, 409, `{"type":"https://affido.dev/problems/claimed-already"}`, &got, nil)
	if err := c.ClaimIfUnclaimed(context.Background(), ep, "alice", "tok-b"); !errors.Is(err, sandboxapi.ErrClaimedAlready) || errors.Is(err, sandboxapi.ErrClaimedByOther) {
		t.Fatalf("409 claimed-already: %v, want ErrClaimedAlready alone", err)
	}
	c = proxy(t, 409, `{"type":"https://affido.dev/problems/claimed-by-other"}`, &got, nil)
	if err := c.ClaimIfUnclaimed(context.Background(), ep, "bob", "tok-b"); !errors.Is(err, sandboxapi.ErrClaimedByOther) {
		t.Fatalf("409 claimed-by-other: %v, want ErrClaimedByOther", err)
	}
}

func TestHealth(t *testing.T) {
	var got http.Request
	c := proxy(t, 200, `{"status":"ok","claimed":true,"user":"alice"}`, &got, nil)
	h, err := c.Health(context.Background(), ep)
	if err != nil || h != (sandboxapi.Health{Status: "ok", Claimed: true, User: "alice"}) {
		t.Fatalf("%+v %v", h, err)
	}
	for status, body := range map[int]string{503: `{"status":"ok"}`, 200: `not json`} {
		c = proxy(t, status, body, &got, nil)
		if _, err := c.Health(context.Background(), ep); err == nil {
			t.Fatalf("%d %q: no error", status, body)
		}
	}
}
