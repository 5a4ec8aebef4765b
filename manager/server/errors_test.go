package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/affido/affido/internal/problem"
)

// failingAdminStore fails every call it is asked.
type failingAdminStore struct{ AdminStore }

func (failingAdminStore) CreateAPIToken(context.Context, string) (string, error) {
	return "", errInternal
}

var errInternal = errors.New(`pq: password authentication failed for user "affido" at 10.0.0.5:5432`)

// A failure behind the manager answers with a request id and nothing of the
// error; the log has the error under that id.
func TestInternalErrorsAnswerWithARequestID(t *testing.T) {
	cases := []struct {
		name    string
		handler func(log *slog.Logger) http.Handler
		method  string
		path    string
		hdr     map[string]string
		status  int
		kind    string
	}{
		{"the registry fails an authentication", func(log *slog.Logger) http.Handler {
			return (&Server{EdgeDeps: EdgeDeps{Auth: fakeAuth{err: errInternal}, Resolver: &fakeResolver{}}, Log: log}).Handler()
		}, "GET", "/v1/resolve?user=alice&path=/health", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, 503, "unavailable"},
		{"the sandbox does not start", func(log *slog.Logger) http.Handler {
			auth := fakeAuth{sessions: map[string]string{"s-alice": "alice"}}
			return (&Server{EdgeDeps: EdgeDeps{Auth: auth, Resolver: &fakeResolver{err: errInternal}}, Log: log}).Handler()
		}, "GET", "/v1/resolve?user=alice&path=/health", map[string]string{"Cookie": "better-auth.session_token=s-alice"}, 503, "sandbox-unavailable"},
		{"an admin call fails", func(log *slog.Logger) http.Handler {
			return (&Admin{Store: failingAdminStore{}, Log: log}).Handler()
		}, "POST", "/admin/token?user=alice", nil, 500, "admin-failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			h := c.handler(slog.New(slog.NewJSONHandler(&logs, nil)))
			req := httptest.NewRequest(c.method, c.path, nil)
			for k, v := range c.hdr {
				req.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			b, _ := io.ReadAll(w.Body)
			var p problem.Problem
			if err := json.Unmarshal(b, &p); err != nil || w.Code != c.status || !strings.HasSuffix(p.Type, "/"+c.kind) {
				t.Fatalf("got %d %s (%v)", w.Code, b, err)
			}
			if strings.Contains(string(b), "pq:") || strings.Contains(string(b), "10.0.0.5") {
				t.Errorf("the body carries internal text: %s", b)
			}
			rid := w.Header().Get(problem.HeaderRequestID)
			if rid == "" || p.RequestID != rid {
				t.Fatalf("request id %q in the body, %q in the header", p.RequestID, rid)
			}
			found := false
			for _, line := range bytes.Split(logs.Bytes(), []byte("\n")) {
				var m map[string]any
				if json.Unmarshal(line, &m) == nil && m["request_id"] == rid {
					found = strings.Contains(m["err"].(string), "password authentication failed")
				}
			}
			if !found {
				t.Errorf("no log line with request id %s and the error; log:\n%s", rid, logs.String())
			}
		})
	}
}
