package notify

import (
	"context"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"github.com/affido/affido/internal/webpushtest"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/manager/outbound"
	"github.com/affido/affido/manager/registry"
)

// fakePushStore holds subscriptions in memory and records what pushing did to them.
type fakePushStore struct {
	mu      sync.Mutex
	subs    []registry.PushSubscription
	dropped []int64
	tries   map[int64][]string // id -> error texts ("" for sent)
}

func (f *fakePushStore) PushSubscriptions(_ context.Context, user string) ([]registry.PushSubscription, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []registry.PushSubscription
	for _, s := range f.subs {
		if s.UserID == user {
			out = append(out, s)
		}
	}
	return out, nil
}

func (f *fakePushStore) DropPushSubscription(_ context.Context, id int64, endpoint string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, s := range f.subs {
		if s.ID == id && s.Endpoint == endpoint {
			f.subs = append(f.subs[:i], f.subs[i+1:]...)
			f.dropped = append(f.dropped, id)
			break
		}
	}
	return nil
}

func (f *fakePushStore) RecordPushTry(_ context.Context, id int64, errText string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.tries == nil {
		f.tries = map[int64][]string{}
	}
	f.tries[id] = append(f.tries[id], errText)
	return nil
}

func (f *fakePushStore) triesOf(id int64) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.tries[id]...)
}

// browser is a user agent's side of a subscription: its keys.
type browser struct {
	key  *ecdh.PrivateKey
	auth []byte
}

func newBrowser(t *testing.T) browser {
	t.Helper()
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	_, _ = rand.Read(auth)
	return browser{k, auth}
}

func (b browser) subscription(id int64, user, endpoint string) registry.PushSubscription {
	return registry.PushSubscription{ID: id, UserID: user, Endpoint: endpoint, P256dh: b.key.PublicKey().Bytes(), Auth: b.auth}
}

type keyStore struct{ priv, pub []byte }

func (k *keyStore) VAPIDKeys(_ context.Context, priv, pub []byte) ([]byte, []byte, error) {
	if k.priv == nil {
		k.priv, k.pub = priv, pub
	}
	return k.priv, k.pub, nil
}

func testVAPID(t *testing.T) VAPID {
	t.Helper()
	v, err := LoadVAPID(context.Background(), &keyStore{})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// received is one request a fake push service got.
type received struct {
	path   string
	header http.Header
	body   []byte
}

// pushService is an https test server answering every push with status.
func pushService(t *testing.T, status int) (*httptest.Server, chan received) {
	t.Helper()
	got := make(chan received, 16)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- received{r.URL.Path, r.Header.Clone(), b}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

// A push is what RFC 8291 and 8292 say: the browser opens the body with
// its own keys to the payload, and the Authorization header is a VAPID
// token for the endpoint's origin that verifies with the stored public key.
func TestPushIsEncryptedAndSignedForTheEndpoint(t *testing.T) {
	srv, got := pushService(t, http.StatusCreated)
	b := newBrowser(t)
	keys := testVAPID(t)
	st := &fakePushStore{subs: []registry.PushSubscription{b.subscription(4, "alice", srv.URL+"/wpush/v2/abc")}}
	// The guarded client refuses loopback, where the test server listens: a plain one here.
	p := &Pusher{Store: st, Client: srv.Client(), Keys: keys, Subject: "mailto:ops@example.org", Log: quiet()}
	n := registry.Notification{ID: 31, UserID: "alice", Key: "notice-1", Text: "Your agent main waits for your decision on approval 3",
		Kind: gatewayapi.KindApproval, Agent: "main"}
	out := p.push(context.Background(), n)
	if out.tried != 1 || out.sent != 1 || out.code != http.StatusCreated {
		t.Fatalf("outcome %+v", out)
	}
	r := <-got
	if r.path != "/wpush/v2/abc" {
		t.Fatalf("path %q", r.path)
	}
	for h, want := range map[string]string{"Content-Encoding": "aes128gcm", "Ttl": "43200", "Urgency": "high", "Topic": "affido-31"} {
		if r.header.Get(h) != want {
			t.Errorf("%s: %q, want %q", h, r.header.Get(h), want)
		}
	}
	plain, err := webpushtest.Decrypt(r.body, b.key, b.auth)
	if err != nil {
		t.Fatalf("the browser cannot open the push: %v", err)
	}
	var pl pushPayload
	if err := json.Unmarshal(plain, &pl); err != nil {
		t.Fatalf("payload %q: %v", plain, err)
	}
	want := pushPayload{Title: "Your agent asks for approval", Body: n.Text, Kind: "approval", Agent: "main", URL: "/app/?agent=main#/approvals", Tag: "affido-31"}
	if pl != want {
		t.Fatalf("payload %+v\nwant    %+v", pl, want)
	}
	claims := verifyVAPID(t, r.header.Get("Authorization"), keys)
	if claims.Aud != srv.URL {
		t.Errorf("aud %q, want the endpoint's origin %q", claims.Aud, srv.URL)
	}
	if claims.Sub != "mailto:ops@example.org" {
		t.Errorf("sub %q", claims.Sub)
	}
	if exp := time.Unix(claims.Exp, 0); exp.Before(time.Now()) || exp.After(time.Now().Add(24*time.Hour)) {
		t.Errorf("exp %v: RFC 8292 allows at most 24 h", exp)
	}
	if st.triesOf(4)[0] != "" {
		t.Fatalf("tries %v", st.triesOf(4))
	}
}

type vapidClaims struct {
	Aud string `json:"aud"`
	Sub string `json:"sub"`
	Exp int64  `json:"exp"`
}

// verifyVAPID checks an Authorization header "vapid t=<jwt>, k=<key>":
// k is the stored public key and the ES256 JWT verifies with it.
func verifyVAPID(t *testing.T, header string, keys VAPID) vapidClaims {
	t.Helper()
	rest, ok := strings.CutPrefix(header, "vapid t=")
	token, k, ok2 := strings.Cut(rest, ", k=")
	if !ok || !ok2 {
		t.Fatalf("Authorization %q is not vapid t=…, k=…", header)
	}
	if k != keys.PublicKey() {
		t.Fatalf("k=%s, want the stored public key %s", k, keys.PublicKey())
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWT: %q", token)
	}
	var head struct {
		Alg string `json:"alg"`
		Typ string `json:"typ"`
	}
	if err := json.Unmarshal(webpushtest.Base64(t, parts[0]), &head); err != nil || head.Alg != "ES256" {
		t.Fatalf("JWT header %s: %v", webpushtest.Base64(t, parts[0]), err)
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), keys.Public)
	if err != nil {
		t.Fatal(err)
	}
	sig := webpushtest.Base64(t, parts[2])
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if len(sig) != 64 || !ecdsa.Verify(pub, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		t.Fatal("the JWT does not verify with the stored public key")
	}
	var c vapidClaims
	if err := json.Unmarshal(webpushtest.Base64(t, parts[1]), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// What a push service answers decides what happens to the subscription:
// 404 and 410 (the browser unsubscribed) drop it; anything else keeps it
// and records why.
func TestPushServiceAnswers(t *testing.T) {
	for _, c := range []struct {
		status  int
		dropped bool
		retry   bool
	}{
		{http.StatusCreated, false, false},
		{http.StatusGone, true, false},
		{http.StatusNotFound, true, false},
		{http.StatusTooManyRequests, false, true},
		{http.StatusServiceUnavailable, false, true},
		{http.StatusForbidden, false, false}, // a VAPID token it does not like
		{http.StatusRequestEntityTooLarge, false, false},
	} {
		t.Run(http.StatusText(c.status), func(t *testing.T) {
			srv, _ := pushService(t, c.status)
			st := &fakePushStore{subs: []registry.PushSubscription{newBrowser(t).subscription(9, "alice", srv.URL+"/e")}}
			p := &Pusher{Store: st, Client: srv.Client(), Keys: testVAPID(t), Subject: "mailto:ops@example.org", Log: quiet()}
			out := p.push(context.Background(), registry.Notification{ID: 1, UserID: "alice", Key: "k", Text: "t"})
			if got := len(st.dropped) == 1; got != c.dropped {
				t.Fatalf("dropped %v, want %v", st.dropped, c.dropped)
			}
			if out.retry != c.retry || out.code != c.status {
				t.Fatalf("outcome %+v", out)
			}
			tries := st.triesOf(9)
			switch {
			case c.dropped && len(tries) != 0:
				t.Fatalf("a dropped subscription's try was recorded: %v", tries)
			case c.status == http.StatusCreated && (len(tries) != 1 || tries[0] != ""):
				t.Fatalf("tries %v", tries)
			case !c.dropped && c.status != http.StatusCreated && (len(tries) != 1 || !strings.Contains(tries[0], "answered")):
				t.Fatalf("tries %v", tries)
			}
		})
	}
}

// A user without a notify URL is reached by Web Push alone, which then
// decides the notification's status: delivered when a push service took
// it, tried again when none did and it may pass, failed when it cannot,
// no_endpoint with no subscription either.
func TestPushOnlyUser(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int // the push service's answer; 0: no subscription
		tries  int // the notification's earlier tries
		want   string
	}{
		{"accepted", http.StatusCreated, 0, "delivered"},
		{"service down", http.StatusServiceUnavailable, 0, "pending"},
		{"service down, last try", http.StatusServiceUnavailable, MaxTries - 1, "failed"},
		{"refused for good", http.StatusForbidden, 0, "failed"},
		{"gone", http.StatusGone, 0, "failed"},
		{"no subscription", 0, 0, "no_endpoint"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ps := &fakePushStore{}
			var client *http.Client
			if c.status != 0 {
				srv, _ := pushService(t, c.status)
				ps.subs = []registry.PushSubscription{newBrowser(t).subscription(2, "alice", srv.URL+"/e")}
				client = srv.Client()
			}
			st := &fakeStore{}
			d := deliverer(st)
			d.Push = &Pusher{Store: ps, Client: client, Keys: testVAPID(t), Subject: "mailto:ops@example.org", Log: quiet()}
			d.deliver(context.Background(), registry.Notification{ID: 5, UserID: "alice", Key: "k", Text: "t", Tries: c.tries})
			if len(st.tries) != 1 || st.tries[0].status != c.want || st.tries[0].n != c.tries+1 {
				t.Fatalf("tries %+v, want one %s", st.tries, c.want)
			}
		})
	}
}

// With a notify URL, ntfy decides and retries; the push goes out with the
// first try only, so the owner's phone does not ring at every ntfy retry.
func TestPushGoesWithTheFirstTryOnly(t *testing.T) {
	ntfy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "down", 503) }))
	defer ntfy.Close()
	push, got := pushService(t, http.StatusCreated)
	st := &fakeStore{}
	d := deliverer(st)
	d.Push = &Pusher{Store: &fakePushStore{subs: []registry.PushSubscription{newBrowser(t).subscription(1, "alice", push.URL+"/e")}},
		Client: push.Client(), Keys: testVAPID(t), Subject: "mailto:ops@example.org", Log: quiet()}
	n := registry.Notification{ID: 8, UserID: "alice", Key: "k", Text: "t", URL: ntfy.URL}
	for i := range MaxTries {
		n.Tries = i
		d.deliver(context.Background(), n)
	}
	if len(got) != 1 {
		t.Fatalf("%d pushes for %d ntfy tries, want 1", len(got), MaxTries)
	}
	if last := st.tries[len(st.tries)-1]; len(st.tries) != MaxTries || last.status != "failed" || last.code != 503 {
		t.Fatalf("ntfy tries %+v", st.tries)
	}
}

// The attack: a subscription whose endpoint points inward (here another
// loopback address; the control network, a sandbox or a cloud metadata
// address alike) is refused by the real guarded client when it dials,
// nothing reaches it, and the notification's ntfy delivery goes on.
func TestInwardPushEndpointIsRefusedAndNtfyStillDelivers(t *testing.T) {
	var innerHits atomic.Int64
	inner := inwardServer(t, true, func(w http.ResponseWriter, r *http.Request) { innerHits.Add(1) })
	var ntfyHits atomic.Int64
	ntfy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ntfyHits.Add(1) }))
	defer ntfy.Close()
	// The operator allows exactly the ntfy sink's address, as in deliverer().
	client := outbound.NewClient(outbound.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	ps := &fakePushStore{subs: []registry.PushSubscription{
		newBrowser(t).subscription(1, "alice", inner.URL+"/admin/session?user=victim"),
		newBrowser(t).subscription(2, "alice", "https://10.0.0.1/metadata"),
	}}
	st := &fakeStore{}
	d := New(st, quiet(), client)
	d.Push = &Pusher{Store: ps, Client: client, Keys: testVAPID(t), Subject: "mailto:ops@example.org", Log: quiet()}
	d.deliver(context.Background(), registry.Notification{ID: 1, UserID: "alice", Key: "k", Text: "t", URL: ntfy.URL})
	if innerHits.Load() != 0 {
		t.Fatal("the inward push endpoint was reached")
	}
	if ntfyHits.Load() != 1 || len(st.tries) != 1 || st.tries[0].status != "delivered" {
		t.Fatalf("ntfy: %d hits, tries %+v", ntfyHits.Load(), st.tries)
	}
	for _, id := range []int64{1, 2} {
		if tries := ps.triesOf(id); len(tries) != 1 || !strings.Contains(tries[0], outbound.ErrRefused.Error()) {
			t.Fatalf("subscription %d: tries %q, want one refusal", id, tries)
		}
	}
	if len(ps.dropped) != 0 {
		t.Fatalf("a refused endpoint was dropped: %v", ps.dropped)
	}
	// Without ntfy the refusal is final: no retry hammers the guard.
	st2 := &fakeStore{}
	d2 := New(st2, quiet(), client)
	d2.Push = d.Push
	d2.deliver(context.Background(), registry.Notification{ID: 2, UserID: "alice", Key: "k2", Text: "t"})
	if len(st2.tries) != 1 || st2.tries[0].status != "failed" {
		t.Fatalf("push-only tries %+v, want failed", st2.tries)
	}
}

// The payload stays within MaxPushPayload whatever the text (escapes,
// multi-byte runes), is valid UTF-8 JSON, and says where a tap leads.
func TestPayloadFitsAndLeadsToThePage(t *testing.T) {
	long := strings.Repeat("é\"<\x01", 2000) // 2 + 2 + 1 + 6 bytes of JSON each
	for _, c := range []struct {
		n     registry.Notification
		title string
		url   string
		cut   bool
	}{
		{registry.Notification{ID: 1, Key: "reminder-ab", Text: "stretch"}, "Reminder", "/app/#/reminders", false},
		{registry.Notification{ID: 2, Key: "k", Text: long, Kind: "approval", Agent: "worker"}, "Your agent asks for approval", "/app/?agent=worker#/approvals", true},
		{registry.Notification{ID: 3, Key: "spend-limit-2026-01-02", Text: strings.Repeat("x", 4000), Kind: "spend"}, "Spend limit reached", "/app/#/settings", true},
		{registry.Notification{ID: 4, Key: "notice-ab", Text: "hello"}, "Affido", "/app/#/activity", false},
	} {
		b := payload(c.n)
		var p pushPayload
		if len(b) > MaxPushPayload || !utf8.Valid(b) || json.Unmarshal(b, &p) != nil {
			t.Fatalf("%d: %d bytes, valid UTF-8 %v: %.80s", c.n.ID, len(b), utf8.Valid(b), b)
		}
		if p.Title != c.title || p.URL != c.url || strings.HasSuffix(p.Body, "…") != c.cut || !strings.HasPrefix(c.n.Text, strings.TrimSuffix(p.Body, "…")) {
			t.Fatalf("%d: %+v", c.n.ID, p)
		}
		if c.cut && len(b) < MaxPushPayload-16 {
			t.Fatalf("%d: cut to %d bytes, far below %d", c.n.ID, len(b), MaxPushPayload)
		}
	}
}

// The key pair is made once: a second load gets the stored one, and a
// stored pair whose halves do not match is refused.
func TestVAPIDKeysAreMadeOnce(t *testing.T) {
	ks := &keyStore{}
	a, err := LoadVAPID(context.Background(), ks)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadVAPID(context.Background(), ks)
	if err != nil || a.PublicKey() != b.PublicKey() || len(a.Public) != 65 || len(a.Private) != 32 {
		t.Fatalf("second load: %v, %s vs %s", err, a.PublicKey(), b.PublicKey())
	}
	other := testVAPID(t)
	ks.pub = other.Public
	if _, err := LoadVAPID(context.Background(), ks); err == nil {
		t.Fatal("a mismatched stored pair was used")
	}
}

// Every browser of the user gets the notification, each encrypted to its
// own keys. The library appends its padding to the message it is handed:
// sent in parallel from one slice, the race detector catches the sends
// writing into each other's bytes.
func TestEachBrowserOpensItsOwnPush(t *testing.T) {
	srv, got := pushService(t, http.StatusCreated)
	browsers := map[string]browser{}
	st := &fakePushStore{}
	for i := range 5 {
		b := newBrowser(t)
		path := "/e/" + string(rune('a'+i))
		browsers[path] = b
		st.subs = append(st.subs, b.subscription(int64(i+1), "alice", srv.URL+path))
	}
	p := &Pusher{Store: st, Client: srv.Client(), Keys: testVAPID(t), Subject: "https://ops.example.org/contact", Log: quiet()}
	n := registry.Notification{ID: 3, UserID: "alice", Key: "reminder-x", Text: "water the plants"}
	if out := p.push(context.Background(), n); out.sent != 5 {
		t.Fatalf("outcome %+v", out)
	}
	for range 5 {
		r := <-got
		plain, err := webpushtest.Decrypt(r.body, browsers[r.path].key, browsers[r.path].auth)
		if err != nil || string(plain) != string(payload(n)) {
			t.Fatalf("%s: %q %v", r.path, plain, err)
		}
		if c := verifyVAPID(t, r.header.Get("Authorization"), p.Keys); c.Sub != "https://ops.example.org/contact" {
			t.Fatalf("sub %q", c.Sub)
		}
	}
}

// Plain http is a push endpoint only at an address the operator allows
// outbound explicitly (the test stack's sink); everywhere else, and by
// name, it must be https. Tried: no ranges, an address outside them, a
// host name, an address inside (v4 and v4-in-v6).
func TestPlainHTTPEndpointsOnlyWhereAllowed(t *testing.T) {
	key, _ := ecdh.P256().GenerateKey(rand.Reader)
	p256dh := base64.RawURLEncoding.EncodeToString(key.PublicKey().Bytes())
	auth := base64.RawURLEncoding.EncodeToString(make([]byte, 16))
	sink := []netip.Prefix{netip.MustParsePrefix("10.212.1.50/32")}
	for _, c := range []struct {
		endpoint string
		ranges   []netip.Prefix
		ok       bool
	}{
		{"http://10.212.1.50:9999/push", nil, false},
		{"http://10.212.1.51:9999/push", sink, false},
		{"http://sink.example:9999/push", sink, false},
		{"http://10.212.1.50:9999/push", sink, true},
		{"http://[::ffff:10.212.1.50]:9999/push", sink, true},
		{"https://push.example/x", nil, true},
	} {
		_, err := ParseSubscription(c.endpoint, p256dh, auth, c.ranges...)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrBadSubscription)) {
			t.Errorf("%s with %v: %v, want ok %v", c.endpoint, c.ranges, err, c.ok)
		}
	}
}
