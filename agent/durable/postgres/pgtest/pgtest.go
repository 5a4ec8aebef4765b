// Package pgtest opens agent storage on the throwaway Postgres the tests
// are given (AFFIDO_TEST_POSTGRES_DSN, which ./verify.sh starts), one
// migrated schema per database path of the suites.
package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"testing"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/postgres"
	"github.com/affido/affido/agent/durable/storetest"
)

// EnvDSN names the variable holding the test database's DSN.
const EnvDSN = "AFFIDO_TEST_POSTGRES_DSN"

// DSN returns the test database, or skips t when none is given.
func DSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(EnvDSN)
	if dsn == "" {
		t.Skip(EnvDSN + " is not set: no Postgres to run the durable suites on (./verify.sh starts one)")
	}
	return dsn
}

// Schema is the agent schema standing for a suite's database path.
func Schema(path string) string {
	sum := sha256.Sum256([]byte(path))
	return "agent_" + hex.EncodeToString(sum[:8])
}

// Opener opens path's schema of dsn, migrated with the real migration
// files first, with o (its Schema set from path). generation, when not
// nil, gives each open its generation (a restarted process is newer).
func Opener(dsn string, o postgres.Options, generation func() int64) storetest.Opener {
	return func(path string) (durable.DB, error) {
		ctx := context.Background()
		o := o
		o.Schema = Schema(path)
		if generation != nil {
			o.Generation = generation()
		}
		if err := postgres.Migrate(ctx, dsn, o.Schema); err != nil {
			return nil, err
		}
		return postgres.Open(ctx, dsn, o)
	}
}
