// Package skills installs marketplace skills into the workspace, file by
// file: the manifest is checked, every file's size and sha256 is checked as
// it arrives into a staging directory, the whole skill's digest is checked,
// and only then is the skill moved into place with a rename. Any failure
// leaves nothing behind. An installed skill is checked again before use,
// against its install record: the manifest kept under Records (on /data,
// which the model's tools cannot read or write), never against anything in
// the workspace, which they can.
package skills

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/affido/affido/agent/workspace"
	"github.com/affido/affido/marketplace"
)

// Errors callers branch on.
var (
	ErrUnknown   = errors.New("no such skill or version in the marketplace")
	ErrIntegrity = errors.New("skill failed its integrity check")
	ErrNotFound  = errors.New("skill is not installed")
)

// Fetcher gets marketplace paths (index.json, <name>/<version>/manifest.json,
// <name>/<version>/files/<path>) through the gateway.
type Fetcher interface {
	Fetch(ctx context.Context, path string, limit int64) ([]byte, error)
}

// Installer manages the skills of one workspace.
type Installer struct {
	Workspace string
	// Records is where the manifest of each installed skill is kept
	// (<name>.json); it must be out of the tools' reach.
	Records string
	Market  Fetcher
	// Repair, if set, gives back what the tools closed under skills/ and
	// .skills-staging/ when an install or a removal fails for want of
	// permission; the operation is then tried once more from the start.
	Repair workspace.Repairer
}

// reopen runs op; if it fails for want of permission and in.Repair is set,
// it has skills/ and .skills-staging/ repaired and runs op once more.
func (in *Installer) reopen(ctx context.Context, op func() error) error {
	err := op()
	var closed *workspace.ClosedError
	if in.Repair == nil || !errors.Is(err, fs.ErrPermission) || errors.As(err, &closed) {
		return err // a ClosedError was repaired and tried again already
	}
	for _, d := range []string{"skills", ".skills-staging"} {
		if rerr := in.Repair.Repair(ctx, d); rerr != nil {
			return &workspace.ClosedError{Path: d, Err: err, RepairErr: rerr}
		}
	}
	if err = op(); errors.Is(err, fs.ErrPermission) {
		return &workspace.ClosedError{Path: "skills", Err: err}
	}
	return err
}

// removeAll removes dir, a path under the workspace, repairing it first if
// the tools closed something in it.
func (in *Installer) removeAll(ctx context.Context, dir string) error {
	return in.reopen(ctx, func() error { return os.RemoveAll(dir) })
}

func (in *Installer) record(name string) string { return filepath.Join(in.Records, name+".json") }

// writeRecord stores raw as name's install record, atomically.
func (in *Installer) writeRecord(name string, raw []byte) error {
	if err := os.MkdirAll(in.Records, 0o700); err != nil {
		return fmt.Errorf("install record: %w", err)
	}
	tmp := in.record(name) + ".tmp-" + randomSuffix()
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("install record: %w", err)
	}
	if err := os.Rename(tmp, in.record(name)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("install record: %w", err)
	}
	return nil
}

func (in *Installer) dir() string     { return filepath.Join(in.Workspace, "skills") }
func (in *Installer) staging() string { return filepath.Join(in.Workspace, ".skills-staging") }

// dirsOK refuses to work when skills/ or .skills-staging/ is anything but a
// real directory (or absent): the tools can write the workspace, and a link
// planted there would turn a removal or an install into one elsewhere.
func (in *Installer) dirsOK() error {
	for _, d := range []string{in.dir(), in.staging()} {
		st, err := os.Lstat(d)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("%w: %s is not a directory (a link?)", ErrIntegrity, filepath.Base(d))
		}
	}
	return nil
}

// Installed is one installed skill and whether it still matches its digest.
type Installed struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description"`
	Digest      string `json:"digest"`
	Path        string `json:"path"` // of SKILL.md, relative to the workspace
	OK          bool   `json:"ok"`
	Problem     string `json:"problem,omitempty"`
}

// Marketplace returns the marketplace's index: every skill, its
// description and versions.
func (in *Installer) Marketplace(ctx context.Context) (marketplace.Index, error) {
	var idx marketplace.Index
	b, err := in.Market.Fetch(ctx, "index.json", 1<<20)
	if err != nil {
		return idx, err
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return idx, fmt.Errorf("read marketplace index: %w", err)
	}
	return idx, nil
}

// Install fetches and installs name at version ("" for the latest). It
// installs over whatever is at skills/<name>, whatever the tools left there.
func (in *Installer) Install(ctx context.Context, name, version string) (Installed, error) {
	var got Installed
	err := in.reopen(ctx, func() (err error) {
		got, err = in.install(ctx, name, version)
		return err
	})
	return got, err
}

func (in *Installer) install(ctx context.Context, name, version string) (Installed, error) {
	if !marketplace.ValidName(name) || (version != "" && !marketplace.ValidVersion(version)) {
		return Installed{}, fmt.Errorf("%w: malformed name or version", marketplace.ErrInvalid)
	}
	if err := in.dirsOK(); err != nil {
		return Installed{}, err
	}
	if version == "" {
		idx, err := in.Marketplace(ctx)
		if err != nil {
			return Installed{}, err
		}
		for _, s := range idx.Skills {
			if s.Name == name {
				version = s.Latest
			}
		}
		if version == "" {
			return Installed{}, fmt.Errorf("%w: %s", ErrUnknown, name)
		}
	}
	raw, err := in.Market.Fetch(ctx, name+"/"+version+"/manifest.json", 1<<20)
	if err != nil {
		return Installed{}, err
	}
	m, err := marketplace.Parse(raw, name)
	if err != nil {
		return Installed{}, err
	}
	if m.Version != version {
		return Installed{}, fmt.Errorf("%w: manifest is for version %s, asked for %s", marketplace.ErrInvalid, m.Version, version)
	}
	if err := os.MkdirAll(in.staging(), 0o755); err != nil {
		return Installed{}, err
	}
	stage := filepath.Join(in.staging(), name+"-"+randomSuffix())
	if err := os.Mkdir(stage, 0o755); err != nil {
		return Installed{}, err
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(stage)
		}
	}()
	root, err := os.OpenRoot(stage)
	if err != nil {
		return Installed{}, err
	}
	defer root.Close()
	for _, f := range m.Files {
		b, err := in.Market.Fetch(ctx, name+"/"+version+"/files/"+f.Path, f.Size+1)
		if err != nil {
			return Installed{}, err
		}
		if int64(len(b)) != f.Size || marketplace.HashBytes(b) != f.SHA256 {
			return Installed{}, fmt.Errorf("%w: %s does not match its manifest entry (size %d, want %d)", ErrIntegrity, f.Path, len(b), f.Size)
		}
		if d := filepath.Dir(f.Path); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return Installed{}, err
			}
		}
		mode := os.FileMode(0o644)
		if strings.HasPrefix(f.Path, "scripts/") {
			mode = 0o755
		}
		fh, err := root.OpenFile(f.Path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
		if err != nil {
			return Installed{}, fmt.Errorf("stage %s: %w", f.Path, err)
		}
		_, werr := fh.Write(b)
		if cerr := fh.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return Installed{}, werr
		}
	}
	if err := verify(stage, m); err != nil {
		return Installed{}, err
	}
	prevRecord, _ := os.ReadFile(in.record(name))
	if err := in.writeRecord(name, raw); err != nil {
		return Installed{}, err
	}
	restoreRecord := func() {
		if prevRecord != nil {
			_ = in.writeRecord(name, prevRecord)
		} else {
			_ = os.Remove(in.record(name))
		}
	}
	if err := os.MkdirAll(in.dir(), 0o775); err != nil {
		restoreRecord()
		return Installed{}, err
	}
	final := filepath.Join(in.dir(), name)
	old := ""
	if _, err := os.Lstat(final); err == nil { // an upgrade: move the old one aside first
		old = filepath.Join(in.staging(), "old-"+name+"-"+randomSuffix())
		if err := os.Rename(final, old); err != nil {
			restoreRecord()
			return Installed{}, err
		}
	}
	if err := os.Rename(stage, final); err != nil {
		if old != "" {
			_ = os.Rename(old, final)
		}
		restoreRecord()
		return Installed{}, err
	}
	ok = true
	if old != "" {
		// The new skill is in place: what the old one held, whatever the
		// tools did to it, is only in the way now.
		_ = in.removeAll(ctx, old)
	}
	return in.describe(name, m, nil), nil
}

func (in *Installer) describe(name string, m marketplace.Manifest, problem error) Installed {
	out := Installed{Name: name, Version: m.Version, Description: m.Description, Digest: m.Digest, Path: "skills/" + name + "/SKILL.md", OK: problem == nil}
	if problem != nil {
		out.Problem = problem.Error()
	}
	return out
}

// verify checks that dir holds exactly the manifest's files, as regular
// files with the listed sizes and hashes, and that they add up to its digest.
func verify(dir string, m marketplace.Manifest) error {
	want := map[string]marketplace.File{}
	for _, f := range m.Files {
		want[f.Path] = f
	}
	var got []marketplace.File
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%w: %s is a symlink", ErrIntegrity, rel)
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%w: %s is not a regular file", ErrIntegrity, rel)
		}
		f, listed := want[rel]
		if !listed {
			return fmt.Errorf("%w: %s is not in the manifest", ErrIntegrity, rel)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if int64(len(b)) != f.Size || marketplace.HashBytes(b) != f.SHA256 {
			return fmt.Errorf("%w: %s was changed", ErrIntegrity, rel)
		}
		got = append(got, marketplace.File{Path: rel, Size: int64(len(b)), SHA256: marketplace.HashBytes(b)})
		return nil
	})
	if err != nil {
		return err
	}
	if len(got) != len(m.Files) {
		return fmt.Errorf("%w: %d of %d files present", ErrIntegrity, len(got), len(m.Files))
	}
	if d := marketplace.Digest(got); d != m.Digest {
		return fmt.Errorf("%w: digest %s, manifest says %s", ErrIntegrity, d, m.Digest)
	}
	return nil
}

// Check verifies one installed skill again.
func (in *Installer) Check(name string) (Installed, error) {
	if !marketplace.ValidName(name) {
		return Installed{}, ErrNotFound
	}
	if err := in.dirsOK(); err != nil {
		return Installed{Name: name, Problem: err.Error()}, err
	}
	dir := filepath.Join(in.dir(), name)
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return Installed{}, ErrNotFound
	}
	raw, err := os.ReadFile(in.record(name))
	if err != nil {
		return Installed{Name: name, Problem: "no install record: these files were not installed by the agent"},
			fmt.Errorf("%w: no install record", ErrIntegrity)
	}
	m, err := marketplace.Parse(raw, name)
	if err != nil {
		return Installed{Name: name, Problem: err.Error()}, fmt.Errorf("%w: %v", ErrIntegrity, err)
	}
	if err := verify(dir, m); err != nil {
		return in.describe(name, m, err), err
	}
	return in.describe(name, m, nil), nil
}

// List returns every installed skill, each checked again.
func (in *Installer) List() ([]Installed, error) {
	if err := in.dirsOK(); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(in.dir())
	if errors.Is(err, fs.ErrNotExist) {
		return []Installed{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []Installed{}
	for _, e := range ents {
		if !e.IsDir() || !marketplace.ValidName(e.Name()) {
			continue
		}
		s, _ := in.Check(e.Name())
		if s.Name == "" {
			s.Name = e.Name()
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Remove deletes an installed skill.
func (in *Installer) Remove(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return in.reopen(ctx, func() error { return in.remove(ctx, name) })
}

func (in *Installer) remove(ctx context.Context, name string) error {
	if !marketplace.ValidName(name) {
		return ErrNotFound
	}
	if err := in.dirsOK(); err != nil {
		return err
	}
	dir := filepath.Join(in.dir(), name)
	if st, err := os.Lstat(dir); err != nil || !st.IsDir() {
		return ErrNotFound
	}
	trash := filepath.Join(in.staging(), "rm-"+name+"-"+randomSuffix())
	if err := os.MkdirAll(in.staging(), 0o755); err != nil {
		return err
	}
	if err := os.Rename(dir, trash); err != nil {
		return err
	}
	if err := os.Remove(in.record(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove install record: %w", err)
	}
	return in.removeAll(ctx, trash)
}

// Hint is the server-built note for a prompt that starts with /name.
func (in *Installer) Hint(name string) string {
	s, err := in.Check(name)
	switch {
	case err == nil:
		return fmt.Sprintf("The owner invoked the skill %q. Read skills/%s/SKILL.md with read_file first and follow it.", name, name)
	case errors.Is(err, ErrNotFound):
		list, _ := in.List()
		var names []string
		for _, l := range list {
			if l.OK {
				names = append(names, l.Name)
			}
		}
		installed := "no skills are installed"
		if len(names) > 0 {
			installed = "installed skills: " + strings.Join(names, ", ")
		}
		return fmt.Sprintf("The owner invoked the skill %q, but it is not installed (%s). Say so honestly; do not pretend to use it.", name, installed)
	default:
		return fmt.Sprintf("The owner invoked the skill %q, but it failed its integrity check (%s) and must not be used. Tell the owner.", name, s.Problem)
	}
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// HTTPFetcher fetches marketplace paths from the gateway.
type HTTPFetcher struct {
	BaseURL string        // e.g. http://gateway:8088/v1/gateway/marketplace
	Token   func() string // the sandbox's gateway token, read at each fetch
	Client  *http.Client
}

// Fetch gets one path, at most limit bytes.
func (f HTTPFetcher) Fetch(ctx context.Context, p string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(f.BaseURL, "/")+"/"+p, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+f.Token())
	c := f.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("marketplace: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: %s", ErrUnknown, p)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("marketplace: %s: %s", p, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrIntegrity, p, limit)
	}
	return b, nil
}
