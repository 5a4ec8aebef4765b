package sqlite_test

import (
	"context"
	"testing"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
	"github.com/affido/affido/agent/durable/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, path string) durable.DB {
		db, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		return db
	})
}
