// Package sqlite implements durable.DB on SQLite (modernc.org/sqlite, pure
// Go): WAL journal, synchronous=FULL, a busy timeout, and BEGIN IMMEDIATE
// transactions over a single connection, so there is exactly one writer.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/internal/goid"
)

// DB is a SQLite database file.
type DB struct {
	mu       sync.Mutex    // serializes every call; one writer
	txOwner  atomic.Uint64 // goroutine running a Transaction's callback, 0 when none
	db       *sql.DB
	lockFile *os.File // flock'ed PATH.lock, held while open: one store per database
	closed   bool
}

var _ durable.DB = (*DB)(nil)

// Open opens (creating if needed) the database at path. It holds an
// exclusive lock on PATH.lock until Close: a second Open of the same
// database, from this process or another, fails with durable.ErrLocked
// before touching the database. The kernel releases the lock when the
// process dies, so a crash never leaves the database locked.
func Open(ctx context.Context, path string) (*DB, error) {
	return OpenWith(ctx, path, Options{})
}

// Options tune how a database is opened.
type Options struct {
	// Synchronous is SQLite's synchronous setting: "FULL" (the default:
	// every commit is fsynced before it returns, so a submission the API
	// acknowledged survives the machine losing power) or "NORMAL" (in WAL
	// mode a commit survives the process dying at any point, but the last
	// ones may be lost with the machine). FULL costs about 0.16 ms more per
	// commit here; see the README's durability notes.
	Synchronous string
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, path string, o Options) (*DB, error) {
	switch o.Synchronous {
	case "":
		o.Synchronous = "FULL"
	case "NORMAL", "FULL":
	default:
		return nil, fmt.Errorf("open sqlite %s: synchronous must be NORMAL or FULL, not %q", path, o.Synchronous)
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: lock file: %w", path, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("open sqlite %s: %w", path, durable.ErrLocked)
		}
		return nil, fmt.Errorf("open sqlite %s: lock: %w", path, err)
	}
	d, err := open(ctx, path, o)
	if err != nil {
		lock.Close()
		return nil, err
	}
	d.lockFile = lock
	return d, nil
}

func open(ctx context.Context, path string, o Options) (*DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+o.Synchronous+")")
	q.Add("_pragma", "foreign_keys(1)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	// Touch the file now so a corrupt or unreadable database fails here,
	// with a clear error, rather than on first use.
	var check string
	if err := db.QueryRowContext(ctx, "PRAGMA quick_check").Scan(&check); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if check != "ok" {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: integrity check failed: %s", path, check)
	}
	return &DB{db: db}, nil
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (d *DB) lock() error {
	if id := d.txOwner.Load(); id != 0 && id == goid.Current() {
		return fmt.Errorf("sqlite: %w", durable.ErrNested) // it would wait for itself forever
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fmt.Errorf("sqlite: %w", durable.ErrClosed)
	}
	return nil
}

// Exec runs one or more statements without parameters.
func (d *DB) Exec(ctx context.Context, q string) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.mu.Unlock()
	return exec(ctx, d.db, q)
}

// Run runs one statement.
func (d *DB) Run(ctx context.Context, q string, args ...any) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.mu.Unlock()
	return run(ctx, d.db, q, args...)
}

// Get returns the first row, or durable.ErrNoRows.
func (d *DB) Get(ctx context.Context, q string, args ...any) (durable.Row, error) {
	if err := d.lock(); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	return get(ctx, d.db, q, args...)
}

// All returns every row.
func (d *DB) All(ctx context.Context, q string, args ...any) ([]durable.Row, error) {
	if err := d.lock(); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	return all(ctx, d.db, q, args...)
}

// Transaction runs fn in a BEGIN IMMEDIATE transaction.
func (d *DB) Transaction(ctx context.Context, fn func(tx durable.Executor) error) (err error) {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.mu.Unlock()
	sqlTx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: begin: %w", err)
	}
	t := &tx{tx: sqlTx}
	d.txOwner.Store(goid.Current())
	defer func() {
		d.txOwner.Store(0)
		t.done = true
		if p := recover(); p != nil {
			_ = sqlTx.Rollback()
			panic(p)
		}
		if err != nil {
			if rerr := sqlTx.Rollback(); rerr != nil {
				err = errors.Join(err, fmt.Errorf("sqlite: rollback: %w", rerr))
			}
			return
		}
		if cerr := sqlTx.Commit(); cerr != nil {
			err = fmt.Errorf("sqlite: commit: %w", cerr)
		}
	}()
	return fn(t)
}

// Dialect is SQLite's: the store migrates the file itself.
func (d *DB) Dialect() durable.Dialect { return durable.SQLite }

// Close checkpoints the WAL into the database file and closes it.
func (d *DB) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	_, _ = d.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)")
	err := d.db.Close()
	if d.lockFile != nil {
		d.lockFile.Close() // releases the flock
	}
	return err
}

type tx struct {
	tx   *sql.Tx
	done bool
}

func (t *tx) check() error {
	if t.done {
		return fmt.Errorf("sqlite: transaction is over: %w", durable.ErrClosed)
	}
	return nil
}

func (t *tx) Exec(ctx context.Context, q string) error {
	if err := t.check(); err != nil {
		return err
	}
	return exec(ctx, t.tx, q)
}

func (t *tx) Run(ctx context.Context, q string, args ...any) error {
	if err := t.check(); err != nil {
		return err
	}
	return run(ctx, t.tx, q, args...)
}

func (t *tx) Get(ctx context.Context, q string, args ...any) (durable.Row, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	return get(ctx, t.tx, q, args...)
}

func (t *tx) All(ctx context.Context, q string, args ...any) ([]durable.Row, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	return all(ctx, t.tx, q, args...)
}

func exec(ctx context.Context, e execer, q string) error {
	if _, err := e.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("sqlite: exec: %w", err)
	}
	return nil
}

func run(ctx context.Context, e execer, q string, args ...any) error {
	if _, err := e.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("sqlite: run: %w", err)
	}
	return nil
}

func get(ctx context.Context, e execer, q string, args ...any) (durable.Row, error) {
	rows, err := all(ctx, e, q, args...)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, durable.ErrNoRows
	}
	return rows[0], nil
}

func all(ctx context.Context, e execer, q string, args ...any) ([]durable.Row, error) {
	rows, err := e.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: query: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []durable.Row
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("sqlite: scan: %w", err)
		}
		r := make(durable.Row, len(cols))
		for i, c := range cols {
			r[c] = vals[i]
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: rows: %w", err)
	}
	return out, nil
}
