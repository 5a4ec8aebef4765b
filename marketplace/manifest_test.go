package marketplace

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func valid() Manifest {
	files := []File{
		{Path: "SKILL.md", Size: 3, SHA256: HashBytes([]byte("abc"))},
		{Path: "scripts/run.sh", Size: 2, SHA256: HashBytes([]byte("hi"))},
	}
	return Manifest{Name: "demo", Version: "1.0.0", Description: "d", Files: files, Digest: Digest(files)}
}

func encode(m Manifest) []byte { b, _ := json.Marshal(m); return b }

func TestParseAcceptsAValidManifest(t *testing.T) {
	if _, err := Parse(encode(valid()), "demo"); err != nil {
		t.Fatal(err)
	}
}

func TestParseRefusals(t *testing.T) {
	withFiles := func(fs ...File) Manifest {
		m := valid()
		m.Files = fs
		m.Digest = Digest(fs)
		return m
	}
	skill := File{Path: "SKILL.md", Size: 3, SHA256: HashBytes([]byte("abc"))}
	f := func(p string) File { return File{Path: p, Size: 1, SHA256: HashBytes([]byte("x"))} }
	tests := map[string][]byte{
		"not JSON":           []byte("{not json"),
		"unknown field":      []byte(`{"name":"demo","version":"1","files":[],"digest":"","extra":1}`),
		"other name":         encode(func() Manifest { m := valid(); m.Name = "other"; return m }()),
		"bad name":           encode(func() Manifest { m := valid(); m.Name = "../demo"; return m }()),
		"bad version":        encode(func() Manifest { m := valid(); m.Version = "1.0/../../x"; return m }()),
		"no files":           encode(withFiles()),
		"file listed twice":  encode(withFiles(skill, f("a.txt"), f("a.txt"))),
		"dot dot":            encode(withFiles(skill, f("../outside.txt"))),
		"dot dot inside":     encode(withFiles(skill, f("scripts/../../x"))),
		"absolute":           encode(withFiles(skill, f("/etc/passwd"))),
		"backslash":          encode(withFiles(skill, f(`scripts\x.sh`))),
		"hidden file":        encode(withFiles(skill, f(".manifest.json"))),
		"unclean":            encode(withFiles(skill, f("scripts//x.sh"))),
		"file and directory": encode(withFiles(skill, f("scripts"), f("scripts/x.sh"))),
		"oversize":           encode(withFiles(skill, File{Path: "big.bin", Size: MaxFileSize + 1, SHA256: HashBytes(nil)})),
		"malformed hash":     encode(withFiles(skill, File{Path: "a", Size: 1, SHA256: "xyz"})),
		"no SKILL.md":        encode(withFiles(f("README.md"))),
		"digest mismatch":    encode(func() Manifest { m := valid(); m.Digest = "h1:AAAA"; return m }()),
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := Parse(b, "demo"); !errors.Is(err, ErrInvalid) {
				t.Fatalf("accepted, or wrong error: %v", err)
			}
		})
	}
}

// The h1 digest is the one go.sum uses: sha256 of "<hash>  <path>\n" lines.
func TestDigestIsOrderIndependentAndSensitive(t *testing.T) {
	m := valid()
	rev := []File{m.Files[1], m.Files[0]}
	if Digest(rev) != m.Digest {
		t.Fatal("digest depends on order")
	}
	rev[0].SHA256 = HashBytes([]byte("changed"))
	if Digest(rev) == m.Digest {
		t.Fatal("digest did not change with a file")
	}
	if !strings.HasPrefix(m.Digest, "h1:") {
		t.Fatalf("digest %q", m.Digest)
	}
}

func TestBuildTheRealMarketplace(t *testing.T) {
	out := t.TempDir()
	idx, err := Build("skills", out)
	if err != nil {
		t.Fatal(err)
	}
	if len(idx.Skills) < 3 {
		t.Fatalf("index %+v", idx)
	}
	for _, s := range idx.Skills {
		b, err := os.ReadFile(filepath.Join(out, s.Name, s.Latest, "manifest.json"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := Parse(b, s.Name)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		for _, f := range m.Files {
			data, err := os.ReadFile(filepath.Join(out, s.Name, s.Latest, "files", f.Path))
			if err != nil || HashBytes(data) != f.SHA256 {
				t.Fatalf("%s/%s: %v", s.Name, f.Path, err)
			}
		}
	}
}

func TestBuildRefusesSymlinksAndBadFrontMatter(t *testing.T) {
	src := t.TempDir()
	dir := filepath.Join(src, "demo", "1.0.0")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: demo\ndescription: d\n---\n"), 0o644)
	os.Symlink("/etc/passwd", filepath.Join(dir, "passwd"))
	if _, err := Build(src, t.TempDir()); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("symlink: %v", err)
	}
	os.Remove(filepath.Join(dir, "passwd"))
	os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("no front matter"), 0o644)
	if _, err := Build(src, t.TempDir()); err == nil {
		t.Fatal("SKILL.md without front matter was accepted")
	}
}
