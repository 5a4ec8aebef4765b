package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/registry"
)

type fakeAuth struct {
	sessions, tokens map[string]string
	err              error
}

func (f fakeAuth) UserForSession(_ context.Context, tok string) (string, error) {
	if f.err != nil {
		return "", f.err
	}
	if u, ok := f.sessions[tok]; ok {
		return u, nil
	}
	return "", registry.ErrUnauthenticated
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
		{"provisioning failed", "user=alice", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, auth, errors.New("docker: boom"), 503, 1, true},
		{"X-Forwarded-Uri is not where the user comes from", "user=alice", map[string]string{"Cookie": "better-auth.session_token=s-alice", "X-Forwarded-Uri": "/u/bob/x"}, auth, nil, 200, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &fakeResolver{err: tt.resolveErr}
			s := &Server{Auth: tt.auth, Resolver: res, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
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

func TestResolvePassesActivity(t *testing.T) {
	res := &fakeResolver{}
	s := &Server{Auth: fakeAuth{tokens: map[string]string{"t": "u"}}, Resolver: res, Log: slog.Default()}
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
