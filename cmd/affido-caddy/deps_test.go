package main

import (
	"testing"

	"github.com/affido/affido/internal/deptest"
)

// The edge routes requests; it asks the manager where a sandbox is over
// HTTP and holds nothing of the manager's or an agent's.
func TestDeps(t *testing.T) {
	deptest.DepChecker{
		Pkg: "github.com/affido/affido/cmd/affido-caddy",
		BadDeps: map[string]string{
			"github.com/affido/affido/manager":              "the edge asks the manager over HTTP (/v1/resolve); it links none of its code",
			"github.com/affido/affido/agent":                "the edge links no agent code",
			"modernc.org/sqlite":                            "SQLite is the agent's store",
			"github.com/moby":                               "the edge must not drive the container engine",
			"github.com/docker":                             "the edge must not drive the container engine",
			"github.com/affido/affido/internal/gatewaytest": "a test double",
		},
	}.Check(t)
}
