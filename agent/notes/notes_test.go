package notes_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/affido/affido/agent/notes"
)

func TestCheckBoundsNotes(t *testing.T) {
	cases := []struct {
		name string
		text string
		ok   bool
	}{
		{"empty", "", true},
		{"at the bound", strings.Repeat("x", notes.MaxBytes), true},
		{"one byte over", strings.Repeat("x", notes.MaxBytes+1), false},
		{"multi-byte letters over the bound in bytes", strings.Repeat("é", notes.MaxBytes/2+1), false},
		{"invalid UTF-8", "tea \xff", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := notes.Check(c.text)
			if (err == nil) != c.ok || (err != nil && !errors.Is(err, notes.ErrInvalid)) {
				t.Fatalf("Check: %v, want ok=%v", err, c.ok)
			}
		})
	}
}
