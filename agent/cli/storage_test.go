package cli

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/postgres"
	"github.com/affido/affido/agent/durable/postgres/pgtest"
	"github.com/affido/affido/internal/sandboxapi"
)

func TestStorageSwitch(t *testing.T) {
	cases := []struct {
		storage, dsn string
		postgres     bool
		err          string
	}{
		{"", "", false, ""},
		{"sqlite", "", false, ""},
		{"postgres", "host=/nowhere", true, ""},
		{"postgres", "", false, sandboxapi.EnvAgentPGDSN},
		{"mysql", "", false, "want sqlite or postgres"},
	}
	for _, c := range cases {
		t.Setenv(sandboxapi.EnvAgentStorage, c.storage)
		t.Setenv(sandboxapi.EnvAgentPGDSN, c.dsn)
		open, err := openDBFunc()
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want an error saying %q", c.storage, err, c.err)
			}
			continue
		}
		if err != nil || (open != nil) != c.postgres {
			t.Errorf("%q: opener %v, %v", c.storage, open != nil, err)
		}
	}
}

// An agent on Postgres starts only once its schema is migrated, and then
// opens a store there.
func TestStorageSwitchOpensPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	t.Setenv(sandboxapi.EnvAgentStorage, "postgres")
	t.Setenv(sandboxapi.EnvAgentPGDSN, dsn)
	open, err := openDBFunc()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	user := "u-" + strings.ReplaceAll(t.Name(), "/", "-") + pgtest.Schema(t.TempDir())
	main := agents.Agent{ID: agents.Main, Name: "main"}
	if _, err := open(ctx, user, main, ""); !errors.Is(err, durable.ErrSchemaTooOld) {
		t.Fatalf("open before the migrations: %v, want ErrSchemaTooOld", err)
	}
	cmd := migrateStorageCommand()
	cmd.SetArgs([]string{user, main.ID})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatal(err)
	}
	db, err := open(ctx, user, main, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if db.Dialect() != durable.Postgres || postgres.AgentSchema(user, main.ID) == postgres.AgentSchema(user+"x", main.ID) {
		t.Fatal("not one schema per user and agent")
	}
}
