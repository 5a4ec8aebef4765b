package deptest

import "testing"

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
