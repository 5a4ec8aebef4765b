package main

import (
	"testing"

	"github.com/affido/affido/internal/deptest"
)

// The manager serves every user: it holds no agent's state and runs no
// agent's code; it speaks to agents only over their API.
func TestDeps(t *testing.T) {
	deptest.DepChecker{
		Pkg: "github.com/affido/affido/cmd/affido",
		BadDeps: map[string]string{
			"github.com/affido/affido/agent":                "the manager speaks to agents only over HTTP (internal/sandboxapi, internal/gatewayapi); an agent's durable state lives in its sandbox",
			"modernc.org/sqlite":                            "SQLite is the agent's store; the manager's is Postgres",
			"github.com/affido/affido/caddy":                "Caddy's modules belong to the edge",
			"github.com/affido/affido/internal/gatewaytest": "a test double",
		},
	}.Check(t)
}
