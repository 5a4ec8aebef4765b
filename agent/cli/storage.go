package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/postgres"
	"github.com/affido/affido/internal/sandboxapi"
)

// openDBFunc is how the agents' storage opens (AFFIDO_AGENT_STORAGE): nil
// for SQLite files on the data volume, or Postgres, one schema per user and
// agent (postgres.AgentSchema) in AFFIDO_AGENT_POSTGRES_DSN, as a newer
// generation than any process of the agent started before this one.
func openDBFunc() (func(context.Context, string, agents.Agent, string) (durable.DB, error), error) {
	switch kind := env(sandboxapi.EnvAgentStorage, "sqlite"); kind {
	case "sqlite":
		return nil, nil
	case "postgres":
		dsn := os.Getenv(sandboxapi.EnvAgentPGDSN)
		if dsn == "" {
			return nil, fmt.Errorf("%s=postgres needs %s", sandboxapi.EnvAgentStorage, sandboxapi.EnvAgentPGDSN)
		}
		generation := time.Now().UnixNano()
		return func(ctx context.Context, user string, a agents.Agent, _ string) (durable.DB, error) {
			if user == "" {
				return nil, errors.New("open postgres storage: the sandbox has no user yet")
			}
			return postgres.Open(ctx, dsn, postgres.Options{Schema: postgres.AgentSchema(user, a.ID), Generation: generation})
		}, nil
	default:
		return nil, fmt.Errorf("%s: want sqlite or postgres, got %q", sandboxapi.EnvAgentStorage, kind)
	}
}

// migrateStorageCommand applies the Postgres migrations of a user's agent:
// the deploy's step, since the agent itself never changes a schema.
func migrateStorageCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate-storage USER AGENT_ID",
		Short: "Apply the agent storage's Postgres migrations (" + sandboxapi.EnvAgentPGDSN + ") for a user's agent",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dsn := os.Getenv(sandboxapi.EnvAgentPGDSN)
			if dsn == "" {
				return fmt.Errorf("migrate-storage needs %s", sandboxapi.EnvAgentPGDSN)
			}
			return postgres.Migrate(cmd.Context(), dsn, postgres.AgentSchema(args[0], args[1]))
		},
	}
}
