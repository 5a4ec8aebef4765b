package privsep

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// Own gives fresh volumes to the identities Start expects: data to the
// agent (0700), the workspace to the agent and the work group (2770). A
// Docker volume is made with the image's ownership already; a new
// Kubernetes claim belongs to root, so the sandbox Pod runs this first, as
// an init container holding CAP_CHOWN and CAP_FOWNER. A directory that is
// not root's is left alone: a volume in use is never touched.
func Own(data, workspace string) error {
	for _, d := range []struct {
		path string
		gid  int
		mode fs.FileMode
	}{{data, AgentUID, 0o700}, {workspace, WorkGID, 0o770 | fs.ModeSetgid}} {
		st, err := os.Stat(d.path)
		if err != nil {
			return fmt.Errorf("own %s: %w", d.path, err)
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); !ok || sys.Uid != 0 {
			continue
		}
		if err := os.Lchown(d.path, AgentUID, d.gid); err != nil {
			return fmt.Errorf("own %s: %w", d.path, err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return fmt.Errorf("own %s: %w", d.path, err)
		}
	}
	return nil
}
