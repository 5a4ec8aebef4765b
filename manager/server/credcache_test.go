package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/spend"
)

// resolveAs asks /v1/resolve for user's sandbox with the header h: v.
func resolveAs(t *testing.T, srv *httptest.Server, user, h, v string) int {
	t.Helper()
	resp, _ := do(t, srv, call{"GET", "/v1/resolve?user=" + user + "&path=/prompt", "", map[string]string{h: v}})
	return resp.StatusCode
}

func bearerOf(tok string) (string, string)      { return "Authorization", "Bearer " + tok }
func cookieHdr(c *http.Cookie) (string, string) { return "Cookie", SessionCookie + "=" + c.Value }

// adminStore is the operator's side of fakeAccounts: a new password ends
// the user's sessions, a session may be written under any token.
type adminStore struct{ acc *fakeAccounts }

var errNotHere = errors.New("not used in this test")

func (a adminStore) CreateAPIToken(context.Context, string) (string, error)       { return "", errNotHere }
func (a adminStore) SetSpendLimits(context.Context, string, *int64, *int64) error { return errNotHere }
func (a adminStore) SetNotifyURL(context.Context, string, string) error           { return errNotHere }
func (a adminStore) CreateInvite(context.Context, string, time.Duration) (string, error) {
	return "", errNotHere
}
func (a adminStore) Spend(context.Context, string, spend.Limits) (registry.SpendReport, error) {
	return registry.SpendReport{}, errNotHere
}

func (a adminStore) PutSession(_ context.Context, user, token string, expires time.Time) error {
	a.acc.mu.Lock()
	defer a.acc.mu.Unlock()
	a.acc.next++
	a.acc.sessions[token] = fakeSession{id: a.acc.next, user: user, expires: expires}
	return nil
}

func (a adminStore) SetPassword(_ context.Context, user, hash string) error {
	a.acc.mu.Lock()
	defer a.acc.mu.Unlock()
	a.acc.hashes[user] = hash
	for tok, s := range a.acc.sessions {
		if s.user == user {
			delete(a.acc.sessions, tok)
		}
	}
	return nil
}

// adminCall runs one admin API request against e's accounts and cache.
func (e *authEnv) adminCall(t *testing.T, path string, q url.Values) {
	t.Helper()
	a := &Admin{Store: adminStore{e.acc}, Credentials: e.s.Credentials}
	w := httptest.NewRecorder()
	a.Handler().ServeHTTP(w, httptest.NewRequest("POST", path+"?"+q.Encode(), nil))
	if w.Code != 200 {
		t.Fatalf("admin %s: %d %s", path, w.Code, w.Body)
	}
}

// Every way a credential ends in this manager is refused on the very next
// request, although the cache (TTL a minute, the clock standing still)
// still held it: sign-out, a session revoked from another session, an API
// token revoked, a new password from the operator, a session token the
// operator gives to someone else.
func TestRevokedCredentialsAreRefusedOnTheNextRequest(t *testing.T) {
	ct := "Content-Type"
	for _, c := range []struct {
		name string
		// use returns the credential to attack and the revoke to run.
		use   func(t *testing.T, e *authEnv) (h, v string, revoke func())
		after string // the user the credential belongs to after the revoke ("": none)
	}{
		{"sign-out", func(t *testing.T, e *authEnv) (string, string, func()) {
			c := signedIn(t, e)
			h, v := cookieHdr(c)
			return h, v, func() {
				mustStatus(t, e, call{"POST", "/auth/sign-out", "", withCookie(c, ct, "application/json")}, 204)
			}
		}, ""},
		{"session revoked from another session", func(t *testing.T, e *authEnv) (string, string, func()) {
			first, second := signedIn(t, e), signedIn(t, e)
			h, v := cookieHdr(first)
			return h, v, func() {
				_, m := do(t, e.srv, call{"GET", "/api/sessions", "", withCookie(second)})
				for _, s := range m["sessions"].([]any) {
					if s := s.(map[string]any); s["current"] != true {
						mustStatus(t, e, call{"DELETE", fmt.Sprintf("/api/sessions/%d", int(s["id"].(float64))), "", withCookie(second, ct, "application/json")}, 200)
					}
				}
			}
		}, ""},
		{"API token revoked", func(t *testing.T, e *authEnv) (string, string, func()) {
			c := signedIn(t, e)
			_, m := do(t, e.srv, call{"POST", "/api/tokens", `{"name":"laptop"}`, withCookie(c)})
			h, v := bearerOf(m["token"].(string))
			return h, v, func() {
				mustStatus(t, e, call{"DELETE", fmt.Sprintf("/api/tokens/%d", int(m["id"].(float64))), "", withCookie(c, ct, "application/json")}, 200)
			}
		}, ""},
		{"a new password from the operator", func(t *testing.T, e *authEnv) (string, string, func()) {
			h, v := cookieHdr(signedIn(t, e))
			hash, _ := account.Hash("another password", cheap)
			return h, v, func() { e.adminCall(t, "/admin/password", url.Values{"user": {"alice"}, "hash": {hash}}) }
		}, ""},
		{"a session token the operator gives to bob", func(t *testing.T, e *authEnv) (string, string, func()) {
			e.adminCall(t, "/admin/session", url.Values{"user": {"alice"}, "token": {"shared"}})
			return "Cookie", SessionCookie + "=shared", func() {
				e.adminCall(t, "/admin/session", url.Values{"user": {"bob"}, "token": {"shared"}})
			}
		}, "bob"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newAuthEnv(t, false)
			h, v, revoke := c.use(t, e)
			for range 2 {
				if code := resolveAs(t, e.srv, "alice", h, v); code != 200 {
					t.Fatalf("before the revoke: %d", code)
				}
			}
			before := e.acc.lookups.Load()
			if code := resolveAs(t, e.srv, "alice", h, v); code != 200 || e.acc.lookups.Load() != before {
				t.Fatalf("the credential is not cached: %d, %d lookups", code, e.acc.lookups.Load()-before)
			}
			revoke()
			want := 401
			if c.after != "" {
				want = 403
			}
			if code := resolveAs(t, e.srv, "alice", h, v); code != want {
				t.Fatalf("the next request after the revoke: %d, want %d", code, want)
			}
			if c.after != "" {
				if code := resolveAs(t, e.srv, c.after, h, v); code != 200 {
					t.Fatalf("as %s: %d", c.after, code)
				}
			}
		})
	}
}

func signedIn(t *testing.T, e *authEnv) *http.Cookie {
	t.Helper()
	resp, _ := do(t, e.srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)
	if c == nil {
		t.Fatalf("sign-in: %d", resp.StatusCode)
	}
	return c
}

func mustStatus(t *testing.T, e *authEnv, c call, want int) {
	t.Helper()
	if resp, m := do(t, e.srv, c); resp.StatusCode != want {
		t.Fatalf("%s %s: %d %v, want %d", c.method, c.path, resp.StatusCode, m, want)
	}
}

// A token revoked by another manager is still cached here for
// forward_auth, but the account routes ask Postgres: it cannot mint a
// token that would outlive it, and the refusal drops the cached entry.
func TestAccountRoutesIgnoreTheCache(t *testing.T) {
	e := newAuthEnv(t, false)
	c := signedIn(t, e)
	_, m := do(t, e.srv, call{"POST", "/api/tokens", `{"name":"laptop"}`, withCookie(c)})
	tok := m["token"].(string)
	h, v := bearerOf(tok)
	if code := resolveAs(t, e.srv, "alice", h, v); code != 200 {
		t.Fatalf("resolve: %d", code)
	}
	e.acc.mu.Lock()
	delete(e.acc.tokens, tok) // another manager's revoke: this one's cache is not told
	e.acc.mu.Unlock()
	if code := resolveAs(t, e.srv, "alice", h, v); code != 200 {
		t.Fatalf("forward_auth within the TTL: %d, want 200 from the cache (the documented lag)", code)
	}
	bearer := map[string]string{h: v}
	if resp, m := do(t, e.srv, call{"POST", "/api/tokens", `{"name":"minted"}`, bearer}); resp.StatusCode != 401 {
		t.Fatalf("a revoked token minted a token: %d %v", resp.StatusCode, m)
	}
	if code := resolveAs(t, e.srv, "alice", h, v); code != 401 {
		t.Fatalf("forward_auth after the account route's refusal: %d", code)
	}
}

// clockedAuth is the registry's answers on a test clock: sessions expire,
// tokens can be deleted behind the manager's back (another manager's revoke).
type clockedAuth struct {
	clock    *testClock
	mu       sync.Mutex
	sessions map[string]fakeSession
	tokens   map[string]string
	lookups  atomic.Int64
	// gate, if set, is called inside every lookup after its answer is read.
	gate func()
}

func (a *clockedAuth) UserForSession(_ context.Context, tok string) (string, time.Time, error) {
	a.lookups.Add(1)
	a.mu.Lock()
	s, ok := a.sessions[tok]
	a.mu.Unlock()
	if !ok || !a.clock.Now().Before(s.expires) {
		return "", time.Time{}, registry.ErrUnauthenticated
	}
	return s.user, s.expires, nil
}

func (a *clockedAuth) UserForAPIToken(_ context.Context, tok string) (string, error) {
	a.lookups.Add(1)
	a.mu.Lock()
	u, ok := a.tokens[tok]
	a.mu.Unlock()
	if a.gate != nil {
		a.gate()
	}
	if !ok {
		return "", registry.ErrUnauthenticated
	}
	return u, nil
}

func (a *clockedAuth) deleteToken(tok string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.tokens, tok)
}

func clockedServer(ttl time.Duration) (*Server, *clockedAuth) {
	clock := newTestClock()
	auth := &clockedAuth{clock: clock, sessions: map[string]fakeSession{}, tokens: map[string]string{}}
	creds := NewCredentialCache(ttl)
	if creds != nil {
		creds.now = clock.Now
	}
	return &Server{EdgeDeps: EdgeDeps{Auth: auth, Resolver: instantResolver{}, Credentials: creds}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, auth
}

// serve runs one resolve for user with the header h: v, from address from.
func serve(s http.Handler, user, h, v, from string) int {
	req := httptest.NewRequest("GET", "/v1/resolve?user="+user+"&path=/prompt", nil)
	req.Header.Set(h, v)
	req.Header.Set("X-Forwarded-For", from)
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w.Code
}

// A cached session is refused once it expires, however much of the TTL is left.
func TestExpiredSessionIsRefusedWithinTheTTL(t *testing.T) {
	s, auth := clockedServer(time.Hour)
	auth.sessions["s"] = fakeSession{user: "alice", expires: auth.clock.Now().Add(30 * time.Second)}
	h := s.Handler()
	for i := range 2 {
		if code := serve(h, "alice", "Cookie", SessionCookie+"=s", "192.0.2.1"); code != 200 {
			t.Fatalf("request %d: %d", i, code)
		}
	}
	if n := auth.lookups.Load(); n != 1 {
		t.Fatalf("%d lookups for two requests, want 1 (cached)", n)
	}
	auth.clock.Add(30 * time.Second)
	if code := serve(h, "alice", "Cookie", SessionCookie+"=s", "192.0.2.1"); code != 401 {
		t.Fatalf("at its expiry, in the TTL: %d", code)
	}
}

// The lag another manager's revoke has here: a token deleted behind this
// manager's back still works until the TTL has passed since it was looked
// up, and not a moment longer.
func TestCachedEntryEndsAfterTheTTL(t *testing.T) {
	s, auth := clockedServer(time.Second)
	auth.tokens["t"] = "alice"
	h := s.Handler()
	if code := serve(h, "alice", "Authorization", "Bearer t", "192.0.2.1"); code != 200 {
		t.Fatalf("first: %d", code)
	}
	auth.deleteToken("t")
	auth.clock.Add(time.Second - time.Millisecond)
	if code := serve(h, "alice", "Authorization", "Bearer t", "192.0.2.1"); code != 200 || auth.lookups.Load() != 1 {
		t.Fatalf("within the TTL: %d after %d lookups, want 200 from the cache", code, auth.lookups.Load())
	}
	auth.clock.Add(time.Millisecond)
	if code := serve(h, "alice", "Authorization", "Bearer t", "192.0.2.1"); code != 401 {
		t.Fatalf("at the TTL: %d", code)
	}
	if n := s.Credentials.size(); n != 0 {
		t.Fatalf("the refused token's stale entry stays: %d entries", n)
	}
}

// With the TTL 0 (AFFIDO_AUTH_CACHE_TTL=0) every request is looked up.
func TestNoCacheWithTTLZero(t *testing.T) {
	s, auth := clockedServer(0)
	auth.tokens["t"] = "alice"
	h := s.Handler()
	for range 3 {
		serve(h, "alice", "Authorization", "Bearer t", "192.0.2.1")
	}
	if n := auth.lookups.Load(); n != 3 {
		t.Fatalf("%d lookups for 3 requests, want 3", n)
	}
}

// A revoke that commits while a lookup of the same token is in flight:
// that lookup's answer (read before the revoke) may serve its own request
// but must not be cached for the next one.
func TestLookupInFlightDuringARevokeIsNotCached(t *testing.T) {
	s, auth := clockedServer(time.Hour)
	auth.tokens["t"] = "alice"
	read, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	auth.gate = func() { once.Do(func() { close(read); <-release }) }
	h := s.Handler()
	done := make(chan int)
	go func() { done <- serve(h, "alice", "Authorization", "Bearer t", "192.0.2.1") }()
	<-read
	auth.deleteToken("t")             // the revoke: Postgres first,
	s.Credentials.ForgetUser("alice") // then this manager's cache (Server.revoke)
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("the request in flight: %d", code)
	}
	if code := serve(h, "alice", "Authorization", "Bearer t", "192.0.2.1"); code != 401 {
		t.Fatalf("the next request: %d, want 401", code)
	}
}

// A flood of unknown tokens costs lookups (which the throttle bounds) but
// no cache entry; known ones fill the cache only up to its bound.
func TestCacheDoesNotGrowWithUnknownTokens(t *testing.T) {
	s, auth := clockedServer(time.Hour)
	h := s.Handler()
	for i := range 1000 {
		from := fmt.Sprintf("198.51.%d.%d", i/250, i%250) // past one address's throttle
		if code := serve(h, "alice", "Authorization", fmt.Sprintf("Bearer guess-%d", i), from); code != 401 {
			t.Fatalf("guess %d: %d", i, code)
		}
	}
	if n := s.Credentials.size(); n != 0 {
		t.Fatalf("%d entries after 1000 unknown tokens", n)
	}
	if n := auth.lookups.Load(); n != 1000 {
		t.Fatalf("%d lookups, want every unknown token looked up", n)
	}
	s.Credentials.max = 16
	for i := range 100 {
		tok := fmt.Sprintf("t-%d", i)
		auth.tokens[tok] = "alice"
		if code := serve(h, "alice", "Authorization", "Bearer "+tok, "192.0.2.1"); code != 200 {
			t.Fatalf("token %d: %d", i, code)
		}
		auth.clock.Add(time.Millisecond)
	}
	if n := s.Credentials.size(); n > 16 {
		t.Fatalf("%d entries, bound 16", n)
	}
}

// A full cache drops what has expired or, if nothing has, what expires first.
func TestCacheEvictsExpiredThenOldest(t *testing.T) {
	clock := newTestClock()
	c := NewCredentialCache(time.Minute)
	c.now, c.max = clock.Now, 2
	put := func(tok string, expires time.Time) {
		if _, err := c.lookup(keyOf(sessionCred, tok), false, func() (string, time.Time, error) { return "u-" + tok, expires, nil }); err != nil {
			t.Fatal(err)
		}
	}
	has := func(tok string) bool {
		c.mu.RLock()
		defer c.mu.RUnlock()
		_, ok := c.m[keyOf(sessionCred, tok)]
		return ok
	}
	put("a", clock.Now().Add(10*time.Second))
	put("b", time.Time{})
	put("c", time.Time{}) // full, nothing expired: a, which expires first, goes
	if has("a") || !has("b") || !has("c") {
		t.Fatalf("a=%v b=%v c=%v, want a evicted", has("a"), has("b"), has("c"))
	}
	clock.Add(time.Minute)
	put("d", time.Time{}) // b and c expired: both go
	if has("b") || has("c") || !has("d") || c.size() != 1 {
		t.Fatalf("b=%v c=%v d=%v size %d", has("b"), has("c"), has("d"), c.size())
	}
}

// touches is a TokenToucher that keeps the batches it is given.
type touches struct {
	mu      sync.Mutex
	batches []map[[sha256.Size]byte]time.Time
	err     error
}

func (f *touches) TouchAPITokens(_ context.Context, used map[[sha256.Size]byte]time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.batches = append(f.batches, used)
	return nil
}

// API token use is written in one batch per flush, with each token's last
// use, cached requests included; sessions and refused tokens write nothing;
// a failed write keeps the uses for the next.
func TestTokenUseIsFlushedInOneBatch(t *testing.T) {
	s, auth := clockedServer(time.Hour)
	auth.tokens["a"], auth.tokens["b"] = "alice", "alice"
	auth.sessions["s"] = fakeSession{user: "alice", expires: auth.clock.Now().Add(time.Hour)}
	store := &touches{}
	s.TokenUse = NewTokenUse(store, s.Log)
	s.TokenUse.now = auth.clock.Now
	h := s.Handler()
	t0 := auth.clock.Now()
	for _, r := range []struct{ hdr, val string }{
		{"Authorization", "Bearer a"}, {"Authorization", "Bearer b"}, {"Authorization", "Bearer a"},
		{"Cookie", SessionCookie + "=s"}, {"Authorization", "Bearer unknown"},
	} {
		serve(h, "alice", r.hdr, r.val, "192.0.2.1")
		auth.clock.Add(time.Second)
	}
	if len(store.batches) != 0 {
		t.Fatalf("a request wrote its use: %v", store.batches)
	}
	if err := s.TokenUse.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[[sha256.Size]byte]time.Time{sha256.Sum256([]byte("a")): t0.Add(2 * time.Second), sha256.Sum256([]byte("b")): t0.Add(time.Second)}
	if len(store.batches) != 1 || fmt.Sprint(store.batches[0]) != fmt.Sprint(want) {
		t.Fatalf("batches %v, want one: %v", store.batches, want)
	}
	if err := s.TokenUse.Flush(context.Background()); err != nil || len(store.batches) != 1 {
		t.Fatalf("a flush with nothing new wrote: %v %d", err, len(store.batches))
	}
	store.err = errors.New("postgres down")
	serve(h, "alice", "Authorization", "Bearer b", "192.0.2.1")
	if err := s.TokenUse.Flush(context.Background()); err == nil {
		t.Fatal("a failed write is not reported")
	}
	store.err = nil
	if err := s.TokenUse.Flush(context.Background()); err != nil || len(store.batches) != 2 || len(store.batches[1]) != 1 {
		t.Fatalf("the use kept from the failed write: %v %v", err, store.batches)
	}
}

// Resolves in parallel with revokes and flushes (run with -race).
func TestConcurrentResolvesAreRaceFree(t *testing.T) {
	s, auth := clockedServer(time.Hour)
	auth.tokens["t"] = "alice"
	auth.sessions["s"] = fakeSession{user: "alice", expires: auth.clock.Now().Add(time.Hour)}
	s.TokenUse = NewTokenUse(&touches{}, s.Log)
	h := s.Handler()
	stop := make(chan struct{})
	var churn sync.WaitGroup
	churn.Add(1)
	go func() {
		defer churn.Done()
		for {
			select {
			case <-stop:
				return
			default:
				s.Credentials.ForgetUser("alice")
				s.Credentials.ForgetSession("s")
				_ = s.TokenUse.Flush(context.Background())
				auth.clock.Add(time.Microsecond)
			}
		}
	}()
	var wg sync.WaitGroup
	var bad atomic.Int64
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hdr, val := "Authorization", "Bearer t"
			if i%2 == 0 {
				hdr, val = "Cookie", SessionCookie+"=s"
			}
			for range 300 {
				if serve(h, "alice", hdr, val, "192.0.2.1") != 200 {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d of 2400 resolves refused", n)
	}
}
