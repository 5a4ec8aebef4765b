package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/affido/affido/agent/durable"
)

// The lease is one row in the agent's schema (durable_lease): who may
// write, the generation it came from, and when it runs out. Taking it
// succeeds when it has run out, when this writer holds it already, or when
// it is held by an older generation. Every transaction renews it first,
// and that UPDATE holds the row's lock until COMMIT: a taker waits for the
// commit in flight, and once it has taken the row, the old holder's next
// renewal finds another holder and fails with durable.ErrLeaseLost before
// anything of its transaction is stored.

const takeLease = `INSERT INTO durable_lease (singleton, holder, generation, expires_at)
	VALUES (1, $1, $2, now() + make_interval(secs => $3))
	ON CONFLICT (singleton) DO UPDATE SET holder = excluded.holder, generation = excluded.generation, expires_at = excluded.expires_at
	WHERE durable_lease.holder = excluded.holder OR durable_lease.expires_at < now() OR durable_lease.generation < excluded.generation`

// take takes the lease on a new connection; durable.ErrLocked if another
// writer holds it.
func (d *DB) take(ctx context.Context) error {
	conn, err := d.connection(ctx)
	if err != nil {
		return err
	}
	tag, err := conn.Exec(ctx, takeLease, d.o.Holder, d.o.Generation, d.o.LeaseTTL.Seconds())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return fmt.Errorf("take the lease: %w: no durable_lease table: apply the agent's migrations", durable.ErrSchemaTooOld)
	}
	if err != nil {
		return fmt.Errorf("take the lease: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var holder string
	var gen int64
	var until time.Time
	if err := conn.QueryRow(ctx, `SELECT holder, generation, expires_at FROM durable_lease WHERE singleton = 1`).Scan(&holder, &gen, &until); err != nil {
		return fmt.Errorf("take the lease: %w", durable.ErrLocked)
	}
	return fmt.Errorf("take the lease: %w: held by %s (generation %d, this is %d) until %s",
		durable.ErrLocked, holder, gen, d.o.Generation, until.UTC().Format(time.RFC3339))
}

// renew extends the lease inside tx, locking its row until tx ends.
func (d *DB) renew(ctx context.Context, tx pgx.Tx) error {
	tag, err := tx.Exec(ctx, `UPDATE durable_lease SET expires_at = now() + make_interval(secs => $2)
		WHERE singleton = 1 AND holder = $1`, d.o.Holder, d.o.LeaseTTL.Seconds())
	if err != nil {
		return fmt.Errorf("postgres: renew the lease: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("postgres: %w (this is %s)", durable.ErrLeaseLost, d.o.Holder)
	}
	return nil
}

// release gives the lease up, so the next writer need not wait it out.
// Caller holds the DB (closing).
func (d *DB) release(ctx context.Context) error {
	if _, err := d.conn.Exec(ctx, `DELETE FROM durable_lease WHERE singleton = 1 AND holder = $1`, d.o.Holder); err != nil {
		return fmt.Errorf("postgres: release the lease: %w", err)
	}
	return nil
}

// renewWhileOpen renews the lease every third of its life while nothing
// else commits, until Close. A lost lease stays lost (Transaction).
func (d *DB) renewWhileOpen() {
	defer close(d.renewDone)
	tick := time.NewTicker(d.o.LeaseTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-d.stopRenew:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), d.o.LeaseTTL/3)
			_ = d.Transaction(ctx, func(durable.Executor) error { return nil }) // a failure shows on the next write
			cancel()
		}
	}
}

// stopRenewing ends renewWhileOpen and waits for it.
func (d *DB) stopRenewing() {
	d.stopOnce.Do(func() { close(d.stopRenew) })
	<-d.renewDone
}

// defaultHolder names this writer: host, pid and a random part.
func defaultHolder() string {
	host, _ := os.Hostname()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))
}
