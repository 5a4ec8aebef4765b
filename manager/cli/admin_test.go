package cli

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bench and operators read `admin sandboxes`; a field the admin API
// answers must not be lost on the way (reported_wake_at once was: the
// command decoded into a copy of the struct without it, and the bench's
// lateness rows waited on it in vain).
func TestSandboxesKeepsEveryFieldOfTheAdminAPI(t *testing.T) {
	dir, err := os.MkdirTemp("", "adm") // a short path: unix sockets allow ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	const answer = `[{"user":"alice","name":"pool.abc","state":"running","subnet":"10.213.0.112/28",` +
		`"last_active":"2026-12-05T02:23:55Z","reported_wake_at":"2026-12-05T02:24:15Z"},` +
		`{"name":"pool.def","state":"pool","subnet":"10.213.0.128/28"}]`
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/admin/sandboxes" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(answer))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	t.Setenv("AFFIDO_ADMIN_SOCKET", sock)

	run := func(args ...string) string {
		t.Helper()
		cmd := sandboxesCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("admin sandboxes %v: %v", args, err)
		}
		return out.String()
	}
	if out := run("--json"); !strings.Contains(out, `"reported_wake_at": "2026-12-05T02:24:15Z"`) {
		t.Errorf("--json lost reported_wake_at:\n%s", out)
	}
	table := run()
	for _, want := range []string{"REPORTED WAKE", "2026-12-05T02:24:15Z", "pool.def"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
}
