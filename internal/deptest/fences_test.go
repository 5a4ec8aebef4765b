package deptest_test

import (
	"testing"

	"github.com/affido/affido/internal/deptest"
)

// The agent's tests and the manager's tests do not import each other's
// packages: each side is tested against a double of the other
// (internal/gatewaytest for the gateway; fakes of the agent's control
// routes in manager/agentclient), and the contract both doubles speak is
// written once in internal/gatewayapi and internal/sandboxapi. The real
// thing meets the real thing in e2e-test only.
func TestTestsKeepToTheirSide(t *testing.T) {
	for _, c := range []deptest.DepChecker{
		{Pkg: "github.com/affido/affido/agent/...", Test: true, BadDeps: map[string]string{
			"github.com/affido/affido/manager": "the agent's tests use a double of the manager's side (internal/gatewaytest), not the manager's code",
		}},
		{Pkg: "github.com/affido/affido/manager/...", Test: true, BadDeps: map[string]string{
			"github.com/affido/affido/agent": "the manager's tests use a double of the agent's side, not the agent's code",
		}},
	} {
		t.Run(c.Pkg, c.Check)
	}
}
