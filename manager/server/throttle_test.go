package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/affido/affido/manager/account"
)

// from is the header Caddy sets to the client's address.
func from(ip string) map[string]string { return map[string]string{"X-Forwarded-For": ip} }

// The attack of issue 28: someone behind the same address (a shared proxy,
// Docker's port proxy) sends bad tokens for bob's sandbox. The guesses are
// throttled; bob, whose token is in use, and carol, whose token this
// manager has never seen, are not.
func TestValidTokenWorksAfterGuessesFromItsAddress(t *testing.T) {
	lookups := 0
	auth := countingAuth{fakeAuth{tokens: map[string]string{"t-bob": "bob", "t-carol": "carol"}}, &lookups}
	// No credential cache: the answer must not depend on a cached success.
	s := &Server{EdgeDeps: EdgeDeps{Auth: auth, Resolver: instantResolver{}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := s.Handler()
	const addr = "192.0.2.1"
	if code := serve(h, "bob", "Authorization", "Bearer t-bob", addr); code != 200 {
		t.Fatalf("bob before the guesses: %d", code)
	}
	codes := make([]int, 25)
	for i := range codes {
		codes[i] = serve(h, "bob", "Authorization", fmt.Sprintf("Bearer guess-%d", i), addr)
	}
	if codes[0] != 401 || codes[len(codes)-1] != 429 {
		t.Fatalf("the guesses were not throttled: %v", codes)
	}
	before := lookups
	if code := serve(h, "bob", "Authorization", "Bearer guess-x", addr); code != 429 || lookups != before {
		t.Fatalf("one more guess: %d after %d lookups, want 429 with none", code, lookups-before)
	}
	if code := serve(h, "bob", "Authorization", "Bearer t-bob", addr); code != 200 {
		t.Fatalf("bob's valid token from the guessing address: %d, want 200", code)
	}
	if code := serve(h, "carol", "Authorization", "Bearer t-carol", addr); code != 200 {
		t.Fatalf("carol's never-seen token from the guessing address: %d, want 200", code)
	}
}

// A browser with a stale cookie keeps retrying it: that cookie is refused
// on its own, and its owner, signing in again behind the same address,
// gets in with the new session.
func TestStaleCookieIsRefusedAlone(t *testing.T) {
	s, auth := clockedServer(0)
	auth.sessions["fresh"] = fakeSession{user: "alice", expires: auth.clock.Now().Add(time.Hour)}
	h := s.Handler()
	const addr = "192.0.2.7"
	var codes []int
	for range 40 {
		codes = append(codes, serve(h, "alice", "Cookie", SessionCookie+"=stale", addr))
	}
	if codes[0] != 401 || codes[len(codes)-1] != 429 {
		t.Fatalf("the stale cookie was not throttled: %v", codes)
	}
	if code := serve(h, "alice", "Cookie", SessionCookie+"=fresh", addr); code != 200 {
		t.Fatalf("alice's new session from the same address: %d, want 200", code)
	}
}

// aliceAndBob is an authEnv where bob, too, has a password.
func aliceAndBob(t *testing.T) *authEnv {
	e := newAuthEnv(t, false)
	e.acc.hashes["bob"], _ = account.Hash("bob's password", cheap)
	return e
}

// The second attack of issue 28: wrong passwords for alice from one
// address. Alice's account is locked (from everywhere, said clearly);
// bob, behind the same address, still signs in.
func TestWrongPasswordsLockOneAccountNotTheAddress(t *testing.T) {
	e := aliceAndBob(t)
	const addr = "198.51.100.1"
	for i := range 5 {
		if resp, _ := do(t, e.srv, signIn("alice", "wrong password", from(addr))); resp.StatusCode != 401 {
			t.Fatalf("wrong password %d: %d", i+1, resp.StatusCode)
		}
	}
	if resp, m := do(t, e.srv, signIn("bob", "bob's password", from(addr))); resp.StatusCode != 200 || cookieOf(resp) == nil {
		t.Fatalf("bob's right password from the same address: %d %v", resp.StatusCode, m)
	}
	for _, a := range []string{addr, "203.0.113.9"} {
		resp, m := do(t, e.srv, signIn("alice", "right password", from(a)))
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || cookieOf(resp) != nil ||
			!strings.HasSuffix(fmt.Sprint(m["type"]), "/account-locked") || resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Fatalf("alice's right password from %s while her account is locked: %d %v %v", a, resp.StatusCode, resp.Header, m)
		}
	}
}

// Wrong passwords for several accounts, and bad tokens, from one address
// do not refuse another account's right password there.
func TestFailuresFromAnAddressDoNotRefuseAnotherAccount(t *testing.T) {
	e := aliceAndBob(t)
	const addr = "198.51.100.2"
	for i := range 20 {
		do(t, e.srv, signIn(fmt.Sprintf("user%d", i%5), "wrong password", from(addr)))
	}
	for i := range 25 {
		serve(e.s.Handler(), "alice", "Authorization", fmt.Sprintf("Bearer guess-%d", i), addr)
	}
	if resp, m := do(t, e.srv, signIn("bob", "bob's password", from(addr))); resp.StatusCode != 200 {
		t.Fatalf("bob after 20 wrong passwords for 5 other accounts and 25 bad tokens from his address: %d %v", resp.StatusCode, m)
	}
}

// The web pages look sessions up through the same throttles: a flood of
// made-up cookies on /app/ from one address costs at most the burst in
// lookups, and a signed-in owner behind it still gets the page.
func TestPageCookieGuessesAreThrottled(t *testing.T) {
	e := newAuthEnv(t, false)
	const addr = "192.0.2.30"
	resp, _ := do(t, e.srv, signIn("alice", "right password", from(addr)))
	c := cookieOf(resp)
	page := func(cookie string) *http.Response {
		req, _ := http.NewRequest("GET", e.srv.URL+"/app/", nil)
		req.Header.Set("X-Forwarded-For", addr)
		req.Header.Set("Cookie", SessionCookie+"="+cookie)
		resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	before := e.acc.lookups.Load()
	for i := range 200 {
		if resp := page(fmt.Sprintf("guess-%d", i)); resp.StatusCode != 302 {
			t.Fatalf("guess %d: %d", i, resp.StatusCode)
		}
	}
	if n := e.acc.lookups.Load() - before; n > userFailureBurst {
		t.Fatalf("%d lookups for 200 made-up cookies, want at most %d", n, userFailureBurst)
	}
	if resp := page(c.Value); resp.StatusCode != 200 {
		t.Fatalf("the owner's page from the same address: %d", resp.StatusCode)
	}
}

// A known credential that is revoked is forgotten at its first refusal:
// from then on it is a guess like any other, throttled without lookups.
func TestRevokedKnownTokenBecomesAGuess(t *testing.T) {
	s, auth := clockedServer(0)
	auth.tokens["t"] = "alice"
	h := s.Handler()
	const addr = "192.0.2.40"
	if code := serve(h, "alice", "Authorization", "Bearer t", addr); code != 200 {
		t.Fatalf("before the revoke: %d", code)
	}
	auth.deleteToken("t")
	var codes []int
	for range credFailureBurst + 2 {
		codes = append(codes, serve(h, "alice", "Authorization", "Bearer t", addr))
	}
	before := auth.lookups.Load()
	if code := serve(h, "alice", "Authorization", "Bearer t", addr); code != 429 || auth.lookups.Load() != before {
		t.Fatalf("the revoked token, after %v: %d, %d lookups", codes, code, auth.lookups.Load()-before)
	}
}

// The known credentials stay within their bound, dropping what succeeded
// longest ago.
func TestKnownCredentialsAreBounded(t *testing.T) {
	k := newKnownCredentials()
	clock := newTestClock()
	k.now = clock.Now
	for i := range maxKnown + 10 {
		k.add(keyOf(apiTokenCred, fmt.Sprint(i)))
		clock.Add(time.Millisecond)
	}
	if len(k.m) != maxKnown {
		t.Fatalf("%d known, bound %d", len(k.m), maxKnown)
	}
	if k.has(keyOf(apiTokenCred, "0")) || !k.has(keyOf(apiTokenCred, fmt.Sprint(maxKnown+9))) {
		t.Fatal("dropped the wrong credential")
	}
	clock.Add(knownFor)
	if k.has(keyOf(apiTokenCred, fmt.Sprint(maxKnown+9))) {
		t.Fatal("known past knownFor")
	}
}

// A success gives its counts back: an owner signing in and using fresh
// credentials all day from one address never meets the throttles.
func TestSuccessesCostNothing(t *testing.T) {
	auth := fakeAuth{tokens: map[string]string{}}
	s := &Server{EdgeDeps: EdgeDeps{Auth: auth, Resolver: instantResolver{}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := s.Handler()
	for i := range addrFailureBurst * 3 {
		tok := fmt.Sprintf("t-%d", i)
		auth.tokens[tok] = "bob"
		if code := serve(h, "bob", "Authorization", "Bearer "+tok, "192.0.2.50"); code != 200 {
			t.Fatalf("fresh token %d: %d", i, code)
		}
	}
}

// slowAuth holds every API token lookup until released, counts them and
// says when each begins.
type slowAuth struct {
	fakeAuth
	release chan struct{}
	n       *atomic.Int32
	began   chan struct{}
}

func (a slowAuth) UserForAPIToken(ctx context.Context, tok string) (string, error) {
	a.n.Add(1)
	a.began <- struct{}{}
	<-a.release
	return a.fakeAuth.UserForAPIToken(ctx, tok)
}

// A new token's first requests arrive together (a phone opening the app,
// the e2e burst of 50): more than the per-credential burst are in flight
// before the first lookup answers. They wait for that answer instead of
// being refused as failures; a bad token's burst is still cut off after
// credFailureBurst lookups.
func TestABurstOfANewTokenWaitsForItsLookup(t *testing.T) {
	for _, c := range []struct {
		name, tok string
		want      int
	}{{"a good token", "t-new", 200}, {"a bad token", "t-guess", 0}} {
		t.Run(c.name, func(t *testing.T) {
			var n atomic.Int32
			const burst = 50
			auth := slowAuth{fakeAuth{tokens: map[string]string{"t-new": "alice"}}, make(chan struct{}), &n, make(chan struct{}, burst)}
			s := &Server{EdgeDeps: EdgeDeps{Auth: auth, Resolver: sameEndpoint{}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			h := s.Handler()
			codes := make(chan int, burst)
			for range burst {
				go func() {
					req := httptest.NewRequest("GET", "/v1/resolve?user=alice&path=/health", nil)
					req.Header.Set("X-Forwarded-For", "192.0.2.9")
					req.Header.Set("Authorization", "Bearer "+c.tok)
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					codes <- w.Code
				}()
			}
			timeout := time.After(10 * time.Second)
			for range credFailureBurst { // the lookups the credential's budget lets start
				select {
				case <-auth.began:
				case <-timeout:
					t.Fatalf("%d lookups in flight, want %d", n.Load(), credFailureBurst)
				}
			}
			close(auth.release)
			got := map[int]int{}
			for range burst {
				got[<-codes]++
			}
			if c.want == 200 && got[200] != burst {
				t.Fatalf("codes %v, want all 200", got)
			}
			if c.want == 0 && (got[200] != 0 || got[429] == 0 || n.Load() > credFailureBurst) {
				t.Fatalf("a bad token's burst: codes %v, %d lookups (at most %d)", got, n.Load(), credFailureBurst)
			}
		})
	}
}

// sameEndpoint resolves every user to one address, from any goroutine.
type sameEndpoint struct{}

func (sameEndpoint) Touch(string, bool) {}

func (sameEndpoint) Resolve(context.Context, string, bool) (netip.AddrPort, error) {
	return netip.MustParseAddrPort("10.213.0.2:8080"), nil
}
