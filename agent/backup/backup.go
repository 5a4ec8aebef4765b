// Package backup writes and checks a sandbox's archive: a tar of the
// agents' databases (consistent snapshots), the rest of the agent's data
// directory and the workspace, ending with a manifest that lists the size
// and SHA-256 of every file. Restoring stages every file beside its place,
// checks the whole archive against the manifest, and only then moves the
// files into place: a tampered or partial archive writes nothing.
//
// The manifest's digests catch a damaged, cut or edited archive; they do
// not authenticate it (whoever can rewrite the archive can rewrite the
// manifest), so an archive is trusted as much as the place it was kept.
package backup

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Format is the archive format this build writes and reads.
const Format = 1

// ManifestName is the archive's last entry.
const ManifestName = "MANIFEST.json"

// Roots of the archive's paths: the agent's data directory and the workspace.
const (
	DataRoot      = "data"
	WorkspaceRoot = "workspace"
)

// ErrInvalid wraps every reason an archive is refused.
var ErrInvalid = errors.New("invalid backup archive")

// Manifest describes an archive.
type Manifest struct {
	Format        int       `json:"format"`
	User          string    `json:"user"`
	CreatedAt     time.Time `json:"created_at"`
	SchemaVersion int       `json:"schema_version"` // the durable store's
	Files         []File    `json:"files"`
}

// File is one archived file.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Source is one file to archive: Name is its path in the archive, Path
// where it is read from.
type Source struct {
	Name string
	Path string
	// Open, if set, opens Path instead of os.Open (a workspace file the
	// tools closed needs repair first).
	Open func() (*os.File, error)
}

// Write writes the files, then the manifest m with their sizes and
// digests, as a tar to w. A file that changes size while it is read fails
// the backup: its archive would be refused anyway.
func Write(w io.Writer, m Manifest, files []Source) error {
	tw := tar.NewWriter(w)
	m.Format = Format
	m.Files = make([]File, 0, len(files))
	for _, src := range files {
		f, err := writeFile(tw, src)
		if err != nil {
			return fmt.Errorf("archive %s: %w", src.Name, err)
		}
		m.Files = append(m.Files, f)
	}
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: ManifestName, Mode: 0o600, Size: int64(len(body)), ModTime: m.CreatedAt, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(body); err != nil {
		return err
	}
	return tw.Close()
}

func writeFile(tw *tar.Writer, src Source) (File, error) {
	if err := checkName(src.Name); err != nil {
		return File{}, err
	}
	open := src.Open
	if open == nil {
		open = func() (*os.File, error) { return os.Open(src.Path) }
	}
	f, err := open()
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return File{}, err
	}
	if !st.Mode().IsRegular() {
		return File{}, fmt.Errorf("not a regular file")
	}
	hdr := &tar.Header{Name: src.Name, Mode: 0o600, Size: st.Size(), ModTime: st.ModTime(), Typeflag: tar.TypeReg}
	if err := tw.WriteHeader(hdr); err != nil {
		return File{}, err
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(tw, sum), io.LimitReader(f, st.Size()))
	if err != nil {
		return File{}, err
	}
	if n != st.Size() {
		return File{}, fmt.Errorf("changed size while read (%d of %d bytes)", n, st.Size())
	}
	return File{Path: src.Name, Size: n, SHA256: hex.EncodeToString(sum.Sum(nil))}, nil
}

// Tree lists the regular files under dir as sources named root/<relative
// path>, sorted, leaving out those skip returns true for (given the path
// relative to dir, slash-separated). Symlinks and other special files are
// never archived.
func Tree(root, dir string, skip func(rel string, isDir bool) bool) ([]Source, error) {
	var out []Source
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == dir {
				return fs.SkipAll
			}
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if skip != nil && skip(rel, d.IsDir()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			out = append(out, Source{Name: root + "/" + rel, Path: p})
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// checkName refuses an archive path that is not a clean relative path
// under one of the two roots.
func checkName(name string) error {
	root, rel, ok := strings.Cut(name, "/")
	switch {
	case !ok || (root != DataRoot && root != WorkspaceRoot):
		return fmt.Errorf("%w: %q is not under %s/ or %s/", ErrInvalid, name, DataRoot, WorkspaceRoot)
	case rel == "" || strings.ContainsAny(name, "\\\x00") || path.IsAbs(rel) || path.Clean(rel) != rel:
		return fmt.Errorf("%w: %q is not a clean relative path", ErrInvalid, name)
	}
	for _, part := range strings.Split(rel, "/") {
		if part == ".." || part == StagingDir {
			return fmt.Errorf("%w: %q leaves its root", ErrInvalid, name)
		}
	}
	return nil
}

// StagingDir is where Stage puts files, inside each root, until Commit;
// a backup leaves it out.
const StagingDir = ".affido-restore"

// Staged is an archive checked and staged beside its roots.
type Staged struct {
	Manifest Manifest
	roots    map[string]string // archive root -> directory
	stage    map[string]string // archive root -> its staging directory
	files    []string          // archive paths
}

// Stage reads the archive from r into staging directories inside the
// directories of roots (by archive root), and checks it: regular files
// only, every path clean and under a known root and not refused by
// refuse, no path twice, the manifest last, listing exactly the files
// read with their sizes and digests. Any failure removes what was staged
// and returns an error wrapping ErrInvalid (or the I/O error).
func Stage(r io.Reader, roots map[string]string, refuse func(name string) bool) (st *Staged, err error) {
	s := &Staged{roots: roots, stage: map[string]string{}}
	defer func() {
		if err != nil {
			s.Discard()
		}
	}()
	for root, dir := range roots {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		sd := filepath.Join(dir, StagingDir)
		if err := os.RemoveAll(sd); err != nil { // an earlier restore's leftovers
			return nil, err
		}
		if err := os.Mkdir(sd, 0o700); err != nil {
			return nil, err
		}
		s.stage[root] = sd
	}
	got := map[string]File{}
	var manifest []byte
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if manifest != nil {
			return nil, fmt.Errorf("%w: %q after the manifest", ErrInvalid, hdr.Name)
		}
		if hdr.Typeflag != tar.TypeReg {
			return nil, fmt.Errorf("%w: %q is not a regular file", ErrInvalid, hdr.Name)
		}
		if hdr.Name == ManifestName {
			if manifest, err = io.ReadAll(io.LimitReader(tr, 64<<20)); err != nil {
				return nil, fmt.Errorf("%w: read the manifest: %v", ErrInvalid, err)
			}
			continue
		}
		if err := checkName(hdr.Name); err != nil {
			return nil, err
		}
		if refuse != nil && refuse(hdr.Name) {
			return nil, fmt.Errorf("%w: %q may not be restored", ErrInvalid, hdr.Name)
		}
		if _, dup := got[hdr.Name]; dup {
			return nil, fmt.Errorf("%w: %q twice", ErrInvalid, hdr.Name)
		}
		f, err := s.stageFile(hdr.Name, tr)
		if err != nil {
			return nil, err
		}
		got[hdr.Name] = f
		s.files = append(s.files, hdr.Name)
	}
	if manifest == nil {
		return nil, fmt.Errorf("%w: no manifest (a partial archive?)", ErrInvalid)
	}
	if err := json.Unmarshal(manifest, &s.Manifest); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrInvalid, err)
	}
	if err := s.Manifest.check(got); err != nil {
		return nil, err
	}
	return s, nil
}

func (m Manifest) check(got map[string]File) error {
	if m.Format != Format {
		return fmt.Errorf("%w: format %d, this build reads %d", ErrInvalid, m.Format, Format)
	}
	listed := map[string]bool{}
	for _, want := range m.Files {
		if listed[want.Path] {
			return fmt.Errorf("%w: the manifest lists %q twice", ErrInvalid, want.Path)
		}
		listed[want.Path] = true
		f, ok := got[want.Path]
		switch {
		case !ok:
			return fmt.Errorf("%w: %q is missing", ErrInvalid, want.Path)
		case f.Size != want.Size:
			return fmt.Errorf("%w: %q has %d bytes, the manifest says %d", ErrInvalid, want.Path, f.Size, want.Size)
		case f.SHA256 != want.SHA256:
			return fmt.Errorf("%w: %q does not match its SHA-256", ErrInvalid, want.Path)
		}
	}
	for name := range got {
		if !listed[name] {
			return fmt.Errorf("%w: %q is not in the manifest", ErrInvalid, name)
		}
	}
	return nil
}

func (s *Staged) stageFile(name string, r io.Reader) (File, error) {
	root, rel, _ := strings.Cut(name, "/")
	sd, ok := s.stage[root]
	if !ok {
		return File{}, fmt.Errorf("%w: nowhere to restore %q", ErrInvalid, name)
	}
	dst := filepath.Join(sd, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return File{}, err
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return File{}, err
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), r)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return File{}, fmt.Errorf("stage %s: %w", name, err)
	}
	return File{Path: name, Size: n, SHA256: hex.EncodeToString(sum.Sum(nil))}, nil
}

// Commit moves every staged file into place (replacing a file of the same
// name), confined to its root: a symlink already in a root is not followed
// out of it. mode is the permission of the files in each root; the
// directories made get the same bits plus search where they can be read.
func (s *Staged) Commit(mode map[string]fs.FileMode) error {
	defer s.Discard()
	for _, name := range s.files {
		root, rel, _ := strings.Cut(name, "/")
		r, err := os.OpenRoot(s.roots[root])
		if err != nil {
			return err
		}
		err = func() error {
			defer r.Close()
			from := path.Join(StagingDir, rel)
			m, ok := mode[root]
			if !ok {
				m = 0o600
			}
			if err := r.Chmod(from, m); err != nil {
				return err
			}
			if dir := path.Dir(rel); dir != "." {
				if err := r.MkdirAll(dir, m|(m&0o444)>>2); err != nil {
					return err
				}
			}
			return r.Rename(from, rel)
		}()
		if err != nil {
			return fmt.Errorf("restore %s: %w", name, err)
		}
	}
	return nil
}

// Discard removes what is staged.
func (s *Staged) Discard() {
	for _, sd := range s.stage {
		_ = os.RemoveAll(sd)
	}
}
