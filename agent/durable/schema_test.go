package durable_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
)

var ctx = context.Background()

func openDB(t *testing.T, path string) durable.DB {
	t.Helper()
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// A database written by the version-1 build (tasks without 'sleeping') is
// migrated by rebuilding the tasks table, keeping every row.
func TestMigrationRebuildsTasksFromVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v1.db")
	db := openDB(t, path)
	if err := durable.MigrateTo(ctx, db, 1); err != nil {
		t.Fatal(err)
	}
	rec := `{"id":5,"conversation_id":1,"kind":"generation","version":1,"state":"pending","checkpoint":{"phase":"request"},"created_at":"2026-11-01T00:00:00Z"}`
	if err := db.Run(ctx, `INSERT INTO tasks (id, conversation_id, kind, state, record) VALUES (5, 1, 'generation', 'pending', ?)`, rec); err != nil {
		t.Fatal(err)
	}
	if err := db.Run(ctx, `INSERT INTO tasks (id, conversation_id, kind, state, record) VALUES (6, 1, 'generation', 'sleeping', ?)`, rec); err == nil {
		t.Fatal("version 1 accepted a sleeping task")
	}
	if err := db.Run(ctx, `INSERT INTO record_ids (id, record_type) VALUES (5, 'task')`); err != nil {
		t.Fatal(err)
	}
	if err := db.Run(ctx, `UPDATE durable_meta SET next_id = 6`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := durable.OpenStore(ctx, openDB(t, path))
	if err != nil {
		t.Fatalf("open a version-1 file: %v", err)
	}
	defer s.Close()
	task, err := s.Task(ctx, 5)
	if err != nil || task.Kind != "generation" || string(task.Checkpoint) != `{"phase":"request"}` {
		t.Fatalf("task after migration: %+v %v", task, err)
	}
	at := time.Now().Add(time.Minute).UTC()
	task.State, task.Deadline = durable.Sleeping, &at
	if err := s.Commit(ctx, durable.Writes{Tasks: []durable.Task{task}}); err != nil {
		t.Fatalf("sleeping after migration: %v", err)
	}
	if id, _ := s.MintID(); id != 6 {
		t.Fatalf("next ID after migration = %d, want 6", id)
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.db")
	s, err := durable.OpenStore(ctx, openDB(t, path))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := openDB(t, path)
	if err := db.Run(ctx, `UPDATE durable_schema SET version = ?`, durable.SchemaVersion+7); err != nil {
		t.Fatal(err)
	}
	_, err = durable.OpenStore(ctx, db)
	if !errors.Is(err, durable.ErrSchemaTooNew) {
		t.Fatalf("err = %v", err)
	}
	for _, want := range []string{"version " + itoa(durable.SchemaVersion+7), "up to " + itoa(durable.SchemaVersion)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestCorruptDatabaseIsAClearError(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	s, err := durable.OpenStore(ctx, openDB(t, good))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		id, _ := s.MintID()
		if err := s.Commit(ctx, durable.Writes{Entries: []durable.Entry{{ID: id, ConversationID: 1, Kind: durable.OwnerMessage, Text: strings.Repeat("x", 500) + itoa(i)}}}); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"truncated":     data[:len(data)/3],
		"garbage":       []byte("this is not a database, just some text that is long enough to look like a header......"),
		"zeroed header": append(make([]byte, 100), data[100:]...),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name+".db")
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			db, err := sqlite.Open(ctx, p)
			if err == nil {
				_, err = durable.OpenStore(ctx, db)
			}
			if err == nil {
				t.Fatal("a damaged database opened without an error")
			}
			// Never a silent reset: the file is left as it was.
			after, _ := os.ReadFile(p)
			if string(after) != string(b) {
				t.Fatal("opening rewrote the damaged file")
			}
		})
	}
}
