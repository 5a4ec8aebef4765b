package backup_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/affido/affido/agent/backup"
)

// archiveOf writes an archive of one workspace file.
func archiveOf(t *testing.T, name, body string) []byte {
	t.Helper()
	src := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(src, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := backup.Write(&buf, backup.Manifest{User: "u", CreatedAt: time.Now()}, []backup.Source{{Name: name, Path: src}}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A symlink the tools left in the workspace does not carry a restored file
// out of it.
func TestCommitDoesNotFollowASymlinkInTheRoot(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ws, "docs")); err != nil {
		t.Fatal(err)
	}
	st, err := backup.Stage(bytes.NewReader(archiveOf(t, "workspace/docs/x.txt", "bytes")), map[string]string{backup.WorkspaceRoot: ws}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(nil); err == nil {
		t.Error("the commit went through a symlink")
	}
	if _, err := os.Stat(filepath.Join(outside, "x.txt")); err == nil {
		t.Fatal("a restored file was written outside its root")
	}
}

func TestRoundTripOfOneFile(t *testing.T) {
	ws := t.TempDir()
	st, err := backup.Stage(bytes.NewReader(archiveOf(t, "workspace/a/b.txt", "bytes")), map[string]string{backup.WorkspaceRoot: ws}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Manifest.User != "u" || len(st.Manifest.Files) != 1 || st.Manifest.Files[0].Size != 5 {
		t.Fatalf("manifest %+v", st.Manifest)
	}
	if err := st.Commit(map[string]os.FileMode{backup.WorkspaceRoot: 0o664}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "a", "b.txt")); err != nil || string(b) != "bytes" {
		t.Fatalf("%q %v", b, err)
	}
	if ents, _ := os.ReadDir(ws); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
}

func TestWriteRefusesANameOutsideTheRoots(t *testing.T) {
	for _, name := range []string{"x.txt", "workspace/../x", "/workspace/x", "workspace/", "data/./x", `workspace/a\b`} {
		src := filepath.Join(t.TempDir(), "f")
		os.WriteFile(src, nil, 0o600)
		if err := backup.Write(&bytes.Buffer{}, backup.Manifest{}, []backup.Source{{Name: name, Path: src}}); err == nil {
			t.Errorf("%q archived", name)
		}
	}
}
