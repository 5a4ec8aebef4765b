package privsep

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Fresh root-owned volumes are handed to the agent; one someone else owns
// is left as it is.
func TestOwnHandsFreshVolumesOver(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root, as the init container runs")
	}
	dir := t.TempDir()
	data, ws, used := filepath.Join(dir, "data"), filepath.Join(dir, "workspace"), filepath.Join(dir, "used")
	for _, d := range []string{data, ws, used} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(used, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	if err := Own(data, ws); err != nil {
		t.Fatal(err)
	}
	if err := Own(used, used); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path     string
		uid, gid int
		mode     fs.FileMode
	}{
		{data, AgentUID, AgentUID, fs.ModeDir | 0o700},
		{ws, AgentUID, WorkGID, fs.ModeDir | fs.ModeSetgid | 0o770},
		{used, 4242, 4242, fs.ModeDir | 0o755},
	} {
		st, err := os.Stat(tt.path)
		if err != nil {
			t.Fatal(err)
		}
		sys := st.Sys().(*syscall.Stat_t)
		if int(sys.Uid) != tt.uid || int(sys.Gid) != tt.gid || st.Mode() != tt.mode {
			t.Errorf("%s: %d:%d %v, want %d:%d %v", filepath.Base(tt.path), sys.Uid, sys.Gid, st.Mode(), tt.uid, tt.gid, tt.mode)
		}
	}
}
