// Package postgres implements durable.DB on Postgres (pgx), so the durable
// runtime runs unchanged over a database shared by many hosts: one agent's
// tables live in a schema of their own, over one connection, one operation
// at a time. The store's SQL is written for SQLite; this facade turns its
// ? placeholders into $n and INSERT OR IGNORE into ON CONFLICT DO NOTHING,
// and integers come back as int64, as SQLite's do.
//
// The schema comes only from the migration files in migrations/ (Migrate,
// run by the deploy): the facade refuses DDL at run time.
//
// One writer per agent is kept by a lease with a fence (lease.go): every
// transaction renews it first and holds its row lock until COMMIT, so a
// process that lost it cannot commit anything (durable.ErrLeaseLost).
//
// A connection that drops before COMMIT is reopened and the transaction
// runs again (nothing of it was stored); one that drops during COMMIT
// fails with durable.ErrCommitUnknown, which the harness treats as a crash.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/internal/goid"
)

// ErrDDL is returned for a statement that would change the schema: the
// schema comes only from the migration files.
var ErrDDL = errors.New("schema changes come only from the migration files")

// Options say which agent's storage to open, and as which writer.
type Options struct {
	// Schema is the agent's schema (its search_path), migrated by Migrate.
	Schema string
	// Generation orders the processes that may run this agent: a newer
	// one (a restarted container) takes the lease from an older one.
	Generation int64
	// Holder names this writer in the lease; by default host, pid and a
	// random part, unique to this Open.
	Holder string
	// LeaseTTL is how long the lease lasts unless renewed (60 s); an idle
	// DB renews it every third of that.
	LeaseTTL time.Duration
	// AllowDDL lets Exec change the schema. Only the conformance suite's
	// scratch tables need it; an agent never sets it.
	AllowDDL bool
	// Config adjusts the connection configuration (tests drop the
	// connection at chosen moments through its DialFunc).
	Config func(*pgx.ConnConfig)
}

// maxAttempts bounds how often a transaction runs again after its
// connection dropped before COMMIT.
const maxAttempts = 3

// finishTimeout bounds COMMIT and ROLLBACK, which run whatever the
// caller's context says: a commit cut short by a cancel would be unknown.
const finishTimeout = 30 * time.Second

// DB is one agent's storage in Postgres.
type DB struct {
	mu      sync.Mutex    // serializes every call: one operation at a time
	txOwner atomic.Uint64 // goroutine running a Transaction's callback, 0 when none
	cfg     *pgx.ConnConfig
	o       Options
	conn    *pgx.Conn // nil or closed: reconnect on next use
	closed  bool
	lost    error // ErrLeaseLost once another process took the lease

	stopRenew chan struct{}
	stopOnce  sync.Once
	renewDone chan struct{}
}

var _ durable.DB = (*DB)(nil)

// Open connects to dsn, in o.Schema, and takes the agent's lease: it fails
// with durable.ErrLocked while another writer holds it (see lease.go).
func Open(ctx context.Context, dsn string, o Options) (*DB, error) {
	if o.Schema == "" {
		return nil, errors.New("open postgres: no schema")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{o.Schema}.Sanitize()
	if o.Config != nil {
		o.Config(cfg)
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 60 * time.Second
	}
	if o.Holder == "" {
		o.Holder = defaultHolder()
	}
	d := &DB{cfg: cfg, o: o, stopRenew: make(chan struct{}), renewDone: make(chan struct{})}
	if err := d.take(ctx); err != nil {
		if d.conn != nil {
			d.conn.Close(context.Background())
		}
		return nil, fmt.Errorf("open postgres %s: %w", o.Schema, err)
	}
	go d.renewWhileOpen()
	return d, nil
}

// Dialect is Postgres's: the schema comes from migration files.
func (d *DB) Dialect() durable.Dialect { return durable.Postgres }

func (d *DB) lock() error {
	if id := d.txOwner.Load(); id != 0 && id == goid.Current() {
		return fmt.Errorf("postgres: %w", durable.ErrNested) // it would wait for itself forever
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fmt.Errorf("postgres: %w", durable.ErrClosed)
	}
	return nil
}

// connection returns the open connection, reconnecting after a drop.
// Caller holds mu.
func (d *DB) connection(ctx context.Context) (*pgx.Conn, error) {
	if d.conn != nil && !d.conn.IsClosed() {
		return d.conn, nil
	}
	conn, err := pgx.ConnectConfig(ctx, d.cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	d.conn = conn
	return conn, nil
}

// dropped reports whether an operation failed because the connection went
// away (rather than because the caller gave up or the SQL failed).
func dropped(ctx context.Context, conn *pgx.Conn) bool {
	return conn.IsClosed() && ctx.Err() == nil
}

// Exec runs statements without parameters, each its own transaction.
func (d *DB) Exec(ctx context.Context, q string) error {
	stmts, err := d.statements(q)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if err := d.Transaction(ctx, func(t durable.Executor) error { return t.(*tx).exec(ctx, s) }); err != nil {
			return err
		}
	}
	return nil
}

// Run runs one statement in a transaction of its own, fenced by the lease.
func (d *DB) Run(ctx context.Context, q string, args ...any) error {
	return d.Transaction(ctx, func(t durable.Executor) error { return t.Run(ctx, q, args...) })
}

// Get returns the first row, or durable.ErrNoRows.
func (d *DB) Get(ctx context.Context, q string, args ...any) (durable.Row, error) {
	return first(d.All(ctx, q, args...))
}

// All returns every row. A read that lost its connection runs again once.
func (d *DB) All(ctx context.Context, q string, args ...any) ([]durable.Row, error) {
	if err := d.lock(); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	for attempt := 1; ; attempt++ {
		conn, err := d.connection(ctx)
		if err != nil {
			return nil, err
		}
		rows, err := d.query(ctx, conn, q, args...)
		if err != nil && dropped(ctx, conn) && attempt < maxAttempts {
			continue
		}
		return rows, err
	}
}

// Transaction runs fn in a transaction that first renews the lease (and
// holds its row lock until COMMIT). It runs fn again, on a new connection,
// when the connection dropped before COMMIT.
func (d *DB) Transaction(ctx context.Context, fn func(tx durable.Executor) error) error {
	if err := d.lock(); err != nil {
		return err
	}
	defer d.mu.Unlock()
	if d.lost != nil {
		return d.lost
	}
	for attempt := 1; ; attempt++ {
		conn, err := d.connection(ctx)
		if err != nil {
			return err
		}
		err = d.attempt(ctx, conn, fn)
		if err != nil && !errors.Is(err, durable.ErrCommitUnknown) && dropped(ctx, conn) && attempt < maxAttempts {
			continue
		}
		if errors.Is(err, durable.ErrLeaseLost) {
			d.lost = err
		}
		return err
	}
}

// attempt runs fn once in a transaction on conn. Caller holds mu.
func (d *DB) attempt(ctx context.Context, conn *pgx.Conn, fn func(tx durable.Executor) error) (err error) {
	pgTx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: begin: %w", err)
	}
	t := &tx{d: d, tx: pgTx, conn: conn}
	d.txOwner.Store(goid.Current())
	defer func() {
		d.txOwner.Store(0)
		t.done = true
		if p := recover(); p != nil {
			d.rollback(ctx, pgTx, conn)
			panic(p)
		}
		if err != nil {
			if rerr := d.rollback(ctx, pgTx, conn); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return
		}
		if conn.IsClosed() { // dropped before COMMIT: nothing is stored, and Transaction runs it again
			err = errors.New("postgres: the connection dropped before COMMIT")
			return
		}
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		if cerr := pgTx.Commit(fctx); cerr != nil {
			if conn.IsClosed() {
				err = fmt.Errorf("postgres: commit: %w (%w)", durable.ErrCommitUnknown, cerr)
			} else {
				err = fmt.Errorf("postgres: commit: %w", cerr)
			}
		}
	}()
	if err := d.renew(ctx, pgTx); err != nil {
		return err
	}
	return fn(t)
}

// rollback ends a failed transaction. On a dropped connection the server
// has rolled it back already.
func (d *DB) rollback(ctx context.Context, pgTx pgx.Tx, conn *pgx.Conn) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if err := pgTx.Rollback(fctx); err != nil && !conn.IsClosed() {
		return fmt.Errorf("postgres: rollback: %w", err)
	}
	return nil
}

// Close gives the lease up and closes the connection.
func (d *DB) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	d.stopRenewing()
	// closed is set: no other call runs now, and none will.
	if d.conn == nil || d.conn.IsClosed() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var err error
	if d.lost == nil {
		err = d.release(ctx)
	}
	return errors.Join(err, d.conn.Close(ctx))
}

type tx struct {
	d    *DB
	tx   pgx.Tx
	conn *pgx.Conn
	done bool
}

func (t *tx) check() error {
	if t.done {
		return fmt.Errorf("postgres: transaction is over: %w", durable.ErrClosed)
	}
	return nil
}

func (t *tx) Exec(ctx context.Context, q string) error {
	if err := t.check(); err != nil {
		return err
	}
	stmts, err := t.d.statements(q)
	if err != nil {
		return err
	}
	for _, s := range stmts {
		if err := t.exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// exec runs one statement, already checked by statements.
func (t *tx) exec(ctx context.Context, s string, args ...any) error {
	if _, err := t.tx.Exec(ctx, s, escape(args)...); err != nil {
		return fmt.Errorf("postgres: exec: %w", err)
	}
	return nil
}

func (t *tx) Run(ctx context.Context, q string, args ...any) error {
	if err := t.check(); err != nil {
		return err
	}
	s, err := t.d.statement(q)
	if err != nil {
		return err
	}
	return t.exec(ctx, s, args...)
}

func (t *tx) Get(ctx context.Context, q string, args ...any) (durable.Row, error) {
	return first(t.All(ctx, q, args...))
}

func (t *tx) All(ctx context.Context, q string, args ...any) ([]durable.Row, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	return t.d.query(ctx, t.tx, q, args...)
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (d *DB) query(ctx context.Context, on querier, q string, args ...any) ([]durable.Row, error) {
	s, err := d.statement(q)
	if err != nil {
		return nil, err
	}
	rows, err := on.Query(ctx, s, escape(args)...)
	if err != nil {
		return nil, fmt.Errorf("postgres: query: %w", err)
	}
	defer rows.Close()
	fields := rows.FieldDescriptions()
	var out []durable.Row
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			return nil, fmt.Errorf("postgres: scan: %w", err)
		}
		r := make(durable.Row, len(fields))
		for i, f := range fields {
			if r[f.Name], err = value(vals[i]); err != nil {
				return nil, fmt.Errorf("postgres: column %s: %w", f.Name, err)
			}
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: rows: %w", err)
	}
	return out, nil
}

func first(rows []durable.Row, err error) (durable.Row, error) {
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, durable.ErrNoRows
	}
	return rows[0], nil
}

// value is v as SQLite's driver gives it: every integer an int64 (sum()
// of BIGINTs is a numeric in Postgres), text a string, bytea []byte.
func value(v any) (any, error) {
	switch x := v.(type) {
	case string:
		if strings.ContainsRune(x, '\ue000') {
			return unescapeNUL.Replace(x), nil
		}
	case int16:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case pgtype.Numeric:
		if !x.Valid {
			return nil, nil
		}
		i, err := x.Int64Value()
		if err != nil || !i.Valid {
			return nil, fmt.Errorf("numeric %v is not an integer", x)
		}
		return i.Int64, nil
	}
	return v, nil
}

// statement is q in Postgres's spelling, refused if it changes the schema.
func (d *DB) statement(q string) (string, error) {
	if !d.o.AllowDDL && isDDL(q) {
		return "", fmt.Errorf("postgres: %w: %.60q", ErrDDL, strings.TrimSpace(q))
	}
	return translate(q), nil
}

// statements splits an Exec's text into its statements, each checked and
// translated: the contract runs them in order and stops at the first
// that fails, which Postgres's multi-statement query (all or nothing)
// does not.
func (d *DB) statements(q string) ([]string, error) {
	var out []string
	for _, s := range split(q) {
		t, err := d.statement(s)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}
