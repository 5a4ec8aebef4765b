package durable_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/postgres"
	"github.com/affido/affido/agent/durable/postgres/pgtest"
	"github.com/affido/affido/agent/durable/sqlite"
)

// A store with work in it: turns with a tool call (entries, tasks,
// submissions, usage), a renamed conversation.
func busyStore(t *testing.T, path string) (durable.DB, *durable.Store) {
	t.Helper()
	ctx := t.Context()
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	store, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	tool := durable.Tool{Name: "add", Safe: true, Execute: func(context.Context, durable.ToolCallContext, json.RawMessage) (durable.ToolResult, error) {
		return durable.ToolResult{Output: "3"}, nil
	}}
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		if lastMsg(req).Role == "tool" {
			return durable.ModelResponse{Text: "it is 3, café"}, nil
		}
		return durable.ModelResponse{ToolCalls: []durable.ToolCall{{ID: "c1", Name: "add", Arguments: json.RawMessage(`{"a":1,"b":2}`)}}}, nil
	})
	h, err := durable.Open(ctx, store, durable.Options{Model: model, DefaultModel: "m", Tools: []durable.Tool{tool}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Resume(); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"add 1 and 2", "tulips and daffodils", "once more"} {
		sub, err := h.Submit(ctx, durable.RootConversation, durable.Input{Text: text, RequestID: text})
		if err != nil {
			t.Fatal(err)
		}
		if sub, err = h.WaitSubmission(ctx, sub.ID); err != nil || sub.Status != durable.Done {
			t.Fatalf("%+v %v", sub, err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	store, err = durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return db, store
}

// SQLite to Postgres and back: every table the same at each hop, the
// copies open as stores, and the SQLite copy's search index is rebuilt
// from its entries. A copy into a store that holds something replaces it.
func TestCopyBetweenBackends(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	src, srcStore := busyStore(t, filepath.Join(dir, "src.db"))
	want, err := srcStore.EntryCount(ctx, durable.RootConversation)
	if err != nil || want < 9 {
		t.Fatalf("source: %d entries, %v", want, err)
	}

	pgtest.DSN(t)
	pg, err := pgtest.Opener(os.Getenv(pgtest.EnvDSN), postgres.Options{}, nil)(filepath.Join(dir, "pg"))
	if err != nil {
		t.Fatal(err)
	}
	pgStore, err := durable.OpenStore(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer pgStore.Close()
	rows, err := durable.Copy(ctx, src, pg)
	if err != nil {
		t.Fatal(err)
	}
	if err := durable.Compare(ctx, src, pg); err != nil || rows < int(want) {
		t.Fatalf("after SQLite to Postgres (%d rows): %v", rows, err)
	}

	back, err := sqlite.Open(ctx, filepath.Join(dir, "back.db"))
	if err != nil {
		t.Fatal(err)
	}
	backStore, err := durable.OpenStore(ctx, back)
	if err != nil {
		t.Fatal(err)
	}
	defer backStore.Close()
	// Something already there is replaced, not kept beside the copy.
	if _, err := durable.Copy(ctx, pg, back); err != nil {
		t.Fatal(err)
	}
	if _, err := durable.Copy(ctx, pg, back); err != nil {
		t.Fatal(err)
	}
	if err := durable.Compare(ctx, src, back); err != nil {
		t.Fatalf("after Postgres to SQLite: %v", err)
	}
	if n, err := backStore.EntryCount(ctx, durable.RootConversation); err != nil || n != want {
		t.Fatalf("the copy's store reads %d entries (%v), want %d", n, err, want)
	}
	wantHits, err := srcStore.Search(ctx, "daffodils", 10)
	if err != nil || len(wantHits) == 0 {
		t.Fatalf("search in the source: %d hits, %v", len(wantHits), err)
	}
	hits, err := backStore.Search(ctx, "daffodils", 10)
	if err != nil || len(hits) != len(wantHits) {
		t.Fatalf("search in the SQLite copy (copied twice): %d hits, %v; want the source's %d", len(hits), err, len(wantHits))
	}
}
