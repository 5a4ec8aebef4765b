package runner

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A repair gives the group back what a command closed, at and under the
// path and on the way to it; it follows no link out of the workspace, runs
// no shell whatever the path says, and refuses paths that leave it.
func TestRepairGivesTheGroupBack(t *testing.T) {
	p := start(t)
	outside := t.TempDir()
	os.Chmod(outside, 0o700)
	secretOut := filepath.Join(outside, "o")
	os.WriteFile(secretOut, []byte("o"), 0o600)
	// The workspace's group is the one things are given back to.
	gid := os.Getgid() + 1
	os.Chown(p.dir, -1, gid)
	p.run(t, `mkdir -p a/b/c && echo x > a/b/c/f && echo y > a/b/g && mkdir a/t && echo s > a/t/s && chmod 1700 a/t &&
chmod 000 a/b/c/f a/b/g && chmod 000 a/b/c && chmod 100 a/b && chmod 700 a &&
ln -s `+outside+` a/out && ln -s `+secretOut+` a/outfile && echo z > other && chmod 000 other`, 10*time.Second)
	if err := p.c.Repair(context.Background(), "a/b"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		mode fs.FileMode
	}{
		{"a", fs.ModeDir | fs.ModeSetgid | 0o770}, // on the way
		{"a/b", fs.ModeDir | fs.ModeSetgid | 0o770},
		{"a/b/c", fs.ModeDir | fs.ModeSetgid | 0o770},
		{"a/b/c/f", 0o660},
		{"a/b/g", 0o660},
		{"a/t", fs.ModeDir | fs.ModeSticky | 0o700}, // not under a/b
		{"other", 0},
	} {
		st, err := os.Lstat(filepath.Join(p.dir, c.path))
		if err != nil || st.Mode() != c.mode {
			t.Errorf("%s: %v %v, want %v", c.path, st.Mode(), err, c.mode)
		}
	}
	if st, _ := os.Lstat(filepath.Join(p.dir, "a/b/c/f")); st.Sys().(*syscall.Stat_t).Gid != uint32(gid) && os.Getuid() == 0 {
		t.Errorf("a/b/c/f is in group %d, not the workspace's %d", st.Sys().(*syscall.Stat_t).Gid, gid)
	}
	for _, rel := range []string{"a", "a/out", "a/out/o", "a/outfile"} {
		if err := p.c.Repair(context.Background(), rel); err != nil {
			t.Fatalf("repair %s: %v", rel, err)
		}
	}
	if st, _ := os.Lstat(filepath.Join(p.dir, "a/t")); st.Mode() != fs.ModeDir|fs.ModeSetgid|0o770 {
		t.Errorf("a/t after repairing a: %v", st.Mode())
	}
	if st, _ := os.Stat(outside); st.Mode().Perm() != 0o700 {
		t.Errorf("a link was followed out of the workspace: %v", st.Mode())
	}
	if st, _ := os.Stat(secretOut); st.Mode() != 0o600 {
		t.Errorf("a link was followed out of the workspace: %v", st.Mode())
	}
	// Never through a shell: the path is a name, nothing more.
	if err := p.c.Repair(context.Background(), "x; touch pwned"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(p.dir, "pwned")); err == nil {
		t.Fatal("a repair ran its path as a command")
	}
	for _, bad := range []string{"../x", "/etc", ""} {
		if err := p.c.Repair(context.Background(), bad); err == nil {
			t.Errorf("repair %q was accepted", bad)
		}
		if err := (Config{Dir: p.dir}).repair(bad); err == nil {
			t.Errorf("the runner took repair %q", bad)
		}
	}
	// The runner goes on serving commands.
	if out, _ := p.run(t, "echo still here", 10*time.Second); out != "still here\n" {
		t.Fatalf("after repairs: %q", out)
	}
}
