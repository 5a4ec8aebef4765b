package server

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/outbound"
	"github.com/affido/affido/manager/registry"
)

type storedSub struct {
	user, session string
	sub           registry.PushSubscription
}

// fakePush keeps subscriptions in memory.
type fakePush struct {
	mu      sync.Mutex
	subs    []storedSub
	deleted []string // user + " " + endpoint
}

func (f *fakePush) PutPushSubscription(_ context.Context, user, session string, sub registry.PushSubscription, max int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs = append(f.subs, storedSub{user, session, sub})
	return int64(len(f.subs)), nil
}

func (f *fakePush) DeletePushSubscription(_ context.Context, user, endpoint string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deleted = append(f.deleted, user+" "+endpoint)
	return nil
}

func (f *fakePush) PushSubscriptionInfos(_ context.Context, user, session string) ([]registry.PushSubscriptionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []registry.PushSubscriptionInfo
	for i, s := range f.subs {
		if s.user == user {
			out = append(out, registry.PushSubscriptionInfo{ID: int64(i + 1), Endpoint: s.sub.Endpoint, Current: s.session == session})
		}
	}
	return out, nil
}

func (f *fakePush) stored() []storedSub {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]storedSub(nil), f.subs...)
}

const testPushKey = "BPushKeyOfTheManager"

// pushEnv is a server with accounts (alice signed in: cookie) and an API
// token of alice's (bearer), the push routes on fakePush, and the real
// outbound guard refusing endpoints that lead inward.
func pushEnv(t *testing.T) (srv *httptest.Server, push *fakePush, cookie, bearer map[string]string) {
	t.Helper()
	acc := newFakeAccounts()
	acc.hashes["alice"], _ = account.Hash("right password", cheap)
	push = &fakePush{}
	s := &Server{EdgeDeps: EdgeDeps{Auth: acc, Resolver: instantResolver{}},
		OwnerDeps: OwnerDeps{Accounts: acc, HashParams: cheap, URLCheck: outbound.NewGuard(outbound.Config{}), Push: push, PushKey: testPushKey},
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv = httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	resp, _ := do(t, srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)
	if c == nil {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	_, m := do(t, srv, call{"POST", "/api/tokens", `{"name":"cli"}`, withCookie(c)})
	return srv, push, withCookie(c), map[string]string{"Authorization": "Bearer " + m["token"].(string)}
}

// browserKeys returns a browser's p256dh and auth as PushSubscription.toJSON gives them.
func browserKeys(t *testing.T) (p256dh, auth string) {
	t.Helper()
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a := make([]byte, 16)
	_, _ = rand.Read(a)
	return base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes()), base64.RawURLEncoding.EncodeToString(a)
}

func subscriptionJSON(endpoint, p256dh, auth string) string {
	return fmt.Sprintf(`{"endpoint":%q,"expirationTime":null,"keys":{"p256dh":%q,"auth":%q}}`, endpoint, p256dh, auth)
}

// What a browser sends is stored under its session, and answered 201;
// the same page may ask for the key and list and remove subscriptions.
func TestSubscribeFromTheBrowser(t *testing.T) {
	srv, push, cookie, bearer := pushEnv(t)
	for _, hdr := range []map[string]string{cookie, bearer} {
		if resp, m := do(t, srv, call{"GET", "/api/push/key", "", hdr}); resp.StatusCode != 200 || m["public_key"] != testPushKey {
			t.Fatalf("key: %d %v", resp.StatusCode, m)
		}
	}
	if resp, _ := do(t, srv, call{"GET", "/api/push/key", "", nil}); resp.StatusCode != 401 {
		t.Fatalf("key without credentials: %d", resp.StatusCode)
	}
	p256dh, auth := browserKeys(t)
	endpoint := "https://9.9.9.9/wpush/v2/gAAAAABk"
	// Padding is tolerated: some browsers' polyfills add it.
	resp, m := do(t, srv, call{"POST", "/api/push/subscriptions", subscriptionJSON(endpoint, p256dh, auth+"=="), cookie})
	if resp.StatusCode != 201 || m["id"] == nil {
		t.Fatalf("subscribe: %d %v", resp.StatusCode, m)
	}
	got := push.stored()
	wantKey, _ := base64.RawURLEncoding.DecodeString(p256dh)
	wantAuth, _ := base64.RawURLEncoding.DecodeString(auth)
	if len(got) != 1 || got[0].user != "alice" || got[0].session != strings.TrimPrefix(cookie["Cookie"], SessionCookie+"=") ||
		got[0].sub.Endpoint != endpoint || !bytes.Equal(got[0].sub.P256dh, wantKey) || !bytes.Equal(got[0].sub.Auth, wantAuth) {
		t.Fatalf("stored %+v", got)
	}
	_, m = do(t, srv, call{"GET", "/api/push/subscriptions", "", cookie})
	if list, _ := m["subscriptions"].([]any); len(list) != 1 || list[0].(map[string]any)["endpoint"] != endpoint || list[0].(map[string]any)["current"] != true {
		t.Fatalf("list %v", m)
	}
	if resp, _ := do(t, srv, call{"DELETE", "/api/push/subscriptions", fmt.Sprintf(`{"endpoint":%q}`, endpoint), cookie}); resp.StatusCode != 204 {
		t.Fatalf("unsubscribe: %d", resp.StatusCode)
	}
	if resp, _ := do(t, srv, call{"DELETE", "/api/push/subscriptions", `{"endpoint":"https://9.9.9.9/other"}`, bearer}); resp.StatusCode != 204 {
		t.Fatalf("unsubscribe with a token: %d", resp.StatusCode)
	}
	if d := push.deleted; len(d) != 2 || d[0] != "alice "+endpoint {
		t.Fatalf("deleted %v", d)
	}
	if resp, _ := do(t, srv, call{"DELETE", "/api/push/subscriptions", `{"url":"x"}`, cookie}); resp.StatusCode != 400 {
		t.Fatalf("unsubscribe without an endpoint: %d", resp.StatusCode)
	}
}

// Every bad subscription is refused with a 400 problem and stores
// nothing; so are an API token (no session to belong to), another site's
// page and no credentials, each with its own status.
func TestSubscribeRefusals(t *testing.T) {
	srv, push, cookie, bearer := pushEnv(t)
	p256dh, auth := browserKeys(t)
	ok := "https://9.9.9.9/wpush/v2/x"
	b64 := base64.RawURLEncoding.EncodeToString
	offCurve := append([]byte{4}, bytes.Repeat([]byte{1}, 64)...)
	key, _ := base64.RawURLEncoding.DecodeString(p256dh)
	compressed := append([]byte{2 + key[64]&1}, key[1:33]...)
	crossSite := map[string]string{"Cookie": cookie["Cookie"], "Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}
	for _, c := range []struct {
		name string
		body string
		hdr  map[string]string
		code int
		kind string
	}{
		{"http endpoint", subscriptionJSON("http://9.9.9.9/x", p256dh, auth), cookie, 400, "bad-subscription"},
		{"relative endpoint", subscriptionJSON("/wpush/x", p256dh, auth), cookie, 400, "bad-subscription"},
		{"endpoint with a password", subscriptionJSON("https://u:p@9.9.9.9/x", p256dh, auth), cookie, 400, "bad-subscription"},
		{"endpoint over 2 KiB", subscriptionJSON(ok+strings.Repeat("a", 2049), p256dh, auth), cookie, 400, "bad-subscription"},
		{"loopback endpoint", subscriptionJSON("https://127.0.0.1:8443/x", p256dh, auth), cookie, 400, "url-refused"},
		{"private endpoint", subscriptionJSON("https://10.212.0.5/admin", p256dh, auth), cookie, 400, "url-refused"},
		{"metadata endpoint", subscriptionJSON("https://169.254.169.254/latest", p256dh, auth), cookie, 400, "url-refused"},
		{"p256dh off the curve", subscriptionJSON(ok, b64(offCurve), auth), cookie, 400, "bad-subscription"},
		{"p256dh compressed", subscriptionJSON(ok, b64(compressed), auth), cookie, 400, "bad-subscription"},
		{"p256dh not base64url", subscriptionJSON(ok, "!!"+p256dh[2:], auth), cookie, 400, "bad-subscription"},
		{"p256dh empty", subscriptionJSON(ok, "", auth), cookie, 400, "bad-subscription"},
		{"auth of 15 bytes", subscriptionJSON(ok, p256dh, b64(make([]byte, 15))), cookie, 400, "bad-subscription"},
		{"auth of 17 bytes", subscriptionJSON(ok, p256dh, b64(make([]byte, 17))), cookie, 400, "bad-subscription"},
		{"no keys", fmt.Sprintf(`{"endpoint":%q}`, ok), cookie, 400, "bad-subscription"},
		{"unknown field", `{"endpoint":"` + ok + `","keys":{"p256dh":"` + p256dh + `","auth":"` + auth + `"},"admin":true}`, cookie, 400, "bad-subscription"},
		{"two values", subscriptionJSON(ok, p256dh, auth) + subscriptionJSON(ok, p256dh, auth), cookie, 400, "bad-subscription"},
		{"an array", "[" + subscriptionJSON(ok, p256dh, auth) + "]", cookie, 400, "bad-subscription"},
		{"API token", subscriptionJSON(ok, p256dh, auth), bearer, 403, "push-needs-session"},
		{"cross-site page", subscriptionJSON(ok, p256dh, auth), crossSite, 403, "cross-site"},
		{"no credentials", subscriptionJSON(ok, p256dh, auth), nil, 401, "unauthenticated"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, m := do(t, srv, call{"POST", "/api/push/subscriptions", c.body, c.hdr})
			if resp.StatusCode != c.code || resp.Header.Get("Content-Type") != "application/problem+json" ||
				!strings.HasSuffix(fmt.Sprint(m["type"]), "/"+c.kind) || m["detail"] == "" {
				t.Fatalf("%d %s %v", resp.StatusCode, resp.Header.Get("Content-Type"), m)
			}
			if got := push.stored(); len(got) != 0 {
				t.Fatalf("stored %+v", got)
			}
		})
	}
}
