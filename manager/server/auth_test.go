package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/outbound"
	"github.com/affido/affido/manager/registry"
)

// fakeAccounts is an in-memory account store, also the Authenticator, so
// sessions it makes authenticate the owner's routes.
type fakeAccounts struct {
	mu       sync.Mutex
	hashes   map[string]string
	sessions map[string]fakeSession // token -> session
	tokens   map[string]fakeToken   // token -> api token
	invites  map[string]string      // code -> user
	next     int64
	lookups  atomic.Int64 // credential lookups (each a Postgres round trip)
}

type fakeSession struct {
	id      int64
	user    string
	expires time.Time
}

type fakeToken struct {
	registry.TokenInfo
	user string
}

func newFakeAccounts() *fakeAccounts {
	return &fakeAccounts{hashes: map[string]string{}, sessions: map[string]fakeSession{}, tokens: map[string]fakeToken{}, invites: map[string]string{}}
}

func (f *fakeAccounts) PasswordHash(_ context.Context, user string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.hashes[user]; ok {
		return h, nil
	}
	return "", registry.ErrUnauthenticated
}

func (f *fakeAccounts) CreateSession(_ context.Context, user, _ string, ttl time.Duration) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	tok := fmt.Sprintf("session-%d", f.next)
	f.sessions[tok] = fakeSession{id: f.next, user: user, expires: time.Now().Add(ttl)}
	return tok, nil
}

func (f *fakeAccounts) DeleteSession(_ context.Context, token string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sessions, token)
	return nil
}

func (f *fakeAccounts) Sessions(_ context.Context, user, current string) ([]registry.SessionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []registry.SessionInfo
	for tok, s := range f.sessions {
		if s.user == user && s.expires.After(time.Now()) {
			out = append(out, registry.SessionInfo{ID: s.id, ExpiresAt: s.expires, Current: tok == current})
		}
	}
	return out, nil
}

func (f *fakeAccounts) RevokeSession(_ context.Context, user string, id int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for tok, s := range f.sessions {
		if s.user == user && s.id == id {
			delete(f.sessions, tok)
			return nil
		}
	}
	return registry.ErrNotFound
}

func (f *fakeAccounts) CreateNamedToken(_ context.Context, user, name string) (registry.TokenInfo, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	tok := fmt.Sprintf("api-%d", f.next)
	ti := registry.TokenInfo{ID: f.next, Name: name, CreatedAt: time.Now()}
	f.tokens[tok] = fakeToken{ti, user}
	return ti, tok, nil
}

func (f *fakeAccounts) Tokens(_ context.Context, user string) ([]registry.TokenInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []registry.TokenInfo
	for _, t := range f.tokens {
		if t.user == user {
			out = append(out, t.TokenInfo)
		}
	}
	return out, nil
}

func (f *fakeAccounts) RevokeToken(_ context.Context, user string, id int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for tok, t := range f.tokens {
		if t.user == user && t.ID == id {
			delete(f.tokens, tok)
			return nil
		}
	}
	return registry.ErrNotFound
}

func (f *fakeAccounts) SignUp(_ context.Context, user, hash, invite string, open bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if invite != "" {
		if f.invites[invite] != user {
			return registry.ErrBadInvite
		}
		delete(f.invites, invite)
	} else if !open {
		return registry.ErrBadInvite
	}
	if _, ok := f.hashes[user]; ok {
		return registry.ErrUserExists
	}
	f.hashes[user] = hash
	return nil
}

func (f *fakeAccounts) UserForSession(_ context.Context, tok string) (string, time.Time, error) {
	f.lookups.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.sessions[tok]; ok && s.expires.After(time.Now()) {
		return s.user, s.expires, nil
	}
	return "", time.Time{}, registry.ErrUnauthenticated
}

func (f *fakeAccounts) UserForAPIToken(_ context.Context, tok string) (string, error) {
	f.lookups.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.tokens[tok]; ok {
		return t.user, nil
	}
	return "", registry.ErrUnauthenticated
}

var cheap = account.Params{Memory: 1024, Time: 1, Threads: 1}

func authServer(t *testing.T, open bool) (*httptest.Server, *fakeAccounts) {
	e := newAuthEnv(t, open)
	return e.srv, e.acc
}

// authEnv is a Server on fakeAccounts with a credential cache (TTL
// authEnvTTL) on a clock the test moves.
type authEnv struct {
	s     *Server
	srv   *httptest.Server
	acc   *fakeAccounts
	clock *testClock
}

const authEnvTTL = time.Minute

func newAuthEnv(t *testing.T, open bool) *authEnv {
	t.Helper()
	acc := newFakeAccounts()
	h, _ := account.Hash("right password", cheap)
	acc.hashes["alice"] = h
	clock := newTestClock()
	creds := NewCredentialCache(authEnvTTL)
	creds.now = clock.Now
	s := &Server{EdgeDeps: EdgeDeps{Auth: acc, Resolver: instantResolver{}, Credentials: creds}, OwnerDeps: OwnerDeps{Accounts: acc, OpenSignUp: open, HashParams: cheap}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &authEnv{s, srv, acc, clock}
}

// testClock is a clock that moves only when told.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: time.Now()} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type call struct {
	method, path, body string
	hdr                map[string]string
}

func do(t *testing.T, srv *httptest.Server, c call) (*http.Response, map[string]any) {
	t.Helper()
	resp, body := doRaw(t, srv, c)
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	return resp, m
}

// doRaw makes the call (a body is sent as JSON) and returns the answer
// with its body read.
func doRaw(t *testing.T, srv *httptest.Server, c call) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

func cookieOf(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == SessionCookie {
			return c
		}
	}
	return nil
}

func signIn(user, pw string, hdr map[string]string) call {
	return call{"POST", "/auth/sign-in", fmt.Sprintf(`{"user":%q,"password":%q}`, user, pw), hdr}
}

func withCookie(c *http.Cookie, extra ...string) map[string]string {
	h := map[string]string{"Cookie": SessionCookie + "=" + c.Value}
	for i := 0; i+1 < len(extra); i += 2 {
		h[extra[i]] = extra[i+1]
	}
	return h
}

func TestSignInSetsASafeCookie(t *testing.T) {
	srv, _ := authServer(t, false)
	resp, m := do(t, srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)
	if resp.StatusCode != 200 || m["user"] != "alice" || c == nil {
		t.Fatalf("sign-in: %d %v", resp.StatusCode, m)
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.Secure {
		t.Fatalf("cookie %+v", c)
	}
	if resp, _ := do(t, srv, call{"GET", "/api/me", "", withCookie(c)}); resp.StatusCode != 200 {
		t.Fatalf("me with the new session: %d", resp.StatusCode)
	}
	acc := newFakeAccounts()
	acc.hashes["alice"], _ = account.Hash("right password", cheap)
	secure := httptest.NewServer((&Server{EdgeDeps: EdgeDeps{Auth: acc}, OwnerDeps: OwnerDeps{Accounts: acc, SecureCookies: true, HashParams: cheap}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Handler())
	defer secure.Close()
	resp, _ = do(t, secure, signIn("alice", "right password", nil))
	if c := cookieOf(resp); c == nil || !c.Secure {
		t.Fatalf("on an https site the cookie must be Secure: %+v", c)
	}
}

// Tried: a wrong password, an unknown user (the same answer), a form
// post, a cross-site JSON post, an unknown field.
func TestSignInRefusals(t *testing.T) {
	srv, _ := authServer(t, false)
	for _, c := range []struct {
		name string
		call call
		code int
		kind string
	}{
		{"wrong password", signIn("alice", "wrong password", nil), 401, "wrong-password"},
		{"unknown user", signIn("mallory", "whatever it is", nil), 401, "wrong-password"},
		{"cross-site", signIn("alice", "right password", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"}), 403, "cross-site"},
		{"form post", call{"POST", "/auth/sign-in", "user=alice&password=right+password", map[string]string{"Content-Type": "application/x-www-form-urlencoded"}}, 403, "cross-site"},
		{"unknown field", call{"POST", "/auth/sign-in", `{"user":"alice","password":"right password","admin":true}`, nil}, 400, "bad-json"},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp, m := do(t, srv, c.call)
			if resp.StatusCode != c.code || !strings.HasSuffix(fmt.Sprint(m["type"]), c.kind) || cookieOf(resp) != nil {
				t.Fatalf("%d %v", resp.StatusCode, m)
			}
		})
	}
}

// The lock of one account: the 5th wrong password in a row locks it for
// 10 s, the next wrong one after that for 20 s, and so on; a right
// password once unlocked forgets the count.
func TestAccountLockGrowsAndEnds(t *testing.T) {
	e := newAuthEnv(t, false)
	_, locks := e.s.signInGuards()
	locks.now = e.clock.Now
	const addr = "198.51.100.1"
	wantLocked := func(secs int) {
		t.Helper()
		resp, m := do(t, e.srv, signIn("alice", "right password", from(addr)))
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != fmt.Sprint(secs) || !strings.HasSuffix(fmt.Sprint(m["type"]), "/account-locked") {
			t.Fatalf("want locked for %d s: %d %v %v", secs, resp.StatusCode, resp.Header.Get("Retry-After"), m)
		}
	}
	for i := range lockAfter {
		if resp, _ := do(t, e.srv, signIn("alice", "wrong password", from(addr))); resp.StatusCode != 401 {
			t.Fatalf("wrong password %d: %d", i+1, resp.StatusCode)
		}
	}
	wantLocked(10)
	e.clock.Add(4 * time.Second)
	wantLocked(6)
	e.clock.Add(6 * time.Second)
	if resp, _ := do(t, e.srv, signIn("alice", "wrong password", from(addr))); resp.StatusCode != 401 {
		t.Fatalf("a wrong password once unlocked: %d", resp.StatusCode)
	}
	wantLocked(20)
	e.clock.Add(20 * time.Second)
	if resp, _ := do(t, e.srv, signIn("alice", "right password", from(addr))); resp.StatusCode != 200 {
		t.Fatalf("the right password once unlocked: %d", resp.StatusCode)
	}
	if resp, _ := do(t, e.srv, signIn("alice", "wrong password", from(addr))); resp.StatusCode != 401 {
		t.Fatalf("a wrong password after a success: %d", resp.StatusCode)
	}
	if resp, _ := do(t, e.srv, signIn("alice", "right password", from(addr))); resp.StatusCode != 200 {
		t.Fatalf("one wrong password does not lock: %d", resp.StatusCode)
	}
}

// The schedule: 10 s doubling to at most 15 min.
func TestLockForDoublesToItsCap(t *testing.T) {
	for failures, want := range map[int]time.Duration{
		1: 0, 4: 0, 5: 10 * time.Second, 6: 20 * time.Second, 7: 40 * time.Second,
		11: 640 * time.Second, 12: 15 * time.Minute, 100: 15 * time.Minute, 1 << 20: 15 * time.Minute,
	} {
		if got := lockFor(failures); got != want {
			t.Errorf("lockFor(%d) = %s, want %s", failures, got, want)
		}
	}
}

// Attempts at once for one account are counted before they are judged:
// from however many addresses, no more than lockAfter are judged before
// the lock.
func TestConcurrentWrongPasswordsAreCountedBeforeJudged(t *testing.T) {
	srv, _ := authServer(t, false)
	var wg sync.WaitGroup
	codes := make(chan int, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := do(t, srv, signIn("bob", "wrong password", from(fmt.Sprintf("203.0.113.%d", i+1))))
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	judged := 0
	for c := range codes {
		if c == 401 {
			judged++
		}
	}
	if judged > lockAfter {
		t.Fatalf("%d of 20 concurrent attempts were judged, want at most %d", judged, lockAfter)
	}
	if resp, _ := do(t, srv, signIn("alice", "right password", from("203.0.113.1"))); resp.StatusCode != 200 {
		t.Fatalf("another account after bob's lock: %d", resp.StatusCode)
	}
}

// Spraying one password over many accounts from one address meets the
// address's ceiling; another address is unaffected.
func TestSprayingFromOneAddressMeetsItsCeiling(t *testing.T) {
	srv, _ := authServer(t, false)
	const addr = "198.51.100.60"
	for i := range signInAddrBurst {
		if resp, _ := do(t, srv, signIn(fmt.Sprintf("user%d", i), "Summer2026!", from(addr))); resp.StatusCode != 401 {
			t.Fatalf("attempt %d: %d", i+1, resp.StatusCode)
		}
	}
	resp, m := do(t, srv, signIn("alice", "right password", from(addr)))
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.HasSuffix(fmt.Sprint(m["type"]), "/too-many-failures") {
		t.Fatalf("past the ceiling: %d %v", resp.StatusCode, m)
	}
	if resp, _ := do(t, srv, signIn("alice", "right password", from("198.51.100.61"))); resp.StatusCode != 200 {
		t.Fatalf("another address: %d", resp.StatusCode)
	}
}

// Sign-ins that succeed cost nothing: an owner signing in again and again
// from one address (a shared proxy, many devices) is never refused. (A
// rate.Reservation cancelled after its time gives nothing back, so before
// the throttle kept its own buckets the 6th success here was 429.)
func TestSuccessfulSignInsCostNothing(t *testing.T) {
	srv, _ := authServer(t, false)
	for i := range signInAddrBurst + 10 {
		if resp, _ := do(t, srv, signIn("alice", "right password", from("198.51.100.70"))); resp.StatusCode != 200 {
			t.Fatalf("sign-in %d: %d", i+1, resp.StatusCode)
		}
	}
}

func TestSessionsExpireAndCanBeRevoked(t *testing.T) {
	e := newAuthEnv(t, false)
	srv, acc := e.srv, e.acc
	resp, _ := do(t, srv, signIn("alice", "right password", nil))
	first := cookieOf(resp)
	resp, _ = do(t, srv, signIn("alice", "right password", nil))
	second := cookieOf(resp)
	_, m := do(t, srv, call{"GET", "/api/sessions", "", withCookie(second)})
	list := m["sessions"].([]any)
	if len(list) != 2 {
		t.Fatalf("sessions %v", m)
	}
	var firstID float64
	for _, s := range list {
		if s := s.(map[string]any); s["current"] != true {
			firstID = s["id"].(float64)
		}
	}
	if resp, _ := do(t, srv, call{"DELETE", fmt.Sprintf("/api/sessions/%d", int(firstID)), "", withCookie(second, "Origin", "https://evil.example")}); resp.StatusCode != 403 {
		t.Fatalf("a cross-site revoke: %d", resp.StatusCode)
	}
	if resp, _ := do(t, srv, call{"DELETE", fmt.Sprintf("/api/sessions/%d", int(firstID)), "", withCookie(second, "Content-Type", "application/json")}); resp.StatusCode != 200 {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if resp, _ := do(t, srv, call{"GET", "/api/me", "", withCookie(first)}); resp.StatusCode != 401 {
		t.Fatalf("a revoked session: %d", resp.StatusCode)
	}
	if resp, _ := do(t, srv, call{"DELETE", "/api/sessions/999", "", withCookie(second, "Content-Type", "application/json")}); resp.StatusCode != 404 {
		t.Fatalf("revoke an unknown session: %d", resp.StatusCode)
	}
	acc.mu.Lock()
	s := acc.sessions[second.Value]
	s.expires = time.Now().Add(-time.Second)
	acc.sessions[second.Value] = s
	acc.mu.Unlock()
	e.clock.Add(authEnvTTL) // an expiry changed in Postgres behind the manager's back counts after the TTL
	if resp, _ := do(t, srv, call{"GET", "/api/me", "", withCookie(second)}); resp.StatusCode != 401 {
		t.Fatalf("an expired session: %d", resp.StatusCode)
	}
}

func TestSignOutEndsTheSession(t *testing.T) {
	srv, _ := authServer(t, false)
	resp, _ := do(t, srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)
	if resp, _ := do(t, srv, call{"POST", "/auth/sign-out", "", withCookie(c, "Origin", "https://evil.example", "Content-Type", "application/json")}); resp.StatusCode != 403 {
		t.Fatalf("a cross-site sign-out: %d", resp.StatusCode)
	}
	resp, _ = do(t, srv, call{"POST", "/auth/sign-out", "", withCookie(c, "Content-Type", "application/json")})
	if out := cookieOf(resp); resp.StatusCode != 204 || out == nil || out.MaxAge >= 0 {
		t.Fatalf("sign-out: %d %+v", resp.StatusCode, out)
	}
	if resp, _ := do(t, srv, call{"GET", "/api/me", "", withCookie(c)}); resp.StatusCode != 401 {
		t.Fatalf("after sign-out: %d", resp.StatusCode)
	}
}

// An API token is shown once, listed without its value, works as a
// bearer token and stops working when revoked.
func TestAPITokensShownOnce(t *testing.T) {
	srv, _ := authServer(t, false)
	resp, _ := do(t, srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)
	if resp, _ := do(t, srv, call{"POST", "/api/tokens", `{"name":"laptop"}`, withCookie(c, "Origin", "https://evil.example")}); resp.StatusCode != 403 {
		t.Fatalf("a cross-site token: %d", resp.StatusCode)
	}
	resp, m := do(t, srv, call{"POST", "/api/tokens", `{"name":"laptop"}`, withCookie(c)})
	token, _ := m["token"].(string)
	if resp.StatusCode != 201 || token == "" || m["name"] != "laptop" {
		t.Fatalf("create: %d %v", resp.StatusCode, m)
	}
	_, list := do(t, srv, call{"GET", "/api/tokens", "", withCookie(c)})
	raw, _ := json.Marshal(list)
	if strings.Contains(string(raw), token) || !strings.Contains(string(raw), "laptop") {
		t.Fatalf("the list shows the token: %s", raw)
	}
	bearer := map[string]string{"Authorization": "Bearer " + token}
	if resp, m := do(t, srv, call{"GET", "/api/me", "", bearer}); resp.StatusCode != 200 || m["user"] != "alice" {
		t.Fatalf("bearer: %d %v", resp.StatusCode, m)
	}
	id := int(m["id"].(float64))
	if resp, _ := do(t, srv, call{"DELETE", fmt.Sprintf("/api/tokens/%d", id), "", bearer}); resp.StatusCode != 200 {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	if resp, _ := do(t, srv, call{"GET", "/api/me", "", bearer}); resp.StatusCode != 401 {
		t.Fatalf("a revoked token: %d", resp.StatusCode)
	}
	if resp, _ := do(t, srv, call{"POST", "/api/tokens", `{"name":""}`, withCookie(c)}); resp.StatusCode != 400 {
		t.Fatalf("no name: %d", resp.StatusCode)
	}
}

func TestSignUpNeedsAnInviteUnlessOpen(t *testing.T) {
	srv, acc := authServer(t, false)
	up := func(body string) (*http.Response, map[string]any) {
		return do(t, srv, call{"POST", "/auth/sign-up", body, nil})
	}
	if resp, _ := up(`{"user":"carol","password":"long enough"}`); resp.StatusCode != 403 {
		t.Fatalf("closed sign-up: %d", resp.StatusCode)
	}
	acc.invites["code-1"] = "carol"
	if resp, _ := up(`{"user":"dave","password":"long enough","invite":"code-1"}`); resp.StatusCode != 403 {
		t.Fatalf("another user's invite: %d", resp.StatusCode)
	}
	if resp, _ := up(`{"user":"carol","password":"short","invite":"code-1"}`); resp.StatusCode != 400 {
		t.Fatalf("a short password: %d", resp.StatusCode)
	}
	if resp, _ := up(`{"user":"../x","password":"long enough","invite":"code-1"}`); resp.StatusCode != 400 {
		t.Fatalf("a bad user name: %d", resp.StatusCode)
	}
	resp, m := up(`{"user":"carol","password":"long enough","invite":"code-1"}`)
	if resp.StatusCode != 200 || m["user"] != "carol" || cookieOf(resp) == nil {
		t.Fatalf("invited sign-up: %d %v", resp.StatusCode, m)
	}
	if resp, _ := up(`{"user":"carol","password":"long enough","invite":"code-1"}`); resp.StatusCode != 403 {
		t.Fatalf("an invite used twice: %d", resp.StatusCode)
	}
	if resp, _ := do(t, srv, signIn("carol", "long enough", nil)); resp.StatusCode != 200 {
		t.Fatalf("sign in after sign-up: %d", resp.StatusCode)
	}

	open, _ := authServer(t, true)
	if resp, _ := do(t, open, call{"POST", "/auth/sign-up", `{"user":"erin","password":"long enough"}`, nil}); resp.StatusCode != 200 {
		t.Fatalf("open sign-up: %d", resp.StatusCode)
	}
	if resp, _ := do(t, open, call{"POST", "/auth/sign-up", `{"user":"alice","password":"long enough"}`, nil}); resp.StatusCode != 409 {
		t.Fatalf("open sign-up of an existing user: %d", resp.StatusCode)
	}
}

type fakeOwners struct {
	mu  sync.Mutex
	url map[string]string
}

func (f *fakeOwners) Activity(_ context.Context, user string, _ int) (registry.Activity, error) {
	return registry.Activity{Events: []registry.AuditEvent{{ID: 1, Kind: "sandbox.paused", At: time.Now()}}}, nil
}
func (f *fakeOwners) Sandbox(_ context.Context, user string) (registry.Sandbox, error) {
	return registry.Sandbox{}, registry.ErrNotFound
}
func (f *fakeOwners) NotifyURL(_ context.Context, user string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.url[user], nil
}
func (f *fakeOwners) SetNotifyURL(_ context.Context, user, u string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.url[user] = u
	return nil
}

// The owner's settings: a notification URL that leads inward is refused
// when it is saved (tried: loopback, a private address, another scheme),
// a public one is kept; activity and the sandbox state are the owner's only.
func TestOwnerSettings(t *testing.T) {
	acc := newFakeAccounts()
	h, _ := account.Hash("right password", cheap)
	acc.hashes["alice"] = h
	owners := &fakeOwners{url: map[string]string{}}
	res := &fakeResolver{}
	s := &Server{EdgeDeps: EdgeDeps{Auth: acc, Resolver: res}, OwnerDeps: OwnerDeps{Accounts: acc, Owners: owners, HashParams: cheap, URLCheck: outbound.NewGuard(outbound.Config{})}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, _ := do(t, srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)
	for _, u := range []string{"http://127.0.0.1:9/x", "http://10.1.2.3/x", "file:///etc/passwd"} {
		if resp, m := do(t, srv, call{"PUT", "/api/notify", fmt.Sprintf(`{"url":%q}`, u), withCookie(c)}); resp.StatusCode != 400 {
			t.Fatalf("notify URL %s: %d %v", u, resp.StatusCode, m)
		}
	}
	if resp, _ := do(t, srv, call{"PUT", "/api/notify", `{"url":"https://9.9.9.9/topic"}`, withCookie(c, "Origin", "https://evil.example")}); resp.StatusCode != 403 {
		t.Fatalf("a cross-site settings change: %d", resp.StatusCode)
	}
	if owners.url["alice"] != "" {
		t.Fatalf("a refused URL was saved: %q", owners.url["alice"])
	}
	if resp, _ := do(t, srv, call{"PUT", "/api/notify", `{"url":"https://9.9.9.9/topic"}`, withCookie(c)}); resp.StatusCode != 200 || owners.url["alice"] != "https://9.9.9.9/topic" {
		t.Fatalf("a public URL: %d %q", resp.StatusCode, owners.url["alice"])
	}
	if _, m := do(t, srv, call{"GET", "/api/sandbox", "", withCookie(c)}); m["state"] != "none" {
		t.Fatalf("sandbox %v", m)
	}
	if _, m := do(t, srv, call{"GET", "/api/activity", "", withCookie(c)}); len(m["events"].([]any)) != 1 {
		t.Fatalf("activity %v", m)
	}
	if resp, _ := do(t, srv, call{"POST", "/api/sandbox/resume", "", withCookie(c, "Content-Type", "application/json")}); resp.StatusCode != 200 || len(res.calls) != 1 || res.calls[0] != "alice" {
		t.Fatalf("resume: %d %v", resp.StatusCode, res.calls)
	}
	if resp, _ := do(t, srv, call{"GET", "/api/activity", "", nil}); resp.StatusCode != 401 {
		t.Fatalf("activity without credentials: %d", resp.StatusCode)
	}
}
