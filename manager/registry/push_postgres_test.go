package registry_test

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/registry/registrytest"
)

func pushSub(endpoint string, b byte) registry.PushSubscription {
	return registry.PushSubscription{Endpoint: endpoint, P256dh: append([]byte{4}, bytes.Repeat([]byte{b}, 64)...), Auth: bytes.Repeat([]byte{b}, 16)}
}

func endpoints(t *testing.T, store *registry.Store, user string) []string {
	t.Helper()
	subs, err := store.PushSubscriptions(t.Context(), user)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range subs {
		out = append(out, s.Endpoint)
	}
	return out
}

// The VAPID pair is stored once: whoever asks later gets the first pair.
// (The database may hold a pair already: the test's is then not stored.)
func TestPostgresVAPIDKeysAreStoredOnce(t *testing.T) {
	store := registrytest.Store(t)
	pair := func() ([]byte, []byte) {
		k, err := ecdh.P256().GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k.Bytes(), k.PublicKey().Bytes()
	}
	a1, a2 := pair()
	p1, q1, err := store.VAPIDKeys(t.Context(), a1, a2)
	if err != nil {
		t.Fatal(err)
	}
	b1, b2 := pair()
	p2, q2, err := store.VAPIDKeys(t.Context(), b1, b2)
	if err != nil || !bytes.Equal(p1, p2) || !bytes.Equal(q1, q2) {
		t.Fatalf("second call got another pair: %v", err)
	}
}

// A subscription lives and dies with its web session: sign-out, a revoke
// and a new password drop it; an expired session's is not pushed to; an
// endpoint subscribed again moves to the new session; past the cap the
// oldest goes; a push service's "gone" drops it; tries are recorded.
func TestPostgresPushSubscriptionsFollowTheirSession(t *testing.T) {
	store := registrytest.Store(t)
	ctx := t.Context()
	user := "pgpush-" + registry.NewToken()[:12]
	other := user + "-other"
	ep := func(s string) string { return "https://push.example/" + user + "/" + s }
	for _, u := range []string{user, other} {
		if err := store.EnsureUser(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	session := func(u string) string {
		tok, err := store.CreateSession(ctx, u, "test", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	put := func(u, tok, endpoint string, max int) error {
		_, err := store.PutPushSubscription(ctx, u, tok, pushSub(endpoint, 7), max)
		return err
	}

	s1, s2 := session(user), session(user)
	if err := put(user, s1, ep("a"), 20); err != nil {
		t.Fatal(err)
	}
	if err := put(user, s2, ep("b"), 20); err != nil {
		t.Fatal(err)
	}
	if err := put(other, session(other), ep("c"), 20); err != nil {
		t.Fatal(err)
	}
	// Another user's session cannot file a subscription under this user.
	if err := put(user, session(other), ep("d"), 20); !errors.Is(err, registry.ErrUnauthenticated) {
		t.Fatalf("another user's session: %v", err)
	}
	if got := endpoints(t, store, user); len(got) != 2 || got[0] != ep("a") || got[1] != ep("b") {
		t.Fatalf("subscriptions %v", got)
	}
	subs, _ := store.PushSubscriptions(ctx, user)
	if !bytes.Equal(subs[0].P256dh, pushSub("", 7).P256dh) || !bytes.Equal(subs[0].Auth, pushSub("", 7).Auth) {
		t.Fatalf("keys %+v", subs[0])
	}

	// Someone who learned ep("c") but has not its keys cannot take it:
	// the other user keeps it.
	if _, err := store.PutPushSubscription(ctx, user, s2, pushSub(ep("c"), 9), 20); !errors.Is(err, registry.ErrEndpointTaken) {
		t.Fatalf("another user's endpoint with other keys: %v", err)
	}
	if got := endpoints(t, store, other); len(got) != 1 || got[0] != ep("c") {
		t.Fatalf("after a refused takeover, the other user has %v", got)
	}
	// The browser of ep("c") (its keys) signs in as user: the endpoint moves to it.
	if err := put(user, s2, ep("c"), 20); err != nil {
		t.Fatal(err)
	}
	if got := endpoints(t, store, other); len(got) != 0 {
		t.Fatalf("the moved endpoint stayed with the other user: %v", got)
	}

	// Sign-out drops the session's subscriptions, and only its.
	if err := store.DeleteSession(ctx, s1); err != nil {
		t.Fatal(err)
	}
	if got := endpoints(t, store, user); len(got) != 2 || got[0] != ep("b") {
		t.Fatalf("after sign-out: %v", got)
	}
	// A revoke, too.
	list, err := store.Sessions(ctx, user, s2)
	if err != nil {
		t.Fatal(err)
	}
	for _, si := range list {
		if si.Current {
			if err := store.RevokeSession(ctx, user, si.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if got := endpoints(t, store, user); len(got) != 0 {
		t.Fatalf("after revoke: %v", got)
	}
	// A signed-out session cannot subscribe.
	if err := put(user, s1, ep("e"), 20); !errors.Is(err, registry.ErrUnauthenticated) {
		t.Fatalf("an ended session subscribed: %v", err)
	}

	// The cap keeps the newest.
	s3 := session(user)
	for _, e := range []string{"f", "g", "h"} {
		if err := put(user, s3, ep(e), 2); err != nil {
			t.Fatal(err)
		}
	}
	if got := endpoints(t, store, user); len(got) != 2 || got[0] != ep("g") || got[1] != ep("h") {
		t.Fatalf("past the cap: %v", got)
	}

	// Tries are recorded; a gone endpoint is dropped, but only while it
	// is still that subscription's.
	subs, _ = store.PushSubscriptions(ctx, user)
	if err := store.RecordPushTry(ctx, subs[0].ID, "push service answered 503"); err != nil {
		t.Fatal(err)
	}
	if err := store.RecordPushTry(ctx, subs[1].ID, ""); err != nil {
		t.Fatal(err)
	}
	infos, err := store.PushSubscriptionInfos(ctx, user, s3)
	if err != nil || len(infos) != 2 || infos[1].LastError != "push service answered 503" || infos[1].LastSentAt != nil ||
		infos[0].LastError != "" || infos[0].LastSentAt == nil || !infos[0].Current {
		t.Fatalf("infos %+v %v", infos, err)
	}
	if err := store.DropPushSubscription(ctx, subs[0].ID, ep("other")); err != nil {
		t.Fatal(err)
	}
	if err := store.DropPushSubscription(ctx, subs[0].ID, subs[0].Endpoint); err != nil {
		t.Fatal(err)
	}
	if got := endpoints(t, store, user); len(got) != 1 || got[0] != ep("h") {
		t.Fatalf("after drop: %v", got)
	}
	// The owner's unsubscribe deletes only the owner's.
	if err := store.DeletePushSubscription(ctx, other, ep("h")); err != nil {
		t.Fatal(err)
	}
	if got := endpoints(t, store, user); len(got) != 1 {
		t.Fatalf("another user deleted a subscription: %v", got)
	}
	if err := store.DeletePushSubscription(ctx, user, ep("h")); err != nil {
		t.Fatal(err)
	}
	if got := endpoints(t, store, user); len(got) != 0 {
		t.Fatalf("after unsubscribe: %v", got)
	}

	// An expired session's subscription is not pushed to; a new password
	// ends every session and drops the rest.
	s4 := session(user)
	if err := put(user, s4, ep("i"), 20); err != nil {
		t.Fatal(err)
	}
	expire(t, user)
	if got := endpoints(t, store, user); len(got) != 0 {
		t.Fatalf("an expired session's subscription: %v", got)
	}
	if err := store.SetPassword(ctx, user, "$argon2id$x"); err != nil {
		t.Fatal(err)
	}
	if infos, _ := store.PushSubscriptionInfos(ctx, user, ""); len(infos) != 0 {
		t.Fatalf("after a new password: %+v", infos)
	}
}

// expire moves every session of user into the past.
func expire(t *testing.T, user string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), registrytest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `UPDATE session SET expires_at = now() - interval '1 minute' WHERE user_id = $1`, user); err != nil {
		t.Fatal(err)
	}
}
