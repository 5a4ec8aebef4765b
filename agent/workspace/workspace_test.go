package workspace

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// fakeRepairer records the paths it is asked to repair and fails if told to.
type fakeRepairer struct {
	asked []string
	err   error
}

func (f *fakeRepairer) Repair(_ context.Context, rel string) error {
	f.asked = append(f.asked, rel)
	return f.err
}

// An operation refused for want of permission is tried once more after
// the path is repaired; one still refused, or whose repair failed, is a
// ClosedError naming the path; other errors are never repaired. (The real
// uids are tried in agent/privsep's TestOwnerReachesWhatTheToolsClosed;
// this holds as root, which permissions do not stop.)
func TestPermissionErrorsAreRepairedOnce(t *testing.T) {
	denied := &fs.PathError{Op: "openat", Path: "secret", Err: syscall.EACCES}
	cases := []struct {
		name      string
		errs      []error // what the operation returns, call by call
		repairErr error
		calls     int
		asked     int
		closed    bool
	}{
		{"repaired", []error{denied, nil}, nil, 2, 1, false},
		{"still closed", []error{denied, denied}, nil, 2, 1, true},
		{"the repair failed", []error{denied, nil}, errors.New("the tool runner is gone"), 1, 1, true},
		{"sticky: not permitted", []error{&fs.PathError{Op: "unlinkat", Path: "s", Err: syscall.EPERM}, nil}, nil, 2, 1, false},
		{"not found is not repaired", []error{fs.ErrNotExist}, nil, 1, 0, false},
		{"fine", []error{nil}, nil, 1, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := &fakeRepairer{err: c.repairErr}
			w := Workspace{Dir: t.TempDir(), Repair: rep}
			calls := 0
			err := w.reopen("secret", func() error {
				calls++
				return c.errs[calls-1]
			})
			var closed *ClosedError
			if calls != c.calls || len(rep.asked) != c.asked || errors.As(err, &closed) != c.closed {
				t.Fatalf("%d calls, repairs %v, error %v", calls, rep.asked, err)
			}
			if c.closed && (closed.Path != "secret" || !errors.Is(err, ErrClosed) || strings.Contains(err.Error(), w.Dir)) {
				t.Fatalf("closed error %q (path %q)", err, closed.Path)
			}
		})
	}
	// Without a repairer, nothing changes.
	w := Workspace{Dir: t.TempDir()}
	if err := w.reopen("secret", func() error { return denied }); err != denied {
		t.Fatalf("without a repairer: %v", err)
	}
}
