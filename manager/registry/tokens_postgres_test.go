package registry_test

import (
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/registry/registrytest"
)

// A token lookup only reads; TouchAPITokens writes a batch, never moves a
// time back and ignores tokens that are gone. A session lookup says when
// the session ends and refuses it after.
func TestPostgresTokenLookupsAndTouch(t *testing.T) {
	store := registrytest.Store(t)
	ctx := t.Context()
	user := "pgtest-" + registry.NewToken()[:12]
	tok, err := store.CreateAPIToken(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := store.UserForAPIToken(ctx, tok); err != nil || u != user {
		t.Fatalf("lookup: %q %v", u, err)
	}
	lastUsed := func() *time.Time {
		list, err := store.Tokens(ctx, user)
		if err != nil || len(list) != 1 {
			t.Fatalf("tokens: %v %v", list, err)
		}
		return list[0].LastUsedAt
	}
	if at := lastUsed(); at != nil {
		t.Fatalf("the lookup wrote last_used_at %v", at)
	}
	at := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	sum := sha256.Sum256([]byte(tok))
	if err := store.TouchAPITokens(ctx, map[[sha256.Size]byte]time.Time{sum: at, sha256.Sum256([]byte("revoked meanwhile")): at}); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); got == nil || !got.Equal(at) {
		t.Fatalf("last_used_at %v, want %v", got, at)
	}
	if err := store.TouchAPITokens(ctx, map[[sha256.Size]byte]time.Time{sum: at.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); got == nil || !got.Equal(at) {
		t.Fatalf("an older flush moved last_used_at back to %v", got)
	}
	if err := store.TouchAPITokens(ctx, nil); err != nil {
		t.Fatal(err)
	}

	expires := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if err := store.PutSession(ctx, user, "s-"+user, expires); err != nil {
		t.Fatal(err)
	}
	if u, exp, err := store.UserForSession(ctx, "s-"+user); err != nil || u != user || !exp.Equal(expires) {
		t.Fatalf("session: %q %v %v, want %q %v", u, exp, err, user, expires)
	}
	if err := store.PutSession(ctx, user, "s-"+user, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.UserForSession(ctx, "s-"+user); !errors.Is(err, registry.ErrUnauthenticated) {
		t.Fatalf("an expired session: %v", err)
	}
}
