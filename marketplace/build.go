package marketplace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// FrontMatter reads name and description from a SKILL.md front matter block.
func FrontMatter(skillMD []byte) (name, description string, err error) {
	sc := bufio.NewScanner(bytes.NewReader(skillMD))
	if !sc.Scan() || strings.TrimSpace(sc.Text()) != "---" {
		return "", "", fmt.Errorf("SKILL.md does not start with a --- front matter block")
	}
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "---" {
			if name == "" || description == "" {
				return "", "", fmt.Errorf("SKILL.md front matter needs name and description")
			}
			return name, description, nil
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "name":
			name = strings.TrimSpace(v)
		case "description":
			description = strings.TrimSpace(v)
		}
	}
	return "", "", fmt.Errorf("SKILL.md front matter is not closed")
}

// Build reads src/<name>/<version>/ and writes, under out, per skill
// version a manifest and its files, and an index:
//
//	out/index.json
//	out/<name>/<version>/manifest.json
//	out/<name>/<version>/files/<path>
func Build(src, out string) (Index, error) {
	var idx Index
	names, err := os.ReadDir(src)
	if err != nil {
		return idx, fmt.Errorf("read marketplace %s: %w", src, err)
	}
	for _, n := range names {
		if !n.IsDir() {
			continue
		}
		if !ValidName(n.Name()) {
			return idx, fmt.Errorf("skill directory %q is not a valid skill name", n.Name())
		}
		versions, err := os.ReadDir(filepath.Join(src, n.Name()))
		if err != nil {
			return idx, err
		}
		entry := IndexEntry{Name: n.Name()}
		for _, v := range versions {
			if !v.IsDir() {
				continue
			}
			m, err := buildVersion(filepath.Join(src, n.Name(), v.Name()), filepath.Join(out, n.Name(), v.Name()), n.Name(), v.Name())
			if err != nil {
				return idx, fmt.Errorf("skill %s %s: %w", n.Name(), v.Name(), err)
			}
			entry.Versions = append(entry.Versions, v.Name())
			entry.Description = m.Description
		}
		if len(entry.Versions) == 0 {
			continue
		}
		sort.Strings(entry.Versions)
		entry.Latest = entry.Versions[len(entry.Versions)-1]
		idx.Skills = append(idx.Skills, entry)
	}
	b, _ := json.MarshalIndent(idx, "", "  ")
	if err := os.WriteFile(filepath.Join(out, "index.json"), b, 0o644); err != nil {
		return idx, err
	}
	return idx, nil
}

func buildVersion(dir, out, name, version string) (Manifest, error) {
	m := Manifest{Name: name, Version: version}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%s is a symlink; skills hold regular files only", p)
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if err := CheckPath(rel); err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == "SKILL.md" {
			fmName, desc, err := FrontMatter(b)
			if err != nil {
				return err
			}
			if fmName != name {
				return fmt.Errorf("SKILL.md names %q, directory is %q", fmName, name)
			}
			m.Description = desc
		}
		dst := filepath.Join(out, "files", filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
		m.Files = append(m.Files, File{Path: rel, Size: int64(len(b)), SHA256: HashBytes(b)})
		return nil
	})
	if err != nil {
		return m, err
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Path < m.Files[j].Path })
	m.Digest = Digest(m.Files)
	b, _ := json.MarshalIndent(m, "", "  ")
	if _, err := Parse(b, name); err != nil {
		return m, err
	}
	return m, os.WriteFile(filepath.Join(out, "manifest.json"), b, 0o644)
}
