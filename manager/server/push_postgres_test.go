package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/registry/registrytest"
)

// On the real registry (AFFIDO_TEST_POSTGRES_DSN, a database the test may
// migrate and write): a browser's subscription goes when its session
// does, by sign-out or by a revoke from another session, and an API token
// cannot subscribe.
func TestPostgresSignOutAndRevokeDropPushSubscriptions(t *testing.T) {
	ctx := t.Context()
	store := registrytest.Store(t)
	user := "pgpush-" + registry.NewToken()[:12]
	hash, _ := account.Hash("right password", cheap)
	if err := store.SetPassword(ctx, user, hash); err != nil {
		t.Fatal(err)
	}
	s := &Server{EdgeDeps: EdgeDeps{Auth: store, Resolver: instantResolver{}},
		OwnerDeps: OwnerDeps{Accounts: store, HashParams: cheap, Push: store, PushKey: "k"}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	e := &authEnv{s: s, srv: srv}
	signedIn := func() map[string]string {
		resp, _ := do(t, srv, signIn(user, "right password", nil))
		c := cookieOf(resp)
		if c == nil {
			t.Fatalf("sign-in: %d", resp.StatusCode)
		}
		return withCookie(c)
	}
	endpoint := func(s string) string { return "https://9.9.9.9/" + user + "/" + s }
	subscribe := func(hdr map[string]string, ep string) int {
		p256dh, auth := browserKeys(t)
		resp, _ := do(t, srv, call{"POST", "/api/push/subscriptions", subscriptionJSON(ep, p256dh, auth), hdr})
		return resp.StatusCode
	}
	have := func(want ...string) {
		t.Helper()
		subs, err := store.PushSubscriptions(ctx, user)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range subs {
			got = append(got, s.Endpoint)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("subscriptions %v, want %v", got, want)
		}
	}

	laptop, phone := signedIn(), signedIn()
	if subscribe(laptop, endpoint("laptop")) != 201 || subscribe(phone, endpoint("phone")) != 201 {
		t.Fatal("subscribe")
	}
	have(endpoint("laptop"), endpoint("phone"))
	_, m := do(t, srv, call{"POST", "/api/tokens", `{"name":"cli"}`, laptop})
	if code := subscribe(map[string]string{"Authorization": "Bearer " + m["token"].(string)}, endpoint("cli")); code != 403 {
		t.Fatalf("an API token subscribed: %d", code)
	}

	mustStatus(t, e, call{"POST", "/auth/sign-out", "", withCookieHdr(laptop, "Content-Type", "application/json")}, 204)
	have(endpoint("phone"))

	desk := signedIn()
	sessions, err := store.Sessions(ctx, user, strings.TrimPrefix(phone["Cookie"], SessionCookie+"="))
	if err != nil {
		t.Fatal(err)
	}
	var phoneID int64
	for _, si := range sessions {
		if si.Current {
			phoneID = si.ID
		}
	}
	if phoneID == 0 {
		t.Fatal("the phone's session is not listed")
	}
	mustStatus(t, e, call{"DELETE", fmt.Sprintf("/api/sessions/%d", phoneID), "", withCookieHdr(desk, "Content-Type", "application/json")}, 200)
	have()
	if code := subscribe(phone, endpoint("phone")); code != 401 {
		t.Fatalf("a revoked session subscribed: %d", code)
	}
}

// withCookieHdr adds header pairs to a copy of hdr.
func withCookieHdr(hdr map[string]string, extra ...string) map[string]string {
	out := map[string]string{}
	for k, v := range hdr {
		out[k] = v
	}
	for i := 0; i+1 < len(extra); i += 2 {
		out[extra[i]] = extra[i+1]
	}
	return out
}
