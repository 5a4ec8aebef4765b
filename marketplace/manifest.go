// Package marketplace is the skills marketplace: the skills themselves
// (skills/<name>/<version>/, in the Agent Skills layout) and the manifest
// format the manager serves and the agent checks, file by file, before it
// installs anything.
package marketplace

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
)

// Limits every manifest must keep.
const (
	MaxFiles     = 200
	MaxFileSize  = 1 << 20
	MaxSkillSize = 5 << 20
)

// File is one file of a skill.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Manifest describes one skill version.
type Manifest struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	Description string `json:"description"`
	Files       []File `json:"files"`
	// Digest pins the whole skill, in the style of go.sum's h1: hashes.
	Digest string `json:"digest"`
}

// Index lists the marketplace.
type Index struct {
	Skills []IndexEntry `json:"skills"`
}

// IndexEntry is one skill with its versions, oldest first.
type IndexEntry struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Versions    []string `json:"versions"`
	Latest      string   `json:"latest"`
}

var (
	validName    = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)
	validVersion = regexp.MustCompile(`^[0-9A-Za-z][0-9A-Za-z.+-]{0,31}$`)
	validHash    = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// ValidName reports whether s is a well-formed skill name.
func ValidName(s string) bool { return validName.MatchString(s) }

// ValidVersion reports whether s is a well-formed version.
func ValidVersion(s string) bool { return validVersion.MatchString(s) }

// ErrInvalid is wrapped by every manifest refusal.
var ErrInvalid = errors.New("invalid skill manifest")

// CheckPath refuses anything but a clean relative path of ordinary names.
func CheckPath(p string) error {
	switch {
	case p == "" || len(p) > 256:
		return fmt.Errorf("%w: path %q is empty or too long", ErrInvalid, p)
	case strings.HasPrefix(p, "/") || strings.Contains(p, `\`) || strings.ContainsRune(p, 0):
		return fmt.Errorf("%w: path %q is absolute or has a backslash or NUL", ErrInvalid, p)
	case path.Clean(p) != p:
		return fmt.Errorf("%w: path %q is not clean", ErrInvalid, p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." || part == "." || strings.HasPrefix(part, ".") {
			return fmt.Errorf("%w: path %q leaves the skill or names a hidden file", ErrInvalid, p)
		}
	}
	return nil
}

// Digest is the h1: hash of a file list: sha256 over "<sha256>  <path>\n"
// lines sorted by path, base64-encoded.
func Digest(files []File) string {
	fs := append([]File(nil), files...)
	sort.Slice(fs, func(i, j int) bool { return fs[i].Path < fs[j].Path })
	h := sha256.New()
	for _, f := range fs {
		fmt.Fprintf(h, "%s  %s\n", f.SHA256, f.Path)
	}
	return "h1:" + base64.StdEncoding.EncodeToString(h.Sum(nil))
}

// HashBytes is the hex sha256 of b.
func HashBytes(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Parse decodes and checks a manifest for the skill name asked for. It
// refuses unknown fields, bad names and versions, unsafe or repeated paths,
// oversize files, a missing SKILL.md and a digest that does not match the
// file list.
func Parse(b []byte, wantName string) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !ValidName(m.Name) || (wantName != "" && m.Name != wantName) {
		return m, fmt.Errorf("%w: name %q (asked for %q)", ErrInvalid, m.Name, wantName)
	}
	if !ValidVersion(m.Version) {
		return m, fmt.Errorf("%w: version %q", ErrInvalid, m.Version)
	}
	if len(m.Files) == 0 || len(m.Files) > MaxFiles {
		return m, fmt.Errorf("%w: %d files (1 to %d allowed)", ErrInvalid, len(m.Files), MaxFiles)
	}
	seen := map[string]bool{}
	var total int64
	hasSkill := false
	for _, f := range m.Files {
		if err := CheckPath(f.Path); err != nil {
			return m, err
		}
		if seen[f.Path] {
			return m, fmt.Errorf("%w: %s is listed twice", ErrInvalid, f.Path)
		}
		seen[f.Path] = true
		if f.Size < 0 || f.Size > MaxFileSize {
			return m, fmt.Errorf("%w: %s is %d bytes (at most %d)", ErrInvalid, f.Path, f.Size, MaxFileSize)
		}
		if !validHash.MatchString(f.SHA256) {
			return m, fmt.Errorf("%w: %s has a malformed sha256", ErrInvalid, f.Path)
		}
		total += f.Size
		hasSkill = hasSkill || f.Path == "SKILL.md"
	}
	for p := range seen { // a file and a directory of the same name cannot both exist
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if seen[dir] {
				return m, fmt.Errorf("%w: %s is both a file and a directory", ErrInvalid, dir)
			}
		}
	}
	if total > MaxSkillSize {
		return m, fmt.Errorf("%w: %d bytes in all (at most %d)", ErrInvalid, total, MaxSkillSize)
	}
	if !hasSkill {
		return m, fmt.Errorf("%w: no SKILL.md", ErrInvalid)
	}
	if Digest(m.Files) != m.Digest {
		return m, fmt.Errorf("%w: digest %s does not match its files (%s)", ErrInvalid, m.Digest, Digest(m.Files))
	}
	return m, nil
}
