package server

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A conversation is named after its first prompt: the first line, spaces
// folded, cut at a word with an ellipsis when long.
func TestPromptTitle(t *testing.T) {
	long := strings.Repeat("word ", 30)
	unbroken := strings.Repeat("x", 200)
	for _, c := range []struct{ in, want string }{
		{"is the homelab OK?", "is the homelab OK?"},
		{"  check the backups\nand then tell me", "check the backups"},
		{"tabs\tand   spaces", "tabs and spaces"},
		{long, strings.TrimSpace(strings.Repeat("word ", 12)) + "…"},
		{unbroken, strings.Repeat("x", titleMax) + "…"},
		{"héllo wörld ünïcode " + strings.Repeat("é", 80), "héllo wörld ünïcode " + strings.Repeat("é", 40) + "…"},
	} {
		got := promptTitle(c.in)
		if got != c.want {
			t.Errorf("promptTitle(%.30q) = %q, want %q", c.in, got, c.want)
		}
		if n := utf8.RuneCountInString(got); n > titleMax+1 || !utf8.ValidString(got) {
			t.Errorf("promptTitle(%.30q): %d characters, valid %v", c.in, n, utf8.ValidString(got))
		}
	}
}
