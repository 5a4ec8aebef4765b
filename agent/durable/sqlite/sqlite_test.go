package sqlite_test

import (
	"context"
	"testing"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
	"github.com/affido/affido/agent/durable/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(path string) (durable.DB, error) {
		return sqlite.Open(context.Background(), path)
	})
}
