package controlkey

import (
	"net/http"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

const key = "0123456789abcdef0123456789abcdef"

// An unset or short key stops Caddy from starting: the listener fails
// closed instead of matching everyone (or no key at all).
func TestShortKeyIsRefused(t *testing.T) {
	for _, k := range []string{"", "{$AFFIDO_UNSET_CONTROL_KEY}", key[:MinKeyLen-1]} {
		m := &Matcher{Key: k}
		if err := m.Provision(caddy.Context{}); err == nil || !strings.Contains(err.Error(), "AFFIDO_CONTROL_KEY") {
			t.Errorf("key %q: %v", k, err)
		}
	}
}

// Tried: no header, an empty one, a guess, the key with a byte more or
// less, the key twice, and the key in another header.
func TestMatchesTheKeyAlone(t *testing.T) {
	m := &Matcher{Key: key}
	if err := m.Provision(caddy.Context{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		h    http.Header
		want bool
	}{
		{http.Header{Header: {key}}, true},
		{http.Header{}, false},
		{http.Header{Header: {""}}, false},
		{http.Header{Header: {"guess"}}, false},
		{http.Header{Header: {key + "0"}}, false},
		{http.Header{Header: {key[:len(key)-1]}}, false},
		{http.Header{Header: {key, key}}, false},
		{http.Header{"X-Affido-Caller": {key}}, false},
	} {
		r := &http.Request{Header: c.h}
		if got := m.Match(r); got != c.want {
			t.Errorf("headers %v: match %v, want %v", c.h, got, c.want)
		}
	}
}
