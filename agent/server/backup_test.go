package server_test

// A backup is taken while the agents run and restored into an empty
// sandbox with everything in it; a restore refuses an archive that is
// damaged, cut, edited or that tries to write outside its place, and then
// writes nothing. Real SQLite stores throughout.

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/agent/backup"
	"github.com/affido/affido/agent/server"
	"github.com/affido/affido/internal/sandboxapi"
)

// takeBackup returns the agent's archive.
func (a *agent) takeBackup() []byte {
	a.t.Helper()
	req, _ := http.NewRequest("GET", a.http.URL+sandboxapi.BackupPath, nil)
	req.Header.Set(sandboxapi.HeaderControl, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		a.t.Fatalf("backup: %d %v %s", resp.StatusCode, err, b)
	}
	return b
}

// restoreFrom posts archive to the agent's restore route.
func (a *agent) restoreFrom(archive []byte, query string) (int, map[string]any) {
	a.t.Helper()
	code, _, m := a.doWith("POST", sandboxapi.RestorePath+query, string(archive), control)
	return code, m
}

// tree lists every path under dir with its size (directories as -1).
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		info, _ := d.Info()
		size := int64(-1)
		if !d.IsDir() && info != nil {
			size = info.Size()
		}
		out = append(out, fmt.Sprintf("%s %d", strings.TrimPrefix(p, dir), size))
		return nil
	})
	sort.Strings(out)
	return out
}

// populated starts an agent with a conversation, a reminder due in an
// hour, a rule, a second agent with a reminder of its own, and a
// workspace file.
func populated(t *testing.T) *agent {
	a := newAgent(t)
	a.allow("set_reminder")
	a.prompt("remind in 1h: water the plants")
	a.must("POST", "/agents", `{"name":"bob"}`, 201)
	a.must("POST", "/agents/bob/rules", `{"tool":"set_reminder","effect":"allow"}`, 201)
	a.must("POST", "/agents/bob/prompt", `{"text":"remind in 2h: call mum"}`, 200)
	a.must("PUT", "/uploads/docs/notes.txt", "the workspace's bytes", 201)
	return a
}

func TestBackupAndRestoreBringEverythingBack(t *testing.T) {
	a := populated(t)
	entries := a.entryCount()

	// Back up while the agents run: a prompt goes on meanwhile.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.do("POST", "/prompt", `{"text":"still working"}`) }()
	archive := a.takeBackup()
	wg.Wait()

	var mu sync.Mutex
	var reported []time.Time
	b := startAgentWith(t, t.TempDir(), "u", func(c *server.Config) {
		c.Harness.OnScheduled = func(at time.Time) { mu.Lock(); reported = append(reported, at); mu.Unlock() }
	})
	code, m := b.restoreFrom(archive, "")
	if code != 200 {
		t.Fatalf("restore: %d %v", code, m)
	}
	// The prompt caught mid-run resumes; once it is done, the reminder is
	// what is due next, and the host has been told.
	var due time.Time
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, m := b.do("POST", sandboxapi.PausePath+"?"+sandboxapi.IfIdle+"=1", "")
		if code == 200 {
			var err error
			if due, err = time.Parse(time.RFC3339Nano, m["next_wake_at"].(string)); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restored agent stays busy: %d %v", code, m)
		}
	}
	if time.Until(due) < 50*time.Minute || time.Until(due) > time.Hour {
		t.Fatalf("next wake %v, want the reminder in about an hour", due)
	}
	mu.Lock()
	if len(reported) == 0 || !reported[len(reported)-1].Equal(due) {
		t.Errorf("the restored agent reported %v to its host, want %v last", reported, due)
	}
	mu.Unlock()

	if n := b.entryCount(); n < entries {
		t.Errorf("restored conversation has %v entries, the original had %v before the backup", n, entries)
	}
	rems := b.must("GET", "/reminders", "", 200)["reminders"].([]any)
	if len(rems) != 1 || !strings.Contains(jsonOf(rems), "water the plants") {
		t.Errorf("restored reminders: %v", rems)
	}
	if r := b.must("GET", "/agents/bob/reminders", "", 200)["reminders"].([]any); len(r) != 1 {
		t.Errorf("bob's restored reminders: %v", r)
	}
	if rules := jsonOf(b.must("GET", "/rules", "", 200)); !strings.Contains(rules, "set_reminder") {
		t.Errorf("restored rules: %s", rules)
	}
	if code, m := b.do("GET", "/uploads/docs/notes.txt", ""); code != 200 || m["raw"] != "the workspace's bytes" {
		t.Errorf("restored workspace file: %d %v", code, m)
	}
	if _, err := os.Stat(filepath.Join(b.dir, "data", "identity.json")); err != nil {
		t.Errorf("the restored sandbox lost its own identity: %v", err)
	}

	// A sandbox with data is not overwritten unless asked to.
	if code, m := b.restoreFrom(archive, ""); code != 409 {
		t.Errorf("restore over data: %d %v, want 409", code, m)
	}
	if code, m := b.restoreFrom(archive, "?force=1"); code != 200 {
		t.Errorf("forced restore: %d %v", code, m)
	}
	if r := b.must("GET", "/reminders", "", 200)["reminders"].([]any); len(r) != 1 {
		t.Errorf("reminders after a forced restore: %v", r)
	}
}

func TestBackupAndRestoreOnlyThroughTheControlPath(t *testing.T) {
	a := populated(t)
	archive := a.takeBackup()
	if code, _ := a.do("GET", sandboxapi.BackupPath, ""); code != 403 {
		t.Errorf("backup without the control header: %d, want 403", code)
	}
	b := newAgent(t)
	if code, _, _ := b.doWith("POST", sandboxapi.RestorePath, string(archive), nil); code != 403 {
		t.Errorf("restore without the control header: %d, want 403", code)
	}
	c := startAgent(t, t.TempDir(), "someone-else")
	if code, m := c.restoreFrom(archive, ""); code != 422 {
		t.Errorf("another user's archive: %d %v, want 422", code, m)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "data", "session.db")); err == nil {
		t.Error("a refused archive wrote a database")
	}
}

// entry is one tar entry, for rewriting archives.
type entry struct {
	hdr  tar.Header
	body []byte
}

func readTar(t *testing.T, b []byte) []entry {
	t.Helper()
	var out []entry
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		out = append(out, entry{*h, body})
	}
}

func writeTar(t *testing.T, es []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		e.hdr.Size = int64(len(e.body))
		if err := tw.WriteHeader(&e.hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.body)
	}
	tw.Close()
	return buf.Bytes()
}

// relisted rewrites the manifest (the last entry) to list the other
// entries as they are: the tampering a careless checker would miss.
func relisted(t *testing.T, es []entry) []entry {
	var m backup.Manifest
	if err := json.Unmarshal(es[len(es)-1].body, &m); err != nil {
		t.Fatal(err)
	}
	m.Files = nil
	for _, e := range es[:len(es)-1] {
		sum := sha256.Sum256(e.body)
		m.Files = append(m.Files, backup.File{Path: e.hdr.Name, Size: int64(len(e.body)), SHA256: hex.EncodeToString(sum[:])})
	}
	es[len(es)-1].body, _ = json.Marshal(m)
	return es
}

func reg(name, body string) entry {
	return entry{tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600}, []byte(body)}
}

func insert(es []entry, e entry) []entry {
	return append(es[:len(es)-1:len(es)-1], e, es[len(es)-1])
}

func TestRestoreRefusesABadArchiveAndWritesNothing(t *testing.T) {
	a := populated(t)
	good := a.takeBackup()
	find := func(es []entry, prefix string) int {
		for i, e := range es {
			if strings.HasPrefix(e.hdr.Name, prefix) {
				return i
			}
		}
		t.Fatalf("no %s in the archive", prefix)
		return -1
	}
	cases := []struct {
		name   string
		change func(es []entry) []entry
	}{
		{"one byte of the database changed", func(es []entry) []entry {
			i := find(es, "data/session.db")
			es[i].body[len(es[i].body)/2] ^= 1
			return es
		}},
		{"one byte of a workspace file changed", func(es []entry) []entry {
			es[find(es, "workspace/uploads/docs/notes.txt")].body[0] ^= 1
			return es
		}},
		{"a file missing", func(es []entry) []entry {
			i := find(es, "workspace/")
			return append(es[:i:i], es[i+1:]...)
		}},
		{"an extra file", func(es []entry) []entry { return insert(es, reg("workspace/extra.txt", "x")) }},
		{"no manifest (cut short)", func(es []entry) []entry { return es[:len(es)-1] }},
		{"a ../ path", func(es []entry) []entry { return relisted(t, insert(es, reg("workspace/../escape.txt", "x"))) }},
		{"a deeper ../ path", func(es []entry) []entry { return relisted(t, insert(es, reg("data/agents/../../../escape.txt", "x"))) }},
		{"an absolute path", func(es []entry) []entry { return relisted(t, insert(es, reg("/etc/escape.txt", "x"))) }},
		{"a path under no root", func(es []entry) []entry { return relisted(t, insert(es, reg("elsewhere/escape.txt", "x"))) }},
		{"a symlink entry", func(es []entry) []entry {
			return relisted(t, insert(es, entry{tar.Header{Name: "workspace/link", Typeflag: tar.TypeSymlink, Linkname: "/data/identity.json"}, nil}))
		}},
		{"a hard link entry", func(es []entry) []entry {
			return relisted(t, insert(es, entry{tar.Header{Name: "workspace/hard", Typeflag: tar.TypeLink, Linkname: "data/session.db"}, nil}))
		}},
		{"another identity", func(es []entry) []entry { return relisted(t, insert(es, reg("data/identity.json", `{"user":"u"}`))) }},
		{"a file twice", func(es []entry) []entry {
			return relisted(t, insert(es, reg(es[find(es, "workspace/")].hdr.Name, "second")))
		}},
		{"a file after the manifest", func(es []entry) []entry { return append(es, reg("workspace/late.txt", "x")) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := writeTar(t, c.change(readTar(t, bytes.Clone(good))))
			b := newAgent(t)
			b.must("PUT", "/uploads/mine.txt", "already here", 201)
			before := tree(t, b.dir)
			code, m := b.restoreFrom(bad, "")
			if code != 422 {
				t.Fatalf("restore: %d %v, want 422", code, m)
			}
			if after := tree(t, b.dir); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Fatalf("a refused archive changed the sandbox:\nbefore %v\nafter  %v", before, after)
			}
			if _, err := os.Stat(filepath.Join(b.dir, "escape.txt")); err == nil {
				t.Fatal("a path escaped")
			}
		})
	}
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

// A backup of a paused agent opens its storage for the snapshot, lists
// every file in its manifest and leaves no snapshot behind.
func TestBackupOfAPausedAgent(t *testing.T) {
	a := populated(t)
	a.must("POST", sandboxapi.PausePath, "", 200)
	es := readTar(t, a.takeBackup())
	var m backup.Manifest
	if last := es[len(es)-1]; last.hdr.Name != backup.ManifestName || json.Unmarshal(last.body, &m) != nil {
		t.Fatalf("the archive does not end with its manifest: %v", last.hdr.Name)
	}
	if m.User != "u" || m.SchemaVersion == 0 || m.CreatedAt.IsZero() || len(m.Files) != len(es)-1 {
		t.Fatalf("manifest %+v for %d files", m, len(es)-1)
	}
	names := map[string]bool{}
	for _, f := range m.Files {
		names[f.Path] = len(f.SHA256) == 64
	}
	for _, want := range []string{"data/session.db", "workspace/uploads/docs/notes.txt"} {
		if !names[want] {
			t.Errorf("%s is not in the manifest with its SHA-256: %v", want, names)
		}
	}
	for name := range names {
		if strings.HasPrefix(name, "data/agents/") && strings.HasSuffix(name, "/session.db") {
			names["bob"] = true
		}
		if strings.Contains(name, "identity.json") || strings.HasSuffix(name, "-wal") || strings.HasSuffix(name, ".lock") {
			t.Errorf("archived %s", name)
		}
	}
	if !names["bob"] {
		t.Error("the second agent's store is not archived")
	}
	if left, _ := filepath.Glob(filepath.Join(a.dir, "data", ".backup-*")); len(left) != 0 {
		t.Errorf("snapshots left behind: %v", left)
	}
}
