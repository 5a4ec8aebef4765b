package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// root is the repository's root, seen from this package's directory.
const root = ".."

// maxReadmeLines keeps the README a front page (issue 25): the rest of the
// documentation lives in docs/.
const maxReadmeLines = 250

// pages returns every markdown page the checks cover: README.md and docs/*.md.
func pages(t *testing.T) []string {
	t.Helper()
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, more...)
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReadmeIsShort(t *testing.T) {
	text := read(t, filepath.Join(root, "README.md"))
	if n := strings.Count(text, "\n"); n > maxReadmeLines {
		t.Fatalf("README.md has %d lines, at most %d: move detail to docs/", n, maxReadmeLines)
	}
}

func TestReadmeHasWalkthrough(t *testing.T) {
	cmds, err := Walkthrough(read(t, filepath.Join(root, "README.md")))
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(cmds, "\n")
	for _, want := range []string{"./dev.sh token", "Authorization: Bearer", "/prompt"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the walkthrough never says %q", want)
		}
	}
}

var (
	fence     = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```\\s*$")
	codeSpan  = regexp.MustCompile("`[^`\n]*`")
	inline    = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	reference = regexp.MustCompile(`(?m)^\s*\[[^\]]+\]:\s*(\S+)`)
	scheme    = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// links returns the targets of the markdown links in text, code left out.
func links(text string) []string {
	text = fence.ReplaceAllString(text, "")
	text = codeSpan.ReplaceAllString(text, "")
	var out []string
	for _, re := range []*regexp.Regexp{inline, reference} {
		for _, m := range re.FindAllStringSubmatch(text, -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// Every link stays inside the repository and leads somewhere: a file or
// directory that exists, and a heading that exists when it names one. The
// architecture notes outside the repository (../shared) are dead in every
// clone, so neither they nor any other outside address may be linked.
func TestLinksStayInsideTheRepository(t *testing.T) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages(t) {
		text := read(t, page)
		if strings.Contains(text, "../shared") {
			t.Errorf("%s mentions ../shared, which is outside the repository", page)
		}
		for _, target := range links(text) {
			if scheme.MatchString(target) {
				t.Errorf("%s links out of the repository: %s", page, target)
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				if strings.HasPrefix(path, "/") {
					t.Errorf("%s: %s is an absolute path; link relatively", page, target)
					continue
				}
				file = filepath.Join(filepath.Dir(page), filepath.FromSlash(path))
			}
			abs, err := filepath.Abs(file)
			if err != nil {
				t.Fatal(err)
			}
			if abs != absRoot && !strings.HasPrefix(abs, absRoot+string(filepath.Separator)) {
				t.Errorf("%s: %s leads outside the repository", page, target)
				continue
			}
			info, err := os.Stat(file)
			if err != nil {
				t.Errorf("%s: %s does not exist", page, target)
				continue
			}
			if anchor != "" && !info.IsDir() && strings.HasSuffix(file, ".md") && !hasHeading(read(t, file), anchor) {
				t.Errorf("%s: %s names no heading in %s", page, target, file)
			}
		}
	}
}

func TestLinksFindsEveryKind(t *testing.T) {
	text := "[a](x.md) ![b](img.png \"t\") `[c](no.md)`\n```\n[d](no2.md)\n```\n[e]: ref.md\n"
	got := strings.Join(links(text), " ")
	if got != "x.md img.png ref.md" {
		t.Fatalf("links: %q", got)
	}
}

// hasHeading reports whether text has a heading whose GitHub anchor is anchor.
func hasHeading(text, anchor string) bool {
	text = fence.ReplaceAllString(text, "")
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		if slug(strings.TrimSpace(strings.TrimLeft(l, "#"))) == anchor {
			return true
		}
	}
	return false
}

// slug is GitHub's heading anchor: lower case, spaces to hyphens, and
// punctuation other than hyphens and underscores dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"How long things take":          "how-long-things-take",
		"Code map":                      "code-map",
		"Past one machine: Kubernetes":  "past-one-machine-kubernetes",
		"The agent API (`/u/<user>/…`)": "the-agent-api-uuser…",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWalkthroughParsing(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		err      bool
	}{
		{"none", "# README\n", nil, true},
		{"no block after the marker", WalkthroughMarker + "\ntext\n", nil, true},
		{"unclosed", WalkthroughMarker + "\n```sh\necho a\n", nil, true},
		{"lines", "x\n" + WalkthroughMarker + "\n```sh\n# a comment\necho a   # note\n\necho b \\\n  c\n```\necho after\n",
			[]string{"echo a   # note", "echo b   c"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Walkthrough(tc.in)
			if (err != nil) != tc.err || strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("Walkthrough: %q, %v; want %q (error: %v)", got, err, tc.want, tc.err)
			}
		})
	}
}
