package main

import (
	"testing"

	"github.com/affido/affido/internal/deptest"
)

// The agent runs in every user's sandbox, with the user's tools beside it:
// it links none of the manager's powers and none of the edge's.
func TestDeps(t *testing.T) {
	deptest.DepChecker{
		Pkg: "github.com/affido/affido/cmd/affido-agent",
		BadDeps: map[string]string{
			"github.com/affido/affido/manager":              "the agent reaches the manager only through the gateway and the control routes (internal/gatewayapi, internal/sandboxapi)",
			"github.com/affido/affido/caddy":                "Caddy's modules belong to the edge",
			"github.com/caddyserver":                        "the agent is no web server of the edge; it serves its API with net/http",
			"github.com/moby":                               "a sandbox must not drive the container engine",
			"github.com/docker":                             "a sandbox must not drive the container engine",
			"github.com/jackc/pgx":                          "the registry's database is the manager's; the agent reaches only its user's own, through agent/durable/postgres and agent/storage",
			"github.com/affido/affido/internal/gatewaytest": "a test double",
		},
		// Postgres storage (AFFIDO_AGENT_STORAGE=postgres): the facade, and
		// the tunnel through the gateway to the user's own database.
		Via: map[string][]string{"github.com/jackc/pgx": {
			"github.com/affido/affido/agent/durable/postgres",
			"github.com/affido/affido/agent/storage",
		}},
	}.Check(t)
}
