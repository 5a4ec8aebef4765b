package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/affido/affido/agent/workspace"
)

// What the tools closed and the runner could not give back answers with a
// problem naming the path, never the agent's own paths or the cause; a
// failed repair is the server's failure (503, logged under a request id).
func TestClosedPathsAnswerWithAProblem(t *testing.T) {
	denied := &fs.PathError{Op: "openat", Path: "/workspace/secret", Err: syscall.EACCES}
	cases := []struct {
		name   string
		err    error
		status int
		kind   string
		logged string
	}{
		{"still closed", &workspace.ClosedError{Path: "secret", Err: denied}, 409, "closed-by-tools", ""},
		{"the repair failed", &workspace.ClosedError{Path: "secret", Err: denied, RepairErr: errors.New("the tool runner is gone")}, 503, "repair-failed", "the tool runner is gone"},
		{"as a skill install returns it", fmt.Errorf("install: %w", &workspace.ClosedError{Path: "skills", Err: denied}), 409, "closed-by-tools", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			s := &Server{cfg: Config{Log: slog.New(slog.NewJSONHandler(&log, nil))}}
			rec := httptest.NewRecorder()
			s.fail(rec, httptest.NewRequest("GET", "/files?path=secret", nil), pathError(c.err))
			var body map[string]any
			json.Unmarshal(rec.Body.Bytes(), &body)
			if rec.Code != c.status || body["type"] == nil || !strings.Contains(fmt.Sprint(body["detail"]), "permission denied on ") {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if !strings.HasSuffix(fmt.Sprint(body["type"]), c.kind) || strings.Contains(rec.Body.String(), "/workspace") {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if c.logged != "" && !strings.Contains(log.String(), c.logged) {
				t.Fatalf("the log lacks %q: %s", c.logged, log.String())
			}
		})
	}
}
