// Package registrytest opens the registry for tests that need Postgres.
package registrytest

import (
	"os"
	"testing"

	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/migrations"
)

// DSN is AFFIDO_TEST_POSTGRES_DSN, a database a test may migrate and
// write; without it the test is skipped.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("AFFIDO_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Skip("needs Postgres: set AFFIDO_TEST_POSTGRES_DSN")
	}
	return dsn
}

// Store opens and migrates the database DSN names, closed when the test ends.
func Store(t testing.TB) *registry.Store {
	t.Helper()
	store, err := registry.Open(t.Context(), DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ms, err := registry.LoadMigrations(migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Migrate(t.Context(), ms); err != nil {
		t.Fatal(err)
	}
	return store
}
