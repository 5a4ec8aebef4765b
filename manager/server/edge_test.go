package server

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/internal/edgeapi"
	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/edge"
)

const edgeKey = "0123456789abcdef0123456789abcdef"

func edgeServer(res Resolver) *Server {
	s := &Server{EdgeDeps: EdgeDeps{
		Auth:        fakeAuth{sessions: map[string]string{"s-alice": "alice"}, tokens: map[string]string{"t": "alice"}},
		Resolver:    res,
		Credentials: NewCredentialCache(time.Second),
		TokenUse:    NewTokenUse(&touches{}, nil),
		EdgeTTL:     5 * time.Second, ControlKey: edgeKey,
	}, Log: slog.Default()}
	s.Decisions = edge.New(s.TouchEdge)
	return s
}

// What Caddy may keep: a GET's 200, for at most EdgeTTL and never past
// the session's own expiry (an hour here); never a write's, whose site is
// checked on every request.
func TestResolveMarksWhatTheEdgeMayKeep(t *testing.T) {
	s := edgeServer(&fakeResolver{})
	for _, tc := range []struct {
		method, auth string
		keep         bool
	}{
		{"GET", "cookie", true}, {"HEAD", "bearer", true}, {"POST", "cookie", false}, {"PUT", "bearer", false},
	} {
		req := httptest.NewRequest("GET", "/v1/resolve?user=alice&path=/health", nil)
		req.Header.Set("X-Forwarded-Method", tc.method)
		if tc.auth == "cookie" {
			req.Header.Set("Cookie", SessionCookie+"=s-alice")
			req.Header.Set("Origin", "http://127.0.0.1:18080")
			req.Header.Set("X-Forwarded-Host", "127.0.0.1:18080")
			req.Header.Set("Content-Type", "application/json")
		} else {
			req.Header.Set("Authorization", "Bearer t")
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		ms, _ := strconv.Atoi(w.Header().Get(edgeapi.TTLHeader))
		if w.Code != 200 || (ms > 0) != tc.keep || ms > 5000 {
			t.Errorf("%s by %s: %d, keep for %q ms", tc.method, tc.auth, w.Code, w.Header().Get(edgeapi.TTLHeader))
		}
	}
}

// The poll route answers Caddy only, whose key a sandbox or a client does
// not hold; a malformed poll is refused whole, touches and all.
func TestEdgePollNeedsTheControlKey(t *testing.T) {
	res := &touchingResolver{}
	s := edgeServer(res)
	for _, tc := range []struct {
		name, key, body string
		want            int
	}{
		{"no key", "", `{"caddy":"c1"}`, 401},
		{"another key", strings.Repeat("f", 32), `{"caddy":"c1"}`, 401},
		{"not JSON", edgeKey, `caddy`, 400},
		{"no caddy", edgeKey, `{}`, 400},
		{"a bad user", edgeKey, `{"caddy":"c1","touched":[{"user":"../x"}]}`, 400},
		{"a bad token", edgeKey, `{"caddy":"c1","touched":[{"user":"bob","tokens":["zz"]}]}`, 400},
		{"a field of no poll", edgeKey, `{"caddy":"c1","forget":["bob"]}`, 400},
		{"a good one", edgeKey, `{"caddy":"c1","touched":[{"user":"bob","active":true}]}`, 200},
	} {
		req := httptest.NewRequest("POST", edgeapi.PollPath, strings.NewReader(tc.body))
		if tc.key != "" {
			req.Header.Set(sandboxapi.HeaderControlKey, tc.key)
		}
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		if w.Code != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, w.Code, w.Body, tc.want)
		}
		if tc.want == http.StatusOK {
			var a edgeapi.Answer
			if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || !a.All || a.LeaseMS <= 0 {
				t.Errorf("%s: answer %s", tc.name, w.Body)
			}
		}
	}
	if len(res.touched) != 1 || res.touched[0] != "bob" || !res.active[0] {
		t.Fatalf("touches recorded %v %v, want bob's alone", res.touched, res.active)
	}
}

type touchingResolver struct {
	fakeResolver
	touched []string
	active  []bool
}

func (r *touchingResolver) Touch(user string, activating bool) {
	r.touched = append(r.touched, user)
	r.active = append(r.active, activating)
}

// edgeRecorder records the users the edge is told to forget.
type edgeRecorder struct {
	mu     sync.Mutex
	forgot []string
}

func (e *edgeRecorder) Forget(user string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.forgot = append(e.forgot, user)
}

func (e *edgeRecorder) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.forgot...)
}

// A sign-out makes the edge forget its owner's decisions alone, and one
// with a cookie that names no session (anyone can send it, signed in or
// not) makes it forget nothing: it cannot flush every user's warm path.
func TestSignOutForgetsItsOwnerAtTheEdgeAlone(t *testing.T) {
	e := newAuthEnv(t, false)
	rec := &edgeRecorder{}
	e.s.Credentials.Edge = rec
	for range 3 {
		bogus := &http.Cookie{Name: SessionCookie, Value: "no-such-session"}
		if resp, _ := do(t, e.srv, call{"POST", "/auth/sign-out", "", withCookie(bogus, "Content-Type", "application/json")}); resp.StatusCode != 204 {
			t.Fatalf("a sign-out of nothing: %d", resp.StatusCode)
		}
	}
	if got := rec.all(); len(got) != 0 {
		t.Fatalf("sign-outs of no session made the edge forget %q", got)
	}
	resp, _ := do(t, e.srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)
	if resp, _ := do(t, e.srv, call{"POST", "/auth/sign-out", "", withCookie(c, "Content-Type", "application/json")}); resp.StatusCode != 204 {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	if got := rec.all(); len(got) != 1 || got[0] != "alice" {
		t.Fatalf("alice's sign-out made the edge forget %q, want alice's alone", got)
	}
}
