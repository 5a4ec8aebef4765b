package main

import (
	"testing"

	"github.com/affido/affido/internal/deptest"
)

// The browser sandbox runs what pages send: it holds nothing of the
// manager's or an agent's, and drives no engine.
func TestDeps(t *testing.T) {
	deptest.DepChecker{
		Pkg: "github.com/affido/affido/cmd/affido-browser",
		BadDeps: map[string]string{
			"github.com/affido/affido/manager": "the browser sandbox links none of the manager's code",
			"github.com/affido/affido/agent":   "the browser sandbox links no agent code",
			"github.com/moby":                  "the browser sandbox must not drive the container engine",
			"github.com/docker":                "the browser sandbox must not drive the container engine",
			"github.com/jackc/pgx":             "the browser sandbox reaches no database",
			"github.com/chromedp":              "the manager drives the browser; the sandbox only carries the pipe",
		},
	}.Check(t)
}
