package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/internal/scripted"
	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/spend"
)

type fakeAuth struct {
	sessions, tokens map[string]string
	err              error
}

func (f fakeAuth) UserForSession(_ context.Context, tok string) (string, time.Time, error) {
	if f.err != nil {
		return "", time.Time{}, f.err
	}
	if u, ok := f.sessions[tok]; ok {
		return u, time.Now().Add(time.Hour), nil
	}
	return "", time.Time{}, registry.ErrUnauthenticated
}

func (f fakeAuth) UserForAPIToken(_ context.Context, tok string) (string, error) {
	if f.err != nil {
		return "", f.err
	}
	if u, ok := f.tokens[tok]; ok {
		return u, nil
	}
	return "", registry.ErrUnauthenticated
}

type fakeResolver struct {
	err   error
	calls []string
	act   []bool
}

func (f *fakeResolver) Touch(string, bool) {}

func (f *fakeResolver) Resolve(_ context.Context, user string, activating bool) (netip.AddrPort, error) {
	f.calls = append(f.calls, user)
	f.act = append(f.act, activating)
	if f.err != nil {
		return netip.AddrPort{}, f.err
	}
	return netip.MustParseAddrPort("10.213.0.2:8080"), nil
}

func TestResolveDecisions(t *testing.T) {
	auth := fakeAuth{sessions: map[string]string{"s-alice": "alice"}, tokens: map[string]string{"t-bob": "bob"}}
	tests := []struct {
		name       string
		query      string
		hdr        map[string]string
		auth       fakeAuth
		resolveErr error
		wantCode   int
		wantCalls  int
		wantRetry  bool
	}{
		{"session cookie of the owner", "user=alice&path=/health", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, auth, nil, 200, 1, false},
		{"bearer token of the owner", "user=bob&path=/prompt", map[string]string{"Authorization": "Bearer t-bob"}, auth, nil, 200, 1, false},
		{"no credentials", "user=alice", nil, auth, nil, 401, 0, false},
		{"unknown cookie", "user=alice", map[string]string{"Cookie": "better-auth.session_token=x"}, auth, nil, 401, 0, false},
		{"unknown bearer", "user=alice", map[string]string{"Authorization": "Bearer x"}, auth, nil, 401, 0, false},
		{"another user's cookie", "user=bob", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, auth, nil, 403, 0, false},
		{"another user's token", "user=alice", map[string]string{"Authorization": "Bearer t-bob"}, auth, nil, 403, 0, false},
		{"bad user id", "user=a.b", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, auth, nil, 400, 0, false},
		{"dot dot", "user=..", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, auth, nil, 400, 0, false},
		{"no user", "", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, auth, nil, 400, 0, false},
		{"registry down", "user=alice", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, fakeAuth{err: errors.New("dial tcp: refused")}, nil, 503, 0, true},
		{"over capacity", "user=alice", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, auth, lifecycle.ErrCapacity, 429, 1, true},
		{"still queued past the budget", "user=alice", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, auth, &lifecycle.QueuedError{RetryAfter: 3 * time.Second, Position: 7}, 503, 1, true},
		{"provisioning failed", "user=alice", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, auth, errors.New("docker: boom"), 503, 1, true},
		// Cross-site writes with the session cookie (forward_auth passes the
		// client's headers and the original method and host).
		{"cookie POST from another site's form", "user=alice&path=/prompt", cookieWrite("POST", map[string]string{"Origin": "https://evil.example", "Content-Type": "text/plain"}), auth, nil, 403, 0, false},
		{"cookie POST cross-site by Sec-Fetch-Site, JSON", "user=alice&path=/prompt", cookieWrite("POST", map[string]string{"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}), auth, nil, 403, 0, false},
		{"cookie POST from a sandboxed frame (Origin null)", "user=alice&path=/prompt", cookieWrite("POST", map[string]string{"Origin": "null", "Content-Type": "application/json"}), auth, nil, 403, 0, false},
		{"cookie POST /ingest from another site", "user=alice&path=/ingest", cookieWrite("POST", map[string]string{"Origin": "https://evil.example", "Content-Type": "text/plain"}), auth, nil, 403, 0, false},
		{"cookie DELETE same-site subdomain", "user=alice&path=/skills/x", cookieWrite("DELETE", map[string]string{"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"}), auth, nil, 403, 0, false},
		{"cookie POST without JSON (a form needs no preflight)", "user=alice&path=/prompt", cookieWrite("POST", map[string]string{"Content-Type": "text/plain"}), auth, nil, 403, 0, false},
		{"cookie POST same origin, JSON", "user=alice&path=/prompt", cookieWrite("POST", map[string]string{"Origin": "http://127.0.0.1:18080", "Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"}), auth, nil, 200, 1, false},
		{"cookie POST by curl (no Origin), JSON with charset", "user=alice&path=/prompt", cookieWrite("POST", map[string]string{"Content-Type": "application/json; charset=utf-8"}), auth, nil, 200, 1, false},
		{"cookie PUT upload same origin, any type", "user=alice&path=/uploads/a.bin", cookieWrite("PUT", map[string]string{"Origin": "http://127.0.0.1:18080", "Content-Type": "application/octet-stream"}), auth, nil, 200, 1, false},
		{"cookie GET from another site (safe method)", "user=alice&path=/inspect", cookieWrite("GET", map[string]string{"Origin": "https://evil.example"}), auth, nil, 200, 1, false},
		{"bearer POST is not a cookie write", "user=bob&path=/prompt", map[string]string{"Authorization": "Bearer t-bob", "X-Forwarded-Method": "POST", "Origin": "https://evil.example", "Content-Type": "text/plain"}, auth, nil, 200, 1, false},
		{"X-Forwarded-Uri is not where the user comes from", "user=alice", map[string]string{"Cookie": "better-auth.session_token=s-alice", "X-Forwarded-Uri": "/u/bob/x"}, auth, nil, 200, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &fakeResolver{err: tt.resolveErr}
			s := &Server{EdgeDeps: EdgeDeps{Auth: tt.auth, Resolver: res}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			req := httptest.NewRequest("GET", "/v1/resolve?"+tt.query, nil)
			req.Header.Set(EndpointHeader, "10.213.0.99:8080") // a client's forged header, cloned by forward_auth
			for k, v := range tt.hdr {
				req.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, req)
			if w.Code != tt.wantCode {
				t.Fatalf("status %d, want %d (%s)", w.Code, tt.wantCode, w.Body)
			}
			if len(res.calls) != tt.wantCalls {
				t.Fatalf("resolver called %d times, want %d", len(res.calls), tt.wantCalls)
			}
			ep := w.Header().Get(EndpointHeader)
			if tt.wantCode == 200 && ep != "10.213.0.2:8080" {
				t.Fatalf("endpoint %q", ep)
			}
			if tt.wantCode != 200 && ep != "" {
				t.Fatalf("error response carries endpoint %q", ep)
			}
			if got := w.Header().Get("Retry-After") != ""; got != tt.wantRetry {
				t.Fatalf("Retry-After present = %v, want %v", got, tt.wantRetry)
			}
			if tt.wantCode != 200 && w.Header().Get("Content-Type") != "application/problem+json" {
				t.Fatalf("error body is not a problem: %s", w.Header().Get("Content-Type"))
			}
		})
	}
}

// waitingResolver waits for a bring-up that does not come until its
// request gives up.
type waitingResolver struct{ waiting chan struct{} }

func (waitingResolver) Touch(string, bool) {}

func (f waitingResolver) Resolve(ctx context.Context, _ string, _ bool) (netip.AddrPort, error) {
	close(f.waiting)
	<-ctx.Done()
	return netip.AddrPort{}, ctx.Err()
}

// A resolve still waiting when the manager hands off answers at once with
// a 503 Caddy asks again for (RetryHeader), without an endpoint; before
// the handoff, a resolve that fails otherwise carries no such mark.
func TestResolveHandsOffWhenStopping(t *testing.T) {
	auth := fakeAuth{tokens: map[string]string{"t-bob": "bob"}}
	handoff, handOff := context.WithCancel(context.Background())
	res := waitingResolver{make(chan struct{})}
	s := &Server{EdgeDeps: EdgeDeps{Auth: auth, Resolver: res, Handoff: handoff}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	req := httptest.NewRequest("GET", "/v1/resolve?user=bob&path=/health", nil)
	req.Header.Set("Authorization", "Bearer t-bob")
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { defer close(done); s.Handler().ServeHTTP(w, req) }()
	<-res.waiting
	handOff()
	<-done
	if w.Code != http.StatusServiceUnavailable || w.Header().Get(RetryHeader) != "1" || w.Header().Get("Retry-After") == "" || w.Header().Get(EndpointHeader) != "" {
		t.Fatalf("handed-off resolve: %d %v %s", w.Code, w.Header(), w.Body)
	}

	s.Handoff = context.Background()
	s.Resolver = &fakeResolver{err: errors.New("engine down")}
	req = httptest.NewRequest("GET", "/v1/resolve?user=bob&path=/health", nil)
	req.Header.Set("Authorization", "Bearer t-bob")
	w = httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get(RetryHeader) != "" {
		t.Fatalf("a failed bring-up, not stopping: %d %v", w.Code, w.Header())
	}
}

// cookieWrite is alice's session cookie on a request Caddy forwarded with
// method m to the host 127.0.0.1:18080, plus hdr.
func cookieWrite(m string, hdr map[string]string) map[string]string {
	out := map[string]string{"Cookie": "better-auth.session_token=s-alice", "X-Forwarded-Method": m, "X-Forwarded-Host": "127.0.0.1:18080"}
	for k, v := range hdr {
		out[k] = v
	}
	return out
}

func TestResolvePassesActivity(t *testing.T) {
	res := &fakeResolver{}
	s := &Server{EdgeDeps: EdgeDeps{Auth: fakeAuth{tokens: map[string]string{"t": "u"}}, Resolver: res}, Log: slog.Default()}
	for _, path := range []string{"/health", "/prompt"} {
		req := httptest.NewRequest("GET", "/v1/resolve?user=u&path="+path, nil)
		req.Header.Set("Authorization", "Bearer t")
		s.Handler().ServeHTTP(httptest.NewRecorder(), req)
	}
	if len(res.act) != 2 || res.act[0] || !res.act[1] {
		t.Fatalf("activating flags = %v, want [false true]", res.act)
	}
}

func TestGatewayRejectsWithoutSandboxToken(t *testing.T) {
	s := &Server{Log: slog.Default()}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/v1/gateway/whoami", nil))
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("status %d", w.Code)
	}
}

// countingAuth counts credential lookups.
type countingAuth struct {
	fakeAuth
	n *int
}

func (c countingAuth) UserForAPIToken(ctx context.Context, tok string) (string, error) {
	*c.n++
	return c.fakeAuth.UserForAPIToken(ctx, tok)
}

// Guessing tokens for one user from one address: after the burst of
// failures every guess from it for that user is 429 with Retry-After and
// costs no lookup; spraying guesses over many users meets the address's
// ceiling; another address is unaffected throughout.
func TestGuessesAreThrottledWithoutLookups(t *testing.T) {
	lookups := 0
	auth := countingAuth{fakeAuth{tokens: map[string]string{"t-bob": "bob", "t-carol": "carol"}}, &lookups}
	s := &Server{EdgeDeps: EdgeDeps{Auth: auth, Resolver: &fakeResolver{}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := s.Handler()
	call := func(from, user, tok string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/v1/resolve?user="+user+"&path=/health", nil)
		req.Header.Set("X-Forwarded-For", from)
		req.Header.Set("Authorization", "Bearer "+tok)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	refused := func(w *httptest.ResponseRecorder) bool {
		return w.Code == 429 && w.Header().Get("Retry-After") != "" && w.Header().Get(EndpointHeader) == ""
	}
	for i := range userFailureBurst {
		if w := call("192.0.2.1", "bob", fmt.Sprintf("guess-%d", i)); w.Code != 401 {
			t.Fatalf("guess %d: %d", i, w.Code)
		}
	}
	before := lookups
	if w := call("192.0.2.1", "bob", "guess-x"); !refused(w) || lookups != before {
		t.Fatalf("after %d failures: %d %v, %d lookups", userFailureBurst, w.Code, w.Header(), lookups-before)
	}
	if w := call("192.0.2.2", "bob", "t-bob"); w.Code != 200 {
		t.Fatalf("another address: %d", w.Code)
	}
	// Spraying: one guess per user, past the address's ceiling.
	for i := userFailureBurst; i < addrFailureBurst; i++ {
		if w := call("192.0.2.1", fmt.Sprintf("user%d", i), fmt.Sprintf("spray-%d", i)); w.Code != 401 {
			t.Fatalf("spray %d: %d", i, w.Code)
		}
	}
	before = lookups
	if w := call("192.0.2.1", "dave", "guess-y"); !refused(w) || lookups != before {
		t.Fatalf("past the address's ceiling: %d, %d lookups", w.Code, lookups-before)
	}
	if w := call("192.0.2.1", "carol", "t-carol"); w.Code != 429 {
		t.Fatalf("a token never seen here, from an address past its ceiling: %d (the documented trade-off)", w.Code)
	}
	if w := call("192.0.2.1", "bob", "t-bob"); w.Code != 200 {
		t.Fatalf("a token known here, from an address past its ceiling: %d", w.Code)
	}
}

type fullQueue struct{}

func (fullQueue) EnqueueNotification(context.Context, string, registry.Notification, int) (bool, error) {
	return false, fmt.Errorf("enqueue: %w", registry.ErrQueueFull)
}

type okSandbox struct{}

func (okSandbox) SandboxForToken(context.Context, string) (registry.Sandbox, error) {
	return registry.Sandbox{UserID: "u", Endpoint: "10.213.0.2:8080"}, nil
}

// A sandbox cannot queue notifications without end: past the cap it gets
// 429 with Retry-After.
func TestNotificationQueueFullIs429(t *testing.T) {
	s := &Server{GatewayDeps: GatewayDeps{Gateway: okSandbox{}, Notifications: fullQueue{}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	req := httptest.NewRequest("POST", "/v1/gateway/notify", strings.NewReader(`{"key":"k","text":"hi"}`))
	req.Header.Set("Authorization", "Bearer sb")
	req.Header.Set(SourceIPHeader, "10.213.0.2")
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	if w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("full queue: %d %v %s", w.Code, w.Header(), w.Body)
	}
}

type fakeSpendOwner struct{ raised map[string]bool }

func (f *fakeSpendOwner) Spend(_ context.Context, user string, def spend.Limits) (registry.SpendReport, error) {
	return registry.SpendReport{Today: map[string]int64{"fake/echo": 7}, Month: map[string]int64{"fake/echo": 7},
		Daily: def.Daily, Monthly: def.Monthly, Raised: f.raised[user]}, nil
}

func (f *fakeSpendOwner) AllowAnotherDay(_ context.Context, user string) error {
	if f.raised[user] {
		return spend.ErrAlreadyRaised
	}
	f.raised[user] = true
	return nil
}

// The owner's spend routes: authenticated like /u/<id>/…, cookie writes
// only same-origin JSON, another day once.
func TestSpendRoutes(t *testing.T) {
	s := &Server{EdgeDeps: EdgeDeps{Auth: fakeAuth{sessions: map[string]string{"s-alice": "alice"}, tokens: map[string]string{"t-bob": "bob"}}},
		GatewayDeps: GatewayDeps{Provider: scripted.NewModel([]string{"fake/echo"}), SpendLimits: spend.Limits{Daily: 5e6, Monthly: 5e7},
			Prices: map[string]spend.Price{"fake/echo": {Input: 1.5, Output: 6}}},
		OwnerDeps: OwnerDeps{SpendOwner: &fakeSpendOwner{raised: map[string]bool{}}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	h := s.Handler()
	do := func(method, path string, hdr map[string]string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, nil)
		req.Host = "127.0.0.1:18080"
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w
	}
	if w := do("GET", "/api/spend", nil); w.Code != 401 {
		t.Fatalf("no credentials: %d", w.Code)
	}
	if w := do("GET", "/api/spend", map[string]string{"Authorization": "Bearer t-bob"}); w.Code != 200 || !strings.Contains(w.Body.String(), `"fake/echo":7`) ||
		!strings.Contains(w.Body.String(), `"prices":{"fake/echo":{"input_per_million":1.5,"output_per_million":6}}`) {
		t.Fatalf("bearer GET: %d %s", w.Code, w.Body)
	}
	cookie := "better-auth.session_token=s-alice"
	if w := do("POST", "/api/spend/another-day", map[string]string{"Cookie": cookie, "Origin": "https://evil.example", "Content-Type": "application/json"}); w.Code != 403 {
		t.Fatalf("cross-site cookie POST: %d", w.Code)
	}
	if w := do("POST", "/api/spend/another-day", map[string]string{"Cookie": cookie, "Content-Type": "text/plain"}); w.Code != 403 {
		t.Fatalf("cookie POST without JSON: %d", w.Code)
	}
	ok := map[string]string{"Cookie": cookie, "Origin": "http://127.0.0.1:18080", "Content-Type": "application/json"}
	if w := do("POST", "/api/spend/another-day", ok); w.Code != 200 {
		t.Fatalf("same-origin cookie POST: %d %s", w.Code, w.Body)
	}
	if w := do("POST", "/api/spend/another-day", ok); w.Code != 409 {
		t.Fatalf("another day twice: %d", w.Code)
	}
}

type recordingQueue struct{ got []registry.Notification }

func (q *recordingQueue) EnqueueNotification(_ context.Context, user string, n registry.Notification, _ int) (bool, error) {
	n.UserID = user
	q.got = append(q.got, n)
	return true, nil
}

// A sandbox says what its notification is about (kind, agent) for the
// push payload; it cannot pass one off as the manager's spend stop, nor
// name an unknown kind or a malformed agent.
func TestNotifyKindAndAgent(t *testing.T) {
	q := &recordingQueue{}
	s := &Server{GatewayDeps: GatewayDeps{Gateway: okSandbox{}, Notifications: q}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	post := func(body string) int {
		req := httptest.NewRequest("POST", "/v1/gateway/notify", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sb")
		req.Header.Set(SourceIPHeader, "10.213.0.2")
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w.Code
	}
	if code := post(`{"key":"k","text":"decide","kind":"approval","agent":"worker"}`); code != 202 {
		t.Fatalf("approval: %d", code)
	}
	if code := post(`{"key":"old","text":"from an agent before kinds"}`); code != 202 {
		t.Fatalf("no kind: %d", code)
	}
	for _, body := range []string{
		`{"key":"s","text":"Your agent stopped","kind":"spend"}`,
		`{"key":"u","text":"t","kind":"urgent"}`,
		`{"key":"a","text":"t","agent":"../etc"}`,
	} {
		if code := post(body); code != 400 {
			t.Fatalf("%s: %d", body, code)
		}
	}
	if len(q.got) != 2 || q.got[0] != (registry.Notification{UserID: "u", Key: "k", Text: "decide", Kind: "approval", Agent: "worker"}) || q.got[1].Kind != "" {
		t.Fatalf("queued %+v", q.got)
	}
}
