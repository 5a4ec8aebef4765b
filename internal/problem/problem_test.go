package problem_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/affido/affido/internal/problem"
)

func TestRespond(t *testing.T) {
	internal := errors.New("sqlite: disk I/O error at /data/session.db")
	cases := []struct {
		name       string
		err        error
		status     int
		kind       string
		detail     string
		logged     bool
		retryAfter string
	}{
		{"client error keeps its detail", problem.New(400, "bad-id", "id is a positive integer"), 400, "bad-id", "id is a positive integer", false, ""},
		{"wrapped problem", fmt.Errorf("open: %w", problem.New(404, "unknown-agent", `no agent "x"`)), 404, "unknown-agent", `no agent "x"`, false, ""},
		{"unmapped error is a bare 500", fmt.Errorf("read setting: %w", internal), 500, "internal", "", true, ""},
		{"server-side problem hides its cause", problem.New(503, "storage-unavailable", "the session database could not be opened").Because(internal).Retry(2),
			503, "storage-unavailable", "the session database could not be opened", true, "2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var logs bytes.Buffer
			log := slog.New(slog.NewJSONHandler(&logs, nil))
			w := httptest.NewRecorder()
			problem.Respond(w, httptest.NewRequest("GET", "/x", nil), log, c.err)
			var p problem.Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			if w.Code != c.status || p.Status != c.status || !strings.HasSuffix(p.Type, "/"+c.kind) {
				t.Fatalf("got %d %+v", w.Code, p)
			}
			if c.detail != "" && p.Detail != c.detail {
				t.Errorf("detail %q, want %q", p.Detail, c.detail)
			}
			if strings.Contains(w.Body.String(), "sqlite") || strings.Contains(w.Body.String(), "/data") {
				t.Errorf("internal text reached the client: %s", w.Body)
			}
			if got := w.Header().Get("Retry-After"); got != c.retryAfter {
				t.Errorf("Retry-After %q, want %q", got, c.retryAfter)
			}
			id := w.Header().Get(problem.HeaderRequestID)
			if !c.logged {
				if id != "" || p.RequestID != "" || logs.Len() != 0 {
					t.Errorf("a client error got a request id %q or a log line %s", id, logs.String())
				}
				return
			}
			if id == "" || p.RequestID != id {
				t.Fatalf("request id %q in the body, %q in the header", p.RequestID, id)
			}
			var line map[string]any
			if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
				t.Fatalf("log %q: %v", logs.String(), err)
			}
			if line["request_id"] != id || !strings.Contains(fmt.Sprint(line["err"]), "disk I/O error") {
				t.Errorf("log line %v lacks the id %s or the error", line, id)
			}
		})
	}
}

func TestRespondNotTheSameIDTwice(t *testing.T) {
	ids := map[string]bool{}
	for range 100 {
		w := httptest.NewRecorder()
		problem.Respond(w, httptest.NewRequest("GET", "/", nil), slog.New(slog.DiscardHandler), errors.New("x"))
		ids[w.Header().Get(problem.HeaderRequestID)] = true
	}
	if len(ids) != 100 {
		t.Fatalf("%d distinct ids of 100", len(ids))
	}
}
