package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/registry/registrytest"
)

// The cache and the batched last_used_at on the real registry
// (AFFIDO_TEST_POSTGRES_DSN, a database the test may migrate and write):
// a used token shows its use after a flush, and a revoked one is refused
// on the next request although the cache held it.
func TestPostgresTokenRevokeAndLastUsed(t *testing.T) {
	ctx := t.Context()
	store := registrytest.Store(t)
	user := "pgsrv-" + registry.NewToken()[:12]
	hash, _ := account.Hash("right password", cheap)
	if err := store.SetPassword(ctx, user, hash); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := &Server{EdgeDeps: EdgeDeps{Auth: store, Resolver: instantResolver{}, Credentials: NewCredentialCache(time.Minute), TokenUse: NewTokenUse(store, log)}, OwnerDeps: OwnerDeps{Accounts: store, HashParams: cheap}, Log: log}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	e := &authEnv{s: s, srv: srv}

	resp, _ := do(t, srv, signIn(user, "right password", nil))
	c := cookieOf(resp)
	if c == nil {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	_, m := do(t, srv, call{"POST", "/api/tokens", `{"name":"laptop"}`, withCookie(c)})
	h, v := bearerOf(m["token"].(string))
	for range 2 {
		if code := resolveAs(t, srv, user, h, v); code != 200 {
			t.Fatalf("resolve: %d", code)
		}
	}
	if list, _ := store.Tokens(ctx, user); len(list) != 1 || list[0].LastUsedAt != nil {
		t.Fatalf("a request wrote last_used_at: %+v", list)
	}
	if err := s.TokenUse.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if list, _ := store.Tokens(ctx, user); len(list) != 1 || list[0].LastUsedAt == nil || time.Since(*list[0].LastUsedAt) > time.Minute {
		t.Fatalf("after a flush: %+v", list)
	}
	mustStatus(t, e, call{"DELETE", fmt.Sprintf("/api/tokens/%d", int(m["id"].(float64))), "", withCookie(c, "Content-Type", "application/json")}, 200)
	if code := resolveAs(t, srv, user, h, v); code != 401 {
		t.Fatalf("the revoked token: %d", code)
	}
	ch, cv := cookieHdr(c)
	if code := resolveAs(t, srv, user, ch, cv); code != 200 {
		t.Fatalf("the session after the token's revoke: %d", code)
	}
	mustStatus(t, e, call{"POST", "/auth/sign-out", "", withCookie(c, "Content-Type", "application/json")}, 204)
	if code := resolveAs(t, srv, user, ch, cv); code != 401 {
		t.Fatalf("after sign-out: %d", code)
	}
}
