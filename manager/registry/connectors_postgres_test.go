package registry_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/affido/affido/manager/connectors/connectorstest"
	"github.com/affido/affido/manager/registry/registrytest"
)

func TestPostgresConnectorStore(t *testing.T) {
	store := registrytest.Store(t)
	n := time.Now().UnixNano()
	alice, bob := fmt.Sprint("calice", n), fmt.Sprint("cbob", n)
	for _, u := range []string{alice, bob} {
		if err := store.EnsureUser(t.Context(), u); err != nil {
			t.Fatal(err)
		}
	}
	connectorstest.Run(t, store, alice, bob)
}
