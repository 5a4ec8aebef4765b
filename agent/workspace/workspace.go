// Package workspace gives confined access to the user's workspace volume.
// Every path is relative to the workspace root; absolute paths, ".." that
// leaves the root and symlinks that lead outside are refused before
// anything is read or written (os.Root enforces the last two).
package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ErrBadPath is returned for a path that is not a clean relative path inside the workspace.
var ErrBadPath = errors.New("path is outside the workspace")

// ErrTooLarge is returned when a file is larger than the limit of its write.
var ErrTooLarge = errors.New("file too large")

// ErrQuota is returned when a write would take the user's storage past its quota.
var ErrQuota = errors.New("storage quota exceeded")

// ErrNotFile is returned for reading a directory as a file.
var ErrNotFile = errors.New("not a file")

// ErrClosed is what a ClosedError is: the tools took a path's permissions
// away and they could not be given back.
var ErrClosed = errors.New("closed by the tools")

// ClosedError is returned when an operation fails for want of permission
// and Repair could not help: Path is the workspace path asked for, Err the
// operation's error and RepairErr, if Repair itself failed (the runner
// gone or out of time), its error.
type ClosedError struct {
	Path      string
	Err       error
	RepairErr error
}

func (e *ClosedError) Error() string {
	if e.RepairErr != nil {
		return fmt.Sprintf("permission denied on %s, and the tool runner failed to give it back", e.Path)
	}
	return fmt.Sprintf("permission denied on %s, even after the tool runner gave back what it owns", e.Path)
}

func (e *ClosedError) Unwrap() []error { return []error{ErrClosed, e.Err, e.RepairErr} }

// Repairer gives the agent back what the model's tools closed: the tools
// run under a uid of their own, which owns what they write, and may chmod
// it so the agent's uid can neither read nor remove it. Repair makes rel
// (relative to the workspace), everything under it and the directories on
// the way to it readable and writable by the workspace's group again. It
// must never leave the workspace nor follow a link, and must run nothing
// the model chose; a path that does not exist is not an error.
type Repairer interface {
	Repair(ctx context.Context, rel string) error
}

// repairTimeout bounds one Repair the workspace asks for.
const repairTimeout = 30 * time.Second

// Workspace is a directory tree the agent may use.
type Workspace struct {
	Dir string
	// Repair, if set, is asked to give back a path when an operation on it
	// fails for want of permission, and the operation is tried once more.
	// The owner's routes set it; the model's own tools do not need it.
	Repair Repairer
	// Quota caps the bytes of every file under Dir and Also together; 0 is
	// no quota. Writes through Write are refused past it; the shell, which
	// writes directly, is bounded per file by its RLIMIT_FSIZE and told
	// when the workspace is over.
	Quota int64
	Also  []string // other directories counted against the quota (the corpus)
}

// Usage returns the bytes of the regular files under Dir and Also. What
// cannot be read (a directory a tool closed) is not counted.
func (w Workspace) Usage() int64 {
	var n int64
	for _, dir := range append([]string{w.Dir}, w.Also...) {
		_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.Type().IsRegular() {
				if info, err := d.Info(); err == nil {
					n += info.Size()
				}
			}
			return nil
		})
	}
	return n
}

// Room returns how many more bytes fit under the quota, and the usage.
func (w Workspace) Room() (room, used int64) {
	if w.Quota <= 0 {
		return math.MaxInt64, 0
	}
	used = w.Usage()
	return max(w.Quota-used, 0), used
}

// Clean checks p and returns it in canonical form ("." for the root).
func Clean(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("%w: %q contains NUL", ErrBadPath, p)
	}
	if p == "" {
		return ".", nil
	}
	if path.IsAbs(p) || strings.HasPrefix(p, `\`) {
		return "", fmt.Errorf("%w: %q is absolute", ErrBadPath, p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: %q contains ..", ErrBadPath, p)
		}
	}
	return path.Clean(p), nil
}

func (w Workspace) root() (*os.Root, error) {
	if err := os.MkdirAll(w.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	return os.OpenRoot(w.Dir)
}

// confine maps os.Root's escape errors to ErrBadPath.
func confine(err error) error {
	if err != nil && strings.Contains(err.Error(), "path escapes from parent") {
		return fmt.Errorf("%w: %v", ErrBadPath, err)
	}
	return err
}

// reopen runs op on the clean path p; if op fails for want of permission
// and w.Repair is set, it asks for p to be repaired and runs op once more.
// A permission error that remains is a *ClosedError.
func (w Workspace) reopen(p string, op func() error) error {
	err := op()
	if w.Repair == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), repairTimeout)
	defer cancel()
	if rerr := w.Repair.Repair(ctx, p); rerr != nil {
		return &ClosedError{Path: p, Err: err, RepairErr: rerr}
	}
	if err = op(); errors.Is(err, fs.ErrPermission) {
		return &ClosedError{Path: p, Err: err}
	}
	return err
}

// FileInfo describes one workspace entry.
type FileInfo struct {
	Name     string    `json:"name"`
	Path     string    `json:"path"`
	Dir      bool      `json:"dir"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// List lists the directory p.
func (w Workspace) List(p string) ([]FileInfo, error) {
	p, err := Clean(p)
	if err != nil {
		return nil, err
	}
	r, err := w.root()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var ents []fs.DirEntry
	err = w.reopen(p, func() error {
		f, err := r.Open(p)
		if err != nil {
			return confine(err)
		}
		defer f.Close()
		ents, err = f.ReadDir(-1)
		return confine(err)
	})
	if err != nil {
		return nil, err
	}
	out := []FileInfo{}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, FileInfo{Name: e.Name(), Path: path.Join(p, e.Name()), Dir: e.IsDir(), Size: info.Size(), Modified: info.ModTime().UTC()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Read returns up to limit bytes of file p, and whether it was cut.
func (w Workspace) Read(p string, limit int64) ([]byte, bool, error) {
	f, err := w.Open(p)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if st.IsDir() {
		return nil, false, fmt.Errorf("%w: %s is a directory", ErrNotFile, p)
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(b)) > limit {
		return b[:limit], true, nil
	}
	return b, false, nil
}

// Write writes data to p, creating parent directories. It writes a temporary
// file and renames it into place, so a crash leaves the old or the new bytes.
func (w Workspace) Write(p string, data io.Reader, limit int64) (int64, error) {
	p, err := Clean(p)
	if err != nil {
		return 0, err
	}
	if p == "." {
		return 0, fmt.Errorf("%w: cannot write the workspace root", ErrBadPath)
	}
	r, err := w.root()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	tmp := path.Join(path.Dir(p), "."+path.Base(p)+".tmp")
	var f *os.File
	// Retried after a repair only up to here: nothing of data is read yet.
	err = w.reopen(p, func() (err error) {
		if dir := path.Dir(p); dir != "." {
			if err := r.MkdirAll(dir, 0o775); err != nil {
				return confine(err)
			}
		}
		if st, err := r.Lstat(p); err == nil && st.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%w: %s is a symlink", ErrBadPath, p)
		}
		// Group-writable: the tools (another uid in the shared group) may change
		// what the agent wrote for them; the umask decides on machines without one.
		f, err = r.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o664)
		return confine(err)
	})
	if err != nil {
		return 0, err
	}
	allowed, quotaBound := limit, false
	if room, _ := w.Room(); room != math.MaxInt64 {
		if st, err := r.Lstat(p); err == nil {
			room += st.Size() // an overwrite frees what it replaces
		}
		if room < allowed {
			allowed, quotaBound = room, true
		}
	}
	n, err := io.Copy(f, io.LimitReader(data, allowed+1))
	switch {
	case err == nil && n > allowed && quotaBound:
		err = fmt.Errorf("%w: the workspace and corpus may hold %d bytes in all", ErrQuota, w.Quota)
	case err == nil && n > allowed:
		err = fmt.Errorf("%w: larger than %d bytes", ErrTooLarge, limit)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = r.Remove(tmp)
		return 0, err
	}
	if err := w.reopen(p, func() error { return confine(r.Rename(tmp, p)) }); err != nil {
		_ = r.Remove(tmp)
		return 0, err
	}
	return n, nil
}

// Delete removes file or directory p (with everything in it). The
// workspace root cannot be deleted.
func (w Workspace) Delete(p string) error {
	p, err := Clean(p)
	if err != nil {
		return err
	}
	if p == "." {
		return fmt.Errorf("%w: cannot delete the workspace root", ErrBadPath)
	}
	r, err := w.root()
	if err != nil {
		return err
	}
	defer r.Close()
	return w.reopen(p, func() error {
		if _, err := r.Lstat(p); err != nil {
			return confine(err)
		}
		return confine(r.RemoveAll(p))
	})
}

// Open opens file p for reading, asking Repair once if the tools closed it.
func (w Workspace) Open(p string) (*os.File, error) {
	p, err := Clean(p)
	if err != nil {
		return nil, err
	}
	r, err := w.root()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var f *os.File
	err = w.reopen(p, func() (err error) {
		f, err = r.Open(p)
		return confine(err)
	})
	return f, err
}

// Reopen runs op and, if it fails for want of permission somewhere under
// p, asks Repair to give p back and runs op once more.
func (w Workspace) Reopen(p string, op func() error) error { return w.reopen(p, op) }
