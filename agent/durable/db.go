// Package durable is Affido's durable agent runtime, our Go counterpart of
// Pi Durable: conversations are append-only entries, work runs as tasks that
// commit a checkpoint after every step, and waiting is a stored state. A
// SIGKILL at any point loses nothing that was committed; on reopen, running
// tasks go back to pending with their last checkpoint and continue.
//
// The package has three layers: DB, a small SQL facade with one
// implementation per backend (durable/sqlite); Store, the records on top of
// it; and Harness, which runs tasks.
package durable

import (
	"context"
	"errors"
)

// ErrClosed is returned by every operation on a closed DB, Store or Harness.
var ErrClosed = errors.New("closed")

// ErrLocked is returned by an opener when another store has the database
// open: there is one writer per database, for the store's whole life.
var ErrLocked = errors.New("the database is open in another store")

// ErrNested is returned when a transaction's callback calls the DB itself
// (a nested transaction, or a call outside the tx it was given).
var ErrNested = errors.New("call on the DB from inside its own transaction")

// ErrNoRows is returned by Get when the query matched nothing.
var ErrNoRows = errors.New("no rows")

// ErrLeaseLost is returned by a write of a DB whose writer lease another
// process took: nothing of it is stored, and nothing after it will be.
// The harness stops; the new holder continues from the last commit.
var ErrLeaseLost = errors.New("the storage lease was taken by another process")

// ErrCommitUnknown is returned when the connection dropped during COMMIT:
// the transaction may or may not be stored. The harness treats it as a
// crash: it stops, and the store is reopened and recovered.
var ErrCommitUnknown = errors.New("the connection dropped during COMMIT: the outcome is unknown")

// Fatal reports whether err ends the store's life: after it, no write of
// this process may be trusted to be (or not be) stored.
func Fatal(err error) bool {
	return errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrCommitUnknown)
}

// Dialect is the SQL a DB speaks where SQLite's and Postgres's differ: the
// schema (see migrate) and the few statements in dialect.go. Everything
// else the store writes is the same text on both.
type Dialect int

const (
	// SQLite applies the migrations in schema.go at open.
	SQLite Dialect = iota
	// Postgres takes its schema only from migration files its deploy
	// applies (durable/postgres/migrations); opening checks the version.
	Postgres
)

// Row is one result row, by column name. Integers come back as int64, text
// as string, blobs as []byte, NULL as nil.
type Row map[string]any

// Executor runs SQL. Run, Get and All take one statement with positional ?
// parameters; Exec takes no parameters and may hold several statements.
type Executor interface {
	Exec(ctx context.Context, sql string) error
	Run(ctx context.Context, sql string, args ...any) error
	Get(ctx context.Context, sql string, args ...any) (Row, error)
	All(ctx context.Context, sql string, args ...any) ([]Row, error)
}

// DB is the storage facade the runtime is written against.
//
// Contract, checked by the conformance suite in durable/storetest:
//   - One writer per database: while a DB is open, opening the same database
//     again fails with an error wrapping ErrLocked and writes nothing.
//   - Calls are serialized; a Transaction holds the database
//     until fn returns, and all of its work goes through the tx it is given:
//     calling the DB itself from inside fn fails with ErrNested.
//   - Transaction commits when fn returns nil and rolls back when it returns
//     an error or panics, so a failed transaction leaves nothing behind; the
//     error fn returned is returned unchanged.
//   - Committed transactions survive a process crash.
//   - Exec runs its statements in order and stops at the first that fails,
//     returning that error.
//   - A transaction whose ctx is cancelled fails and leaves nothing behind.
//   - NULL, blobs, long text and integers up to MaxID round-trip exactly.
//   - After Close, every call fails with an error wrapping ErrClosed;
//     closing again is a no-op.
//   - A DB shared with other processes fences its writes: once another
//     process holds the database, every write fails with ErrLeaseLost.
//     A commit whose outcome is unknown fails with ErrCommitUnknown.
type DB interface {
	Executor
	Transaction(ctx context.Context, fn func(tx Executor) error) error
	Dialect() Dialect
	Close() error
}
