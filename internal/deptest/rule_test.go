package deptest

import (
	"strings"
	"testing"
)

func TestRule(t *testing.T) {
	c := DepChecker{BadDeps: map[string]string{"github.com/moby": "x", "github.com/affido/affido/manager": "y"}}
	tests := map[string]string{
		"github.com/moby":                          "github.com/moby",
		"github.com/moby/moby/client":              "github.com/moby",
		"github.com/mobyx/y":                       "",
		"github.com/affido/affido/manager/gateway": "github.com/affido/affido/manager",
		"github.com/affido/affido/managerial":      "",
		"github.com/affido/affido/marketplace":     "",
	}
	for pkg, want := range tests {
		if got := c.rule(plain(pkg + " [x.test]")); got != want {
			t.Errorf("rule(%q) = %q, want %q", pkg, got, want)
		}
	}
}

// A forbidden package allowed Via one importer is still refused from any
// other, even when the allowed path reaches it first.
func TestVia(t *testing.T) {
	c := DepChecker{BadDeps: map[string]string{"db": "x"}, Via: map[string][]string{"db": {"facade"}}}
	pkgs := map[string]listed{
		"main":   {ImportPath: "main", Imports: []string{"facade", "cli"}},
		"facade": {ImportPath: "facade", Imports: []string{"db"}},
		"cli":    {ImportPath: "cli", Imports: []string{"db/conn"}},
	}
	got := c.violations(pkgs, "main")
	if len(got) != 1 || strings.Join(got[0], " ") != "main cli db/conn" {
		t.Fatalf("violations = %v, want only main -> cli -> db/conn", got)
	}
	pkgs["cli"] = listed{ImportPath: "cli"}
	if got := c.violations(pkgs, "main"); len(got) != 0 {
		t.Fatalf("violations = %v, want none through the allowed importer alone", got)
	}
}
