package durable

import (
	"context"
	"errors"
	"fmt"
)

// migrations are the store's schema, one numbered step each, applied in
// order inside one transaction. Never edit a released step; add one.
var migrations = []string{
	// 1: the first layout.
	`CREATE TABLE durable_meta (
		singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
		next_id   INTEGER NOT NULL,
		next_seq  INTEGER NOT NULL
	) STRICT;
	INSERT INTO durable_meta (singleton, next_id, next_seq) VALUES (1, 2, 1);
	CREATE TABLE record_ids (id INTEGER PRIMARY KEY, record_type TEXT NOT NULL) STRICT;
	CREATE TABLE conversations (id INTEGER PRIMARY KEY, record TEXT NOT NULL CHECK (json_valid(record))) STRICT;
	CREATE TABLE entries (
		id              INTEGER PRIMARY KEY,
		conversation_id INTEGER NOT NULL,
		kind            TEXT NOT NULL,
		head            INTEGER,
		commit_seq      INTEGER NOT NULL,
		record          TEXT NOT NULL CHECK (json_valid(record))
	) STRICT;
	CREATE INDEX entries_by_conversation ON entries (conversation_id, id);
	CREATE TABLE tasks (
		id              INTEGER PRIMARY KEY,
		conversation_id INTEGER NOT NULL,
		kind            TEXT NOT NULL,
		state           TEXT NOT NULL CHECK (state IN ('pending', 'running', 'waiting', 'completing', 'terminal')),
		record          TEXT NOT NULL CHECK (json_valid(record))
	) STRICT;
	CREATE INDEX tasks_by_state ON tasks (state, id);
	CREATE TABLE submissions (
		id              INTEGER PRIMARY KEY,
		conversation_id INTEGER NOT NULL,
		request_id      TEXT,
		status          TEXT NOT NULL CHECK (status IN ('queued', 'placed', 'done', 'unanswered')),
		record          TEXT NOT NULL CHECK (json_valid(record))
	) STRICT;
	CREATE UNIQUE INDEX submissions_by_request ON submissions (conversation_id, request_id) WHERE request_id IS NOT NULL;
	CREATE INDEX submissions_by_status ON submissions (status, id);
	CREATE TABLE usage (
		conversation_id INTEGER NOT NULL,
		kind            TEXT NOT NULL,
		name            TEXT NOT NULL,
		input_tokens    INTEGER NOT NULL DEFAULT 0,
		output_tokens   INTEGER NOT NULL DEFAULT 0,
		calls           INTEGER NOT NULL DEFAULT 0,
		PRIMARY KEY (conversation_id, kind, name)
	) STRICT;`,

	// 2: waiting becomes a stored state: tasks gain 'sleeping' and an
	// indexed deadline. SQLite cannot alter a CHECK, so the table is rebuilt.
	`CREATE TABLE tasks_v2 (
		id              INTEGER PRIMARY KEY,
		conversation_id INTEGER NOT NULL,
		kind            TEXT NOT NULL,
		state           TEXT NOT NULL CHECK (state IN ('pending', 'running', 'sleeping', 'waiting', 'completing', 'terminal')),
		deadline        INTEGER,
		record          TEXT NOT NULL CHECK (json_valid(record))
	) STRICT;
	INSERT INTO tasks_v2 (id, conversation_id, kind, state, deadline, record)
		SELECT id, conversation_id, kind, state, NULL, record FROM tasks;
	DROP TABLE tasks;
	ALTER TABLE tasks_v2 RENAME TO tasks;
	CREATE INDEX tasks_by_state ON tasks (state, id);
	CREATE INDEX tasks_by_deadline ON tasks (deadline) WHERE state = 'sleeping';`,

	// 3: small named settings of the host (the current conversation).
	`CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL) STRICT;`,

	// 4: entries of one kind in a conversation, found without reading the
	// rest (is outside text in the context?).
	`CREATE INDEX entries_by_kind ON entries (conversation_id, kind, id);`,

	// 5: search over what the owner and the model wrote (SQLite's FTS5,
	// contentless: the text stays in entries; the index only finds ids),
	// kept by a trigger, filled once for the entries already there.
	`CREATE VIRTUAL TABLE entries_fts USING fts5(text, content='', tokenize='unicode61 remove_diacritics 2');
	INSERT INTO entries_fts (rowid, text)
		SELECT id, json_extract(record, '$.text') FROM entries
		WHERE kind IN ('owner_message', 'assistant_message') AND coalesce(json_extract(record, '$.text'), '') <> '';
	CREATE TRIGGER entries_fts_add AFTER INSERT ON entries
		WHEN NEW.kind IN ('owner_message', 'assistant_message') AND coalesce(json_extract(NEW.record, '$.text'), '') <> ''
		BEGIN INSERT INTO entries_fts (rowid, text) VALUES (NEW.id, json_extract(NEW.record, '$.text')); END;`,

	// 6: notes, named texts of the agent's that belong to no conversation
	// (the owner's notes, an agent's work notes): nothing a conversation
	// does (reset, compaction, delete) touches them.
	`CREATE TABLE notes (name TEXT PRIMARY KEY, version INTEGER NOT NULL, record TEXT NOT NULL CHECK (json_valid(record))) STRICT;`,
}

// SchemaVersion is the schema version this build writes.
var SchemaVersion = len(migrations)

// ErrSchemaTooNew is returned for a database written by newer code.
var ErrSchemaTooNew = errors.New("database schema is newer than this build")

// ErrSchemaTooOld is returned when a database whose schema comes from
// migration files (Postgres) is behind this build: the error names the
// migration the deploy must apply.
var ErrSchemaTooOld = errors.New("database schema is older than this build")

// migrate brings db to version target (SchemaVersion in production). A
// Postgres database is only checked: its schema comes from migration
// files, and the facade refuses DDL at run time.
func migrate(ctx context.Context, db DB, target int) error {
	if db.Dialect() == Postgres {
		return checkSchema(ctx, db, target)
	}
	return db.Transaction(ctx, func(tx Executor) error {
		if err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS durable_schema (
			singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
			version   INTEGER NOT NULL
		) STRICT`); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		current := 0
		row, err := tx.Get(ctx, `SELECT version FROM durable_schema WHERE singleton = 1`)
		switch {
		case err == nil:
			current = int(row["version"].(int64))
		case !errors.Is(err, ErrNoRows):
			return fmt.Errorf("migrate: read version: %w", err)
		}
		if current > len(migrations) {
			return fmt.Errorf("%w: the database is at version %d, this build knows up to %d", ErrSchemaTooNew, current, len(migrations))
		}
		for v := current + 1; v <= target; v++ {
			if err := tx.Exec(ctx, migrations[v-1]); err != nil {
				return fmt.Errorf("migrate to version %d: %w", v, err)
			}
		}
		if target > current {
			if err := tx.Run(ctx, `INSERT INTO durable_schema (singleton, version) VALUES (1, ?)
				ON CONFLICT (singleton) DO UPDATE SET version = excluded.version`, target); err != nil {
				return fmt.Errorf("migrate: write version: %w", err)
			}
		}
		return nil
	})
}

// checkSchema fails unless db's schema is at version target.
func checkSchema(ctx context.Context, db DB, target int) error {
	row, err := db.Get(ctx, `SELECT version FROM durable_schema WHERE singleton = 1`)
	if err != nil {
		return fmt.Errorf("%w: no schema version (%w): apply the agent's migrations from 0001 to %04d", ErrSchemaTooOld, err, target)
	}
	switch current := int(row["version"].(int64)); {
	case current > len(migrations):
		return fmt.Errorf("%w: the database is at version %d, this build knows up to %d", ErrSchemaTooNew, current, len(migrations))
	case current < target:
		return fmt.Errorf("%w: the database is at version %d, this build needs %d: apply migration %04d", ErrSchemaTooOld, current, target, current+1)
	}
	return nil
}
