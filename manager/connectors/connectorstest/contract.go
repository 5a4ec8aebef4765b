package connectorstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/manager/connectors"
)

// Run is the contract every connectors.Store passes. The users alice and
// bob must exist in store (a registry's foreign key) and own no connector.
func Run(t *testing.T, store connectors.Store, alice, bob string) {
	ctx := t.Context()
	tool := connectors.Tool{Name: "echo", Description: "Echo.", InputSchema: json.RawMessage(`{"type":"object"}`), Hash: "h1", Mode: connectors.Off, Usable: true}
	c, err := store.AddConnector(ctx, connectors.Connector{User: alice, Agent: "main", Name: "one", URL: "https://mcp.example/",
		HeaderName: "X-Key", Secret: "the-secret", HasSecret: true, Tools: []connectors.Tool{tool}})
	if err != nil || c.ID == 0 || c.CreatedAt.IsZero() || c.Secret != "the-secret" || !c.HasSecret || len(c.Tools) != 1 {
		t.Fatalf("add: %+v, %v", c, err)
	}
	if _, err := store.AddConnector(ctx, connectors.Connector{User: alice, Agent: "main", Name: "one", URL: "https://other/"}); !errors.Is(err, connectors.ErrExists) {
		t.Fatalf("the same name twice: %v", err)
	}
	if _, err := store.AddConnector(ctx, connectors.Connector{User: alice, Agent: "helper", Name: "one", URL: "https://other/"}); err != nil {
		t.Fatalf("the same name for another agent: %v", err)
	}
	if list, err := store.Connectors(ctx, alice, "main"); err != nil || len(list) != 1 || list[0].ID != c.ID {
		t.Fatalf("alice's main: %+v, %v", list, err)
	}
	if list, err := store.Connectors(ctx, alice, ""); err != nil || len(list) != 2 || list[0].Agent != "helper" {
		t.Fatalf("all of alice's, by agent: %+v, %v", list, err)
	}
	if list, err := store.Connectors(ctx, bob, ""); err != nil || len(list) != 0 {
		t.Fatalf("bob's: %+v, %v", list, err)
	}
	if _, err := store.Connector(ctx, bob, c.ID); !errors.Is(err, connectors.ErrNotFound) {
		t.Fatalf("alice's connector read as bob's: %v", err)
	}
	if err := store.RemoveConnector(ctx, bob, c.ID); !errors.Is(err, connectors.ErrNotFound) {
		t.Fatalf("alice's connector removed as bob's: %v", err)
	}
	if _, err := store.UpdateTools(ctx, bob, c.ID, time.Time{}, func(t []connectors.Tool) ([]connectors.Tool, error) { return nil, nil }); !errors.Is(err, connectors.ErrNotFound) {
		t.Fatalf("alice's connector changed as bob's: %v", err)
	}
	// A failing change writes nothing.
	boom := errors.New("boom")
	if _, err := store.UpdateTools(ctx, alice, c.ID, time.Now(), func(ts []connectors.Tool) ([]connectors.Tool, error) {
		return nil, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failing change: %v", err)
	}
	// Concurrent changes never lose one another.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, err := store.UpdateTools(ctx, alice, c.ID, time.Time{}, func(ts []connectors.Tool) ([]connectors.Tool, error) {
				return append(ts, connectors.Tool{Name: fmt.Sprint("t", i), Mode: connectors.Off}), nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	listed := time.Now().UTC().Truncate(time.Millisecond)
	got, err := store.UpdateTools(ctx, alice, c.ID, listed, func(ts []connectors.Tool) ([]connectors.Tool, error) {
		ts[0].Mode, ts[0].Pinned = connectors.Allow, ts[0].Hash
		return ts, nil
	})
	if err != nil || len(got.Tools) != 9 || got.Tools[0].Mode != connectors.Allow || got.Tools[0].Pinned != "h1" || !got.ListedAt.Equal(listed) {
		t.Fatalf("after the changes: %+v, %v", got, err)
	}
	// A schema comes back as the same JSON, not always the same bytes (jsonb).
	if again, _ := store.Connector(ctx, alice, c.ID); len(again.Tools) != 9 || compact(again.Tools[0].InputSchema) != `{"type":"object"}` {
		t.Fatalf("read back: %+v", again)
	}
	if err := store.RemoveConnector(ctx, alice, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Connector(ctx, alice, c.ID); !errors.Is(err, connectors.ErrNotFound) {
		t.Fatalf("removed: %v", err)
	}
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}
