//go:build e2e

package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/affido/affido/docs"
)

// walkthroughOutputs says what a line of the README's walkthrough must
// print, by a piece of the line: the walkthrough may change, but these steps
// (and what a newcomer sees from them) must stay in it.
var walkthroughOutputs = []struct{ line, want string }{
	{"/health", `"status":"ok"`},
	{`"hello there"`, `"reply":"echo: hello there"`},
	{`"write notes.txt: remember the milk"`, `"status":"waiting"`},
	{`/approvals/$N`, `write_file returned`},
	{`"run: ls -la && cat notes.txt"`, `remember the milk`},
	{"./dev.sh status", "NAME"},
	{"docker ps", "-agent"},
	{"admin evict", "evicted"},
	{`"read notes.txt"`, `remember the milk`},
}

// TestReadmeWalkthrough runs the README's walkthrough (the sh block after
// <!-- walkthrough -->) with bash, from the repository's root, the way a
// newcomer would after ./dev.sh up, against this stack: AFFIDO_STACK and
// AFFIDO_PORT point ./dev.sh and the lines at it, and ME is a fresh user.
// Each line must exit 0; curl is made to fail on an HTTP error status, which
// a newcomer would see as an error body.
func TestReadmeWalkthrough(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := docs.Walkthrough(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(baseURL)
	if err != nil || u.Port() == "" {
		t.Fatalf("AFFIDO_E2E_URL %q names no port", baseURL)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	me := "walk-" + hex.EncodeToString(b)
	reportOnFailure(t, me)

	// One bash runs every line, so variables carry from line to line; after
	// each, a marker line with its index and exit status.
	var script strings.Builder
	script.WriteString("set -u\ncurl() { command curl --fail-with-body -sS \"$@\"; local rc=$?; echo; return $rc; }\n")
	for i, l := range lines {
		fmt.Fprintf(&script, "%s\nprintf '\\n@@walkthrough %d rc=%%d\\n' $?\n", l, i)
	}
	cmd := exec.Command("bash", "-c", script.String())
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "AFFIDO_STACK="+stack, "AFFIDO_PORT="+u.Port(), "ME="+me)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("bash: %v\n%s", err, out.String())
	}

	outputs := splitWalkthrough(t, out.String(), len(lines))
	for i, l := range lines {
		t.Logf("$ %s\n%s", l, outputs[i].text)
		if outputs[i].rc != "0" {
			t.Errorf("line %d exited %s: %s\n%s", i+1, outputs[i].rc, l, outputs[i].text)
		}
	}
	for _, w := range walkthroughOutputs {
		i := indexOf(lines, w.line)
		if i < 0 {
			t.Errorf("the walkthrough has no line with %q", w.line)
			continue
		}
		if !strings.Contains(outputs[i].text, w.want) {
			t.Errorf("%s\nprinted no %q:\n%s", lines[i], w.want, outputs[i].text)
		}
	}
	if t.Failed() {
		return
	}
	// The steps did what they say: the agent wrote the file in the
	// workspace, and the user's sandbox came back after the evict.
	if r := mustGet(t, me, token(t, me), "/file?path=notes.txt"); !strings.Contains(r.Body, "remember the milk") {
		t.Fatalf("notes.txt after the walkthrough: %s", r.Body)
	}
}

type lineOutput struct{ text, rc string }

var walkthroughMark = regexp.MustCompile(`(?m)^@@walkthrough (\d+) rc=(\d+)$`)

// splitWalkthrough cuts bash's output at the markers into each line's output
// and exit status.
func splitWalkthrough(t *testing.T, out string, n int) []lineOutput {
	t.Helper()
	marks := walkthroughMark.FindAllStringSubmatchIndex(out, -1)
	if len(marks) != n {
		t.Fatalf("ran %d of %d walkthrough lines:\n%s", len(marks), n, out)
	}
	res := make([]lineOutput, n)
	from := 0
	for i, m := range marks {
		if got := out[m[2]:m[3]]; got != fmt.Sprint(i) {
			t.Fatalf("walkthrough marker %s where %d was due:\n%s", got, i, out)
		}
		res[i] = lineOutput{text: strings.TrimSpace(out[from:m[0]]), rc: out[m[4]:m[5]]}
		from = m[1]
	}
	return res
}

func indexOf(lines []string, piece string) int {
	for i, l := range lines {
		if strings.Contains(l, piece) {
			return i
		}
	}
	return -1
}
