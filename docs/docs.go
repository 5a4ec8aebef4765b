// Package docs holds the repository's documentation (README.md at the root
// and the pages in this directory) and the code that reads it for tests:
// the README's walkthrough, which the e2e suite runs line by line.
package docs

import (
	"errors"
	"strings"
)

// WalkthroughMarker is the line that precedes the README's walkthrough: a
// fenced sh block whose lines run, in order, on a fresh `./dev.sh up` stack.
const WalkthroughMarker = "<!-- walkthrough -->"

// ErrNoWalkthrough is returned when the marker, or the sh block after it,
// is missing.
var ErrNoWalkthrough = errors.New("no walkthrough: want the line " + WalkthroughMarker + " followed by a ```sh block")

// Walkthrough returns the commands of the walkthrough block in readme, one
// per element: blank and comment-only lines are left out, and a line ending
// in a backslash is joined with the next.
func Walkthrough(readme string) ([]string, error) {
	lines := strings.Split(readme, "\n")
	start := -1
	for i, l := range lines {
		if strings.TrimSpace(l) == WalkthroughMarker {
			start = i + 1
			break
		}
	}
	if start < 0 || start >= len(lines) || strings.TrimSpace(lines[start]) != "```sh" {
		return nil, ErrNoWalkthrough
	}
	var cmds []string
	var cont strings.Builder
	for _, l := range lines[start+1:] {
		t := strings.TrimSpace(l)
		if t == "```" {
			if cont.Len() > 0 {
				return nil, errors.New("walkthrough: the last line ends in a backslash")
			}
			return cmds, nil
		}
		if cont.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if s, ok := strings.CutSuffix(l, `\`); ok {
			cont.WriteString(s)
			continue
		}
		cont.WriteString(l)
		cmds = append(cmds, cont.String())
		cont.Reset()
	}
	return nil, errors.New("walkthrough: the sh block is not closed")
}
