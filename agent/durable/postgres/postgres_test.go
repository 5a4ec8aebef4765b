package postgres_test

import (
	"testing"

	"github.com/affido/affido/agent/durable/postgres"
	"github.com/affido/affido/agent/durable/postgres/pgtest"
	"github.com/affido/affido/agent/durable/storetest"
)

func TestConformancePostgres(t *testing.T) {
	storetest.Run(t, pgtest.Opener(pgtest.DSN(t), postgres.Options{AllowDDL: true, Generation: 1}, nil))
}
