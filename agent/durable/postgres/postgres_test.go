package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/postgres"
	"github.com/affido/affido/agent/durable/postgres/pgtest"
	"github.com/affido/affido/agent/durable/storetest"
)

var ctx = context.Background()

func TestConformancePostgres(t *testing.T) {
	storetest.Run(t, pgtest.Opener(pgtest.DSN(t), postgres.Options{AllowDDL: true, Generation: 1}, nil))
}

// open opens a migrated agent schema of its own for t, as generation gen.
func open(t *testing.T, schema string, o postgres.Options) (*postgres.DB, error) {
	t.Helper()
	dsn := pgtest.DSN(t)
	if err := postgres.Migrate(ctx, dsn, schema); err != nil {
		t.Fatal(err)
	}
	o.Schema = schema
	return postgres.Open(ctx, dsn, o)
}

func mustStore(t *testing.T, schema string, o postgres.Options) *durable.Store {
	t.Helper()
	db, err := open(t, schema, o)
	if err != nil {
		t.Fatal(err)
	}
	s, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func schemaFor(t *testing.T) string { return pgtest.Schema(t.Name() + time.Now().String()) }

func message(t *testing.T, s *durable.Store, text string) durable.Writes {
	t.Helper()
	id, err := s.MintID()
	if err != nil {
		t.Fatal(err)
	}
	return durable.Writes{Entries: []durable.Entry{{ID: id, ConversationID: durable.RootConversation,
		Kind: durable.OwnerMessage, Text: text, At: time.Now().UTC()}}}
}

func texts(t *testing.T, s *durable.Store) []string {
	t.Helper()
	p, err := s.Entries(ctx, durable.RootConversation, durable.Scan{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range p.Items {
		out = append(out, e.Text)
	}
	return out
}

// The attack: two processes run one agent. The newer generation takes the
// lease; the older one, which still believes it is the writer, tries to
// commit (through its store and through its harness). Each attempt fails
// with ErrLeaseLost, nothing of it is stored, its harness stops and
// answers with the lease lost, and the new holder continues from the last
// commit.
func TestLeaseLostCannotCommit(t *testing.T) {
	schema := schemaFor(t)
	old := mustStore(t, schema, postgres.Options{Generation: 1})
	h, err := durable.Open(ctx, old, durable.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := old.Commit(ctx, message(t, old, "before the takeover")); err != nil {
		t.Fatal(err)
	}

	newer := mustStore(t, schema, postgres.Options{Generation: 2})

	w := message(t, old, "from the old holder") // its ID block was reserved before
	if err := old.Commit(ctx, w); !errors.Is(err, durable.ErrLeaseLost) {
		t.Fatalf("the old holder's commit: %v, want ErrLeaseLost", err)
	}
	if _, err := h.Submit(ctx, durable.RootConversation, durable.Input{Text: "submitted to the old harness"}); !errors.Is(err, durable.ErrLeaseLost) {
		t.Fatalf("the old harness's submit: %v, want ErrLeaseLost", err)
	}
	select {
	case <-old.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("the old store did not fail")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !h.Closed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !h.Closed() {
		t.Fatal("the old harness did not stop")
	}

	if err := newer.Commit(ctx, message(t, newer, "from the new holder")); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(texts(t, newer), "|")
	if got != "before the takeover|from the new holder" {
		t.Fatalf("stored %q", got)
	}
	subs, err := newer.Submissions(ctx, []durable.SubmissionStatus{durable.Queued}, durable.Scan{Limit: 10})
	if err == nil && len(subs.Items) != 0 {
		t.Fatalf("the old harness's submission was stored: %+v", subs.Items)
	}
}

// The fence: a taker waits for the old holder's transaction in flight,
// which commits (it held the lease), and takes the lease only after it;
// the old holder's next write fails.
func TestLeaseTakerWaitsForTheCommitInFlight(t *testing.T) {
	schema := schemaFor(t)
	old, err := open(t, schema, postgres.Options{Generation: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	inside, release := make(chan struct{}), make(chan struct{})
	committed := make(chan error, 1)
	go func() {
		committed <- old.Transaction(ctx, func(tx durable.Executor) error {
			if err := tx.Run(ctx, `INSERT INTO settings (key, value) VALUES (?, ?)`, "in", "flight"); err != nil {
				return err
			}
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	taken := make(chan error, 1)
	var newer *postgres.DB
	go func() {
		var err error
		newer, err = open(t, schema, postgres.Options{Generation: 2})
		taken <- err
	}()
	select {
	case err := <-taken:
		t.Fatalf("the lease was taken during the old holder's transaction (%v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(release)
	if err := <-committed; err != nil {
		t.Fatalf("the old holder's transaction, begun while it held the lease: %v", err)
	}
	if err := <-taken; err != nil {
		t.Fatal(err)
	}
	defer newer.Close()
	if err := old.Run(ctx, `INSERT INTO settings (key, value) VALUES (?, ?)`, "after", "takeover"); !errors.Is(err, durable.ErrLeaseLost) {
		t.Fatalf("the old holder after the takeover: %v, want ErrLeaseLost", err)
	}
	rows, err := newer.All(ctx, `SELECT key FROM settings ORDER BY key`)
	if err != nil || len(rows) != 1 || rows[0]["key"] != "in" {
		t.Fatalf("the new holder reads %v (%v)", rows, err)
	}
}

// Without a takeover, a lease nobody renews runs out and the same
// generation may take it; one renewed by its idle holder does not.
func TestLeaseRenewedWhileIdleAndTakenOnceExpired(t *testing.T) {
	schema := schemaFor(t)
	ttl := 1500 * time.Millisecond
	first, err := open(t, schema, postgres.Options{Generation: 1, LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// Idle past the lease's first expiry: the timer must have renewed it.
	conn, err := pgx.Connect(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	lease := `SELECT now(), expires_at FROM ` + pgx.Identifier{schema, "durable_lease"}.Sanitize()
	var now, firstExpiry, expiry time.Time
	if err := conn.QueryRow(ctx, lease).Scan(&now, &firstExpiry); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * ttl); ; {
		if err := conn.QueryRow(ctx, lease).Scan(&now, &expiry); err != nil {
			t.Fatal(err)
		}
		if now.After(firstExpiry) && expiry.After(now) {
			break // the first lease would have run out; a renewed one holds
		}
		if time.Now().After(deadline) {
			t.Fatalf("the idle holder's lease was not renewed: it expires at %v, now %v (first expiry %v)", expiry, now, firstExpiry)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if second, err := open(t, schema, postgres.Options{Generation: 1, LeaseTTL: ttl}); !errors.Is(err, durable.ErrLocked) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("a second writer of the same generation while the first is idle: %v, want ErrLocked", err)
	}
	if second, err := open(t, schema, postgres.Options{Generation: 0, LeaseTTL: ttl}); !errors.Is(err, durable.ErrLocked) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("an older generation: %v, want ErrLocked", err)
	}
	// A holder that stops renewing (a frozen process), its lease run out
	// (expired from outside rather than waited for).
	first.Freeze()
	if _, err := conn.Exec(ctx, `UPDATE `+pgx.Identifier{schema, "durable_lease"}.Sanitize()+` SET expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	second, err := open(t, schema, postgres.Options{Generation: 1, LeaseTTL: ttl})
	if err != nil {
		t.Fatalf("taking an expired lease: %v", err)
	}
	defer second.Close()
	if err := first.Run(ctx, `UPDATE durable_meta SET next_seq = next_seq + 1 WHERE singleton = 1`); !errors.Is(err, durable.ErrLeaseLost) {
		t.Fatalf("the first writer after its lease expired and was taken: %v, want ErrLeaseLost", err)
	}
	first.Close()
}

func TestDDLIsRefusedAtRunTime(t *testing.T) {
	db, err := open(t, schemaFor(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{`CREATE TABLE x (v TEXT)`, `  drop table entries`, `ALTER TABLE entries ADD COLUMN x TEXT`,
		`SELECT 1; DROP TABLE notes`, `TRUNCATE entries`} {
		if err := db.Exec(ctx, q); !errors.Is(err, postgres.ErrDDL) {
			t.Errorf("Exec %q: %v, want ErrDDL", q, err)
		}
	}
	if err := db.Transaction(ctx, func(tx durable.Executor) error { return tx.Run(ctx, `DROP TABLE notes`) }); !errors.Is(err, postgres.ErrDDL) {
		t.Errorf("DDL in a transaction: %v, want ErrDDL", err)
	}
	if _, err := db.Get(ctx, `SELECT count(*) AS n FROM notes`); err != nil {
		t.Fatalf("the table is gone: %v", err)
	}
}

// An agent whose code wants a newer schema than the deploy applied fails
// at start, naming the migration to apply.
func TestSchemaBehindTheBuildFailsAtStart(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := schemaFor(t)
	if err := postgres.MigrateTo(ctx, dsn, schema, durable.SchemaVersion-1); err != nil {
		t.Fatal(err)
	}
	db, err := postgres.Open(ctx, dsn, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = durable.OpenStore(ctx, db)
	want := "apply migration 0006"
	if !errors.Is(err, durable.ErrSchemaTooOld) || !strings.Contains(err.Error(), want) {
		t.Fatalf("open store on an old schema: %v, want ErrSchemaTooOld saying %q", err, want)
	}
	// Never migrated at all: refused at Open, where the lease is taken.
	if _, err := postgres.Open(ctx, dsn, postgres.Options{Schema: schemaFor(t)}); !errors.Is(err, durable.ErrSchemaTooOld) {
		t.Fatalf("open an unmigrated schema: %v, want ErrSchemaTooOld", err)
	}
}

// dropper is a connection that a test can cut: before a COMMIT is sent
// (dropBefore) or right after it is sent, before its answer (dropCommit).
type dropper struct {
	net.Conn
	dropCommit *atomic.Bool
}

func (c dropper) Write(b []byte) (int, error) {
	if c.dropCommit.Load() && bytes.Contains(b, []byte("commit\x00")) {
		c.dropCommit.Store(false)
		n, err := c.Conn.Write(b)
		c.Conn.Close()
		return n, err
	}
	return c.Conn.Write(b)
}

func withDropper(drop *atomic.Bool) func(*pgx.ConnConfig) {
	return func(cfg *pgx.ConnConfig) {
		dial := cfg.DialFunc
		cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return dropper{Conn: c, dropCommit: drop}, nil
		}
	}
}

// A connection that drops before COMMIT is reopened and the transaction
// runs again: it is stored once.
func TestDropBeforeCommitRunsTheTransactionAgain(t *testing.T) {
	db, err := open(t, schemaFor(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	runs := 0
	err = db.Transaction(ctx, func(tx durable.Executor) error {
		runs++
		if err := tx.Run(ctx, `INSERT INTO settings (key, value) VALUES (?, ?)`, "k", "v"); err != nil {
			return err
		}
		if runs == 1 { // the server ends this backend, as a restart or a network cut would
			_, err := tx.Get(ctx, `SELECT pg_terminate_backend(pg_backend_pid()) AS gone`)
			return err
		}
		return nil
	})
	if err != nil || runs != 2 {
		t.Fatalf("transaction: %v after %d runs, want success after 2", err, runs)
	}
	rows, err := db.All(ctx, `SELECT value FROM settings WHERE key = 'k'`)
	if err != nil || len(rows) != 1 {
		t.Fatalf("stored %v (%v), want once", rows, err)
	}
}

// A connection that drops during COMMIT gives ErrCommitUnknown, which
// fails the store: the harness treats it as a crash.
func TestDropDuringCommitIsUnknown(t *testing.T) {
	var drop atomic.Bool
	s := mustStore(t, schemaFor(t), postgres.Options{Config: withDropper(&drop)})
	w := message(t, s, "maybe")
	drop.Store(true)
	if err := s.Commit(ctx, w); !errors.Is(err, durable.ErrCommitUnknown) {
		t.Fatalf("commit cut after COMMIT was sent: %v, want ErrCommitUnknown", err)
	}
	select {
	case <-s.Failed():
	default:
		t.Fatal("ErrCommitUnknown did not fail the store")
	}
	if _, err := s.MintID(); !errors.Is(err, durable.ErrCommitUnknown) {
		t.Fatalf("the failed store after it: %v, want ErrCommitUnknown", err)
	}
}

func TestMigrationFilesMatchTheSchemaVersion(t *testing.T) {
	dsn := pgtest.DSN(t)
	schema := schemaFor(t)
	if err := postgres.Migrate(ctx, dsn, schema); err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, dsn, schema); err != nil {
		t.Fatalf("migrating again: %v", err)
	}
	db, err := postgres.Open(ctx, dsn, postgres.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	row, err := db.Get(ctx, `SELECT version FROM durable_schema`)
	if err != nil || row["version"] != int64(durable.SchemaVersion) {
		t.Fatalf("the files migrate to %v (%v), the build writes version %d", row["version"], err, durable.SchemaVersion)
	}
}

// The statements spelled per dialect (dialect.go): search over the
// owner's and the model's words, JSON edits of a conversation, deleting a
// conversation from the search too.
func TestDialectStatements(t *testing.T) {
	s := mustStore(t, schemaFor(t), postgres.Options{})
	convID, err := s.MintID()
	if err != nil {
		t.Fatal(err)
	}
	conv := durable.Writes{Conversations: []durable.Conversation{{ID: convID, CreatedAt: time.Now().UTC()}}}
	if err := s.Commit(ctx, conv); err != nil {
		t.Fatal(err)
	}
	add := func(kind durable.EntryKind, text string) {
		w := message(t, s, text)
		w.Entries[0].ConversationID, w.Entries[0].Kind = convID, kind
		if err := s.Commit(ctx, w); err != nil {
			t.Fatal(err)
		}
	}
	add(durable.OwnerMessage, "Hello world from Postgres, nul\x00inside")
	add(durable.AssistantMessage, "Another reply to the world")
	add(durable.OutsideText, "world of outside text, never searched")
	for q, want := range map[string]int{"world": 2, "hel": 1, "postgres HELLO": 1, "wor": 2, "nothing": 0, "outside": 0} {
		hits, err := s.Search(ctx, q, 10)
		if err != nil || len(hits) != want {
			t.Errorf("search %q: %d hits (%v), want %d", q, len(hits), err, want)
		}
	}
	if err := s.RenameConversation(ctx, convID, `a "quoted" title`); err != nil {
		t.Fatal(err)
	}
	if err := s.ArchiveConversation(ctx, convID, true); err != nil {
		t.Fatal(err)
	}
	c, err := s.Conversation(ctx, convID)
	if err != nil || c.Title != `a "quoted" title` || !c.Archived {
		t.Fatalf("after rename and archive: %+v (%v)", c, err)
	}
	if err := s.ArchiveConversation(ctx, convID, false); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Conversation(ctx, convID); err != nil || c.Archived || c.Title == "" {
		t.Fatalf("after unarchive: %+v (%v)", c, err)
	}
	if err := s.DeleteConversation(ctx, convID); err != nil {
		t.Fatal(err)
	}
	if hits, err := s.Search(ctx, "world", 10); err != nil || len(hits) != 0 {
		t.Fatalf("search after delete: %d hits (%v)", len(hits), err)
	}
}
