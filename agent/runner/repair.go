package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxRepair bounds the entries one repair visits.
const maxRepair = 200_000

// repair gives the workspace's group back rel: the directories on the way
// to it, then rel and everything under it. It runs in the runner's own Go
// code (the model chooses no part of it but the path, which the agent
// named) and so changes only what the tools' uid owns, which the tools
// could change themselves. Every name is resolved through an os.Root of the
// workspace, so nothing outside it is touched, and an entry that is a link
// is skipped, never followed.
func (cfg Config) repair(rel string) error {
	if !filepath.IsLocal(rel) {
		return fmt.Errorf("%q is not a path inside the workspace", rel)
	}
	rel = path.Clean(filepath.ToSlash(rel))
	root, err := os.OpenRoot(cfg.Dir)
	if err != nil {
		return fmt.Errorf("open the workspace: %w", err)
	}
	defer root.Close()
	st, err := root.Stat(".")
	if err != nil {
		return fmt.Errorf("stat the workspace: %w", err)
	}
	r := repairer{root: root, uid: os.Getuid(), gid: -1, deadline: time.Now().Add(RepairTimeout - 2*time.Second)}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		r.gid = int(sys.Gid)
	}
	if rel != "." {
		parts := strings.Split(rel, "/")
		for i := range parts[:len(parts)-1] {
			if ok, err := r.open(strings.Join(parts[:i+1], "/")); err != nil || !ok {
				return err // a link or a file on the way: nothing under it is rel
			}
		}
	}
	return r.walk(rel)
}

type repairer struct {
	root     *os.Root
	uid, gid int
	seen     int
	deadline time.Time
}

// walk opens p and, if it is a directory, everything under it.
func (r *repairer) walk(p string) error {
	isDir, err := r.open(p)
	if err != nil || !isDir {
		return err
	}
	d, err := r.root.Open(p)
	if err != nil {
		return nil // not ours, or gone meanwhile: the agent's retry will say
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil
	}
	for _, n := range names {
		if err := r.walk(path.Join(p, n)); err != nil {
			return err
		}
	}
	return nil
}

// open gives one entry back to the group if the runner's uid owns it, and
// says whether it is a directory to descend into. Links, devices, FIFOs
// and sockets are left as they are.
func (r *repairer) open(p string) (isDir bool, err error) {
	if r.seen++; r.seen > maxRepair {
		return false, fmt.Errorf("more than %d entries", maxRepair)
	}
	if time.Now().After(r.deadline) {
		return false, errors.New("out of time")
	}
	st, err := r.root.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, nil // a directory on the way that is not ours: nothing to do here
	}
	isDir = st.IsDir()
	if !isDir && !st.Mode().IsRegular() {
		return false, nil
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || int(sys.Uid) != r.uid {
		return isDir, nil
	}
	// u+rwX,g+rwX; directories keep the group for new files (setgid) and
	// lose the sticky bit, which would keep the agent from removing what
	// is in them; files lose setuid and setgid.
	mode := st.Mode().Perm() | 0o660
	if isDir {
		mode |= 0o110 | fs.ModeSetgid
	}
	if r.gid >= 0 && int(sys.Gid) != r.gid {
		_ = r.root.Lchown(p, -1, r.gid)
	}
	// Lstat said it is no link; were it swapped for one meanwhile, os.Root
	// still resolves it inside the workspace, and only what this uid owns
	// can change.
	if err := r.root.Chmod(p, mode); err != nil {
		return isDir, nil
	}
	// An ACL entry naming the agent could still shut it out: drop them.
	if f, err := r.root.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0); err == nil {
		_ = unix.Fremovexattr(int(f.Fd()), "system.posix_acl_access")
		if isDir {
			_ = unix.Fremovexattr(int(f.Fd()), "system.posix_acl_default")
		}
		f.Close()
	}
	return isDir, nil
}
