package sandboxapi

import (
	"os"
	"strings"
	"testing"
)

func TestValidUser(t *testing.T) {
	tests := map[string]bool{
		"alice":                 true,
		"A_b-9":                 true,
		strings.Repeat("a", 64): true,
		"":                      false,
		strings.Repeat("a", 65): false,
		"pool.0123456789abcdef": false, // a warm-pool sandbox name is never a user id
		"al ice":                false,
		"../x":                  false,
		"alice\n":               false,
		"é":                     false,
	}
	for id, want := range tests {
		if got := ValidUser(id); got != want {
			t.Errorf("ValidUser(%q) = %v, want %v", id, got, want)
		}
	}
}

// Caddy routes /u/<user> by the same pattern: a user id the manager
// accepts always reaches its sandbox, and no other does.
func TestCaddyfileRoutesTheUserPattern(t *testing.T) {
	b, err := os.ReadFile("../../caddy/Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	want := "path_regexp sb ^/u/(" + UserPattern + ")(/.*)?$"
	if !strings.Contains(string(b), want) {
		t.Fatalf("caddy/Caddyfile does not route %q", want)
	}
}
