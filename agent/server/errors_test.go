package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/server"
	"github.com/affido/affido/internal/problem"
)

// failingHost fails the list of agents with an internal error.
type failingHost struct{ server.Host }

func (failingHost) Agents(context.Context) ([]agents.Agent, error) {
	return nil, errors.New("sqlite: database disk image is malformed (/data/session.db)")
}

func (failingHost) Close() error { return nil }

// A failure inside the agent answers with a request id and nothing of the
// error; the log has the error under that id.
func TestInternalErrorsAnswerWithARequestID(t *testing.T) {
	cases := []struct {
		name          string
		breakIt       func(dataDir string)
		host          server.Host
		method, path  string
		body          string
		status        int
		kind          string
		logged, leaks string // what the log must carry and the body must not
	}{
		{"the corpus directory is a file", func(dir string) { os.WriteFile(filepath.Join(dir, "corpus"), []byte("x"), 0o644) },
			nil, "POST", "/ingest?name=notes.md", "some notes", 500, "internal", "not a directory", "not a directory"},
		{"the session database does not open", func(dir string) { os.MkdirAll(filepath.Join(dir, "session.db"), 0o755) },
			nil, "GET", "/session", "", 503, "storage-unavailable", "session.db", "session.db"},
		{"the host fails", func(string) {}, failingHost{}, "GET", "/agents", "", 500, "internal", "malformed", "malformed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			db := filepath.Join(dir, "data", "session.db")
			id := identityOf(t, db, "u")
			c.breakIt(filepath.Dir(db))
			var logs bytes.Buffer
			s := server.New(server.Config{Identity: id, SessionDB: db, Workspace: filepath.Join(dir, "ws"),
				DefaultModel: "fake/echo", Log: slog.New(slog.NewJSONHandler(&logs, nil)), Host: c.host})
			defer s.Close()
			h := httptest.NewServer(s.Handler())
			defer h.Close()
			req, _ := http.NewRequest(c.method, h.URL+c.path, strings.NewReader(c.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var p problem.Problem
			if err := json.Unmarshal(b, &p); err != nil || resp.StatusCode != c.status || !strings.HasSuffix(p.Type, "/"+c.kind) {
				t.Fatalf("got %d %s (%v)", resp.StatusCode, b, err)
			}
			if strings.Contains(string(b), c.leaks) || strings.Contains(string(b), dir) {
				t.Errorf("the body carries internal text: %s", b)
			}
			rid := resp.Header.Get(problem.HeaderRequestID)
			if rid == "" || p.RequestID != rid {
				t.Fatalf("request id %q in the body, %q in the header", p.RequestID, rid)
			}
			found := false
			for _, line := range bytes.Split(logs.Bytes(), []byte("\n")) {
				var m map[string]any
				if json.Unmarshal(line, &m) == nil && m["request_id"] == rid {
					found = strings.Contains(m["err"].(string), c.logged)
				}
			}
			if !found {
				t.Errorf("no log line with request id %s and the error; log:\n%s", rid, logs.String())
			}
		})
	}
}
