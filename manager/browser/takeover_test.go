package browser

import (
	"errors"
	"strings"
	"testing"
)

// The owner's input is checked before it reaches a tab. Tried: no host
// (the site of the picture acted on), a tap off the picture, NaN, a key
// the live view has not, control characters and too much text, an
// address that is not the web, no scroll, an unknown kind, agent names
// that are not names; each is a bad request.
func TestOwnerInputIsChecked(t *testing.T) {
	nan := 0.0
	nan /= nan
	const h = "shop.example"
	bad := []Input{
		{Kind: "text", Text: "no host"}, {Kind: "tap", X: 0.5, Y: 0.5},
		{Kind: "tap", X: 1.5, Y: 0.5, Host: h}, {Kind: "tap", X: -0.1, Host: h}, {Kind: "tap", X: nan, Y: 0.5, Host: h},
		{Kind: "key", Key: "F13", Host: h}, {Kind: "key", Host: h},
		{Kind: "text", Host: h}, {Kind: "text", Text: "a\x00b", Host: h}, {Kind: "text", Text: "\x1b[2J", Host: h}, {Kind: "text", Text: strings.Repeat("x", TextMax+1), Host: h},
		{Kind: "open", Text: "file:///etc/passwd"}, {Kind: "open", Text: "javascript:alert(1)"}, {Kind: "open", Text: "/relative"},
		{Kind: "scroll", Host: h}, {Kind: "scroll", DY: 50, Host: h},
		{Kind: "wiggle", Host: h}, {},
	}
	for _, in := range bad {
		if err := checkInput(in); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%+v: %v, want a bad request", in, err)
		}
	}
	good := []Input{{Kind: "tap", X: 0, Y: 1, Host: h}, {Kind: "key", Key: "Enter", Host: h}, {Kind: "text", Text: "pässword\twith tab", Host: h},
		{Kind: "open", Text: "https://shop.example/login"}, {Kind: "scroll", DY: -0.6, Host: h}, {Kind: "back", Host: h}}
	for _, in := range good {
		if err := checkInput(in); err != nil {
			t.Errorf("%+v: %v", in, err)
		}
	}
	for _, a := range []string{"", "Main", "../main", "main/x", strings.Repeat("a", 33)} {
		if err := checkAgent(a); !errors.Is(err, ErrBadRequest) {
			t.Errorf("agent %q: %v", a, err)
		}
	}
}
