package workspace

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The quota counts the workspace and the extra directories together; a
// write past it stores nothing, an overwrite frees what it replaces.
func TestWriteRespectsTheQuota(t *testing.T) {
	dir, corpus := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(corpus, "doc"), make([]byte, 300), 0o644)
	w := Workspace{Dir: dir, Quota: 1000, Also: []string{corpus}}
	if _, err := w.Write("a.bin", strings.NewReader(strings.Repeat("a", 500)), 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write("c.bin", strings.NewReader("xx"), 1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past the write's own limit: %v", err)
	}
	_, err := w.Write("b.bin", strings.NewReader(strings.Repeat("b", 300)), 1<<20)
	if !errors.Is(err, ErrQuota) {
		t.Fatalf("past the quota: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.bin")); err == nil {
		t.Fatal("a refused write left its file")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("leftovers: %v", ents)
	}
	if _, err := w.Write("a.bin", strings.NewReader(strings.Repeat("c", 700)), 1<<20); err != nil {
		t.Fatalf("an overwrite within the quota: %v", err)
	}
	if room, used := w.Room(); used != 1000 || room != 0 {
		t.Fatalf("room %d used %d", room, used)
	}
}
