package registry_test

import (
	"context"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/registry/registrytest"
	"github.com/affido/affido/migrations"
)

// sessionRows returns user's session rows as JSON, every column, read
// straight from the table.
func sessionRows(t *testing.T, dsn, user string) []string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	rows, err := conn.Query(t.Context(), `SELECT row_to_json(s)::text FROM session s WHERE user_id = $1`, user)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The sessions table holds no usable token: the row of a session made at
// sign-in (and one the operator stores) carries only the token's sha256,
// which is no session token itself; the token the cookie carries still
// works, lists as current and signs out.
func TestPostgresSessionTokensAreStoredHashed(t *testing.T) {
	store := registrytest.Store(t)
	dsn := registrytest.DSN(t)
	ctx := t.Context()
	user := "pgsess-" + registry.NewToken()[:12]
	if err := store.SetPassword(ctx, user, "not a real hash"); err != nil {
		t.Fatal(err)
	}
	cookie, err := store.CreateSession(ctx, user, "test agent", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	chosen := "chosen-" + user
	if err := store.PutSession(ctx, user, chosen, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	rows := sessionRows(t, dsn, user)
	if len(rows) != 2 {
		t.Fatalf("%d session rows, want 2: %v", len(rows), rows)
	}
	for _, row := range rows {
		if strings.Contains(row, cookie) || strings.Contains(row, chosen) {
			t.Fatalf("a session row holds its token in clear: %s", row)
		}
	}
	hashed := `\\x` + hex.EncodeToString(registry.HashToken(cookie))
	if !strings.Contains(strings.Join(rows, " "), hashed) {
		t.Fatalf("no row holds the cookie's sha256 %s: %v", hashed, rows)
	}
	for _, stolen := range []string{hashed, hashed[3:], string(registry.HashToken(cookie))} {
		if _, _, err := store.UserForSession(ctx, stolen); !errors.Is(err, registry.ErrUnauthenticated) {
			t.Fatalf("the stored hash %q works as a session token: %v", stolen, err)
		}
	}
	for _, tok := range []string{cookie, chosen} {
		if u, _, err := store.UserForSession(ctx, tok); err != nil || u != user {
			t.Fatalf("the token itself: %q %v", u, err)
		}
	}
	list, err := store.Sessions(ctx, user, cookie)
	if err != nil || len(list) != 2 {
		t.Fatalf("sessions: %v %v", list, err)
	}
	for _, si := range list {
		if si.Current != (si.UserAgent == "test agent") {
			t.Fatalf("current marks the wrong session: %+v", list)
		}
	}
	if err := store.DeleteSession(ctx, cookie); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.UserForSession(ctx, cookie); !errors.Is(err, registry.ErrUnauthenticated) {
		t.Fatalf("after sign-out: %v", err)
	}
	if n := len(sessionRows(t, dsn, user)); n != 1 {
		t.Fatalf("%d rows after sign-out, want 1", n)
	}
}

// withSearchPath is dsn (a URL or key=value DSN) with its tables in schema.
func withSearchPath(t *testing.T, dsn, schema string) string {
	t.Helper()
	if !strings.Contains(dsn, "://") {
		return dsn + " search_path=" + schema
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// A registry upgraded past 0008: the sessions stored in clear before it
// are ended (their tokens cannot be hashed from a copy already taken), and
// sessions made after it work. Runs in a schema of its own, from empty.
func TestPostgresUpgradeEndsClearTextSessions(t *testing.T) {
	dsn := registrytest.DSN(t)
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	schema := "upgrade_" + strings.ToLower(hex.EncodeToString([]byte(registry.NewToken()[:6])))
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") //nolint:errcheck // a schema left over harms no other test
	sdsn := withSearchPath(t, dsn, schema)
	store, err := registry.Open(ctx, sdsn)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ms, err := registry.LoadMigrations(migrations.FS)
	if err != nil {
		t.Fatal(err)
	}
	before := 0
	for before < len(ms) && !strings.Contains(ms[before].Name, "session_token_hash") {
		before++
	}
	if before == len(ms) {
		t.Fatal("no session_token_hash migration")
	}
	if _, err := store.Migrate(ctx, ms[:before]); err != nil {
		t.Fatal(err)
	}
	old, err := pgx.Connect(ctx, sdsn)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close(ctx)
	if _, err := old.Exec(ctx, `INSERT INTO users (id) VALUES ('olduser');
		INSERT INTO session (token, user_id, expires_at) VALUES ('old-clear-token', 'olduser', now() + interval '30 days')`); err != nil {
		t.Fatal(err)
	}
	if n, err := store.Migrate(ctx, ms); err != nil || n != len(ms)-before {
		t.Fatalf("upgrade: %d applied, %v", n, err)
	}
	if _, _, err := store.UserForSession(ctx, "old-clear-token"); !errors.Is(err, registry.ErrUnauthenticated) {
		t.Fatalf("a clear-text session survived the upgrade: %v", err)
	}
	if rows := sessionRows(t, sdsn, "olduser"); len(rows) != 0 {
		t.Fatalf("rows left: %v", rows)
	}
	tok, err := store.CreateSession(ctx, "olduser", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if u, _, err := store.UserForSession(ctx, tok); err != nil || u != "olduser" {
		t.Fatalf("a session made after the upgrade: %q %v", u, err)
	}
	if _, err := old.Exec(ctx, `INSERT INTO session (token_hash, user_id, expires_at) VALUES ('dev-token'::bytea, 'olduser', now() + interval '1 day')`); err == nil {
		t.Fatal("the table took a clear token as its hash")
	}
}
