package browser

import (
	"errors"
	"strings"
	"testing"
)

// The owner's input is checked before it reaches a tab. Tried: a tap off
// the picture, NaN, a key the live view has not, control characters and
// too much text, an address that is not the web, no scroll, an unknown
// kind; each is a bad request.
func TestOwnerInputIsChecked(t *testing.T) {
	nan := 0.0
	nan /= nan
	bad := []Input{
		{Kind: "tap", X: 1.5, Y: 0.5}, {Kind: "tap", X: -0.1}, {Kind: "tap", X: nan, Y: 0.5},
		{Kind: "key", Key: "F13"}, {Kind: "key"},
		{Kind: "text"}, {Kind: "text", Text: "a\x00b"}, {Kind: "text", Text: "\x1b[2J"}, {Kind: "text", Text: strings.Repeat("x", TextMax+1)},
		{Kind: "open", Text: "file:///etc/passwd"}, {Kind: "open", Text: "javascript:alert(1)"}, {Kind: "open", Text: "/relative"},
		{Kind: "scroll"}, {Kind: "scroll", DY: 50},
		{Kind: "wiggle"}, {},
	}
	for _, in := range bad {
		if err := checkInput(in); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%+v: %v, want a bad request", in, err)
		}
	}
	good := []Input{{Kind: "tap", X: 0, Y: 1}, {Kind: "key", Key: "Enter"}, {Kind: "text", Text: "pässword\twith tab"},
		{Kind: "open", Text: "https://shop.example/login"}, {Kind: "scroll", DY: -0.6}, {Kind: "back"}}
	for _, in := range good {
		if err := checkInput(in); err != nil {
			t.Errorf("%+v: %v", in, err)
		}
	}
	if err := checkAgent(""); !errors.Is(err, ErrBadRequest) {
		t.Errorf("no agent: %v", err)
	}
}
