package agentdb_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/manager/agentdb"
	"github.com/affido/affido/manager/registry/registrytest"
)

// open migrates the registry (the agent_storage table), makes the users
// and returns a Store and a superuser connection to look with.
func open(t *testing.T, users ...string) (*agentdb.Store, *pgx.Conn) {
	t.Helper()
	reg := registrytest.Store(t)
	for _, u := range users {
		if err := reg.EnsureUser(t.Context(), u); err != nil {
			t.Fatal(err)
		}
	}
	st, err := agentdb.Open(t.Context(), registrytest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	st.MakeOnAsk = true // a stack whose default is Postgres
	conn, err := pgx.Connect(t.Context(), registrytest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return st, conn
}

func unique(t *testing.T, name string) string {
	return fmt.Sprintf("%s-%s", name, strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
}

// The credential names a role and a database of the user's alone: the
// role has no power over the cluster, only it may connect to the database,
// and it may connect to no other (the registry's included).
func TestCredentialIsARoleThatReachesItsOwnDatabaseOnly(t *testing.T) {
	alice, bob := unique(t, "alice"), unique(t, "bob")
	st, su := open(t, alice, bob)
	ctx := t.Context()
	a, err := st.Credential(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	again, err := st.Credential(ctx, alice)
	if err != nil || again != a {
		t.Fatalf("the second ask = %+v, %v; want the first, %+v", again, err, a)
	}
	b, err := st.Credential(ctx, bob)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^agent_[0-9a-f]{16}$`).MatchString(a.Role) || a.Database != a.Role || len(a.Password) != 64 || a.Role == b.Role {
		t.Fatalf("credentials %+v and %+v: want agent_ and 16 hex digits, distinct, the database named as the role", a, b)
	}
	var super, createDB, createRole bool
	var limit int
	if err := su.QueryRow(ctx, `SELECT rolsuper, rolcreatedb, rolcreaterole, rolconnlimit FROM pg_roles WHERE rolname = $1`, a.Role).
		Scan(&super, &createDB, &createRole, &limit); err != nil {
		t.Fatal(err)
	}
	if super || createDB || createRole || limit != agentdb.MaxConnections {
		t.Fatalf("role %s: super %v createdb %v createrole %v connlimit %d; want none of them and %d", a.Role, super, createDB, createRole, limit, agentdb.MaxConnections)
	}
	var verifier string
	if err := su.QueryRow(ctx, `SELECT rolpassword FROM pg_authid WHERE rolname = $1`, a.Role).Scan(&verifier); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(verifier, "SCRAM-SHA-256$4096:") || strings.Contains(verifier, a.Password) {
		t.Fatalf("role %s's stored password %q: want a SCRAM verifier, not the password", a.Role, verifier)
	}
	// A role that changed its own password and limits (its owner may) gets
	// the manager's back from the next process that hands it out.
	if _, err := su.Exec(ctx, `ALTER ROLE `+pgx.Identifier{a.Role}.Sanitize()+` PASSWORD 'mine' CONNECTION LIMIT -1`); err != nil {
		t.Fatal(err)
	}
	next, err := agentdb.Open(ctx, registrytest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := next.Credential(ctx, alice); err != nil {
		t.Fatal(err)
	}
	if err := su.QueryRow(ctx, `SELECT rolpassword, rolconnlimit FROM pg_authid WHERE rolname = $1`, a.Role).Scan(&verifier, &limit); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(verifier, "SCRAM-SHA-256$4096:") || limit != agentdb.MaxConnections {
		t.Fatalf("after the next process's ask: password %q, connection limit %d; want the manager's back", verifier, limit)
	}
	var registryDB string
	if err := su.QueryRow(ctx, `SELECT current_database()`).Scan(&registryDB); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		role, db string
		want     bool
	}{
		{a.Role, a.Database, true},
		{a.Role, b.Database, false},
		{b.Role, a.Database, false},
		{a.Role, registryDB, false},
		{a.Role, "postgres", false},
		{a.Role, "template1", false},
	} {
		var may bool
		if err := su.QueryRow(ctx, `SELECT has_database_privilege($1, $2, 'CONNECT')`, c.role, c.db).Scan(&may); err != nil {
			t.Fatal(err)
		}
		if may != c.want {
			t.Errorf("%s may connect to %s: %v, want %v", c.role, c.db, may, c.want)
		}
	}
}

// Two managers asking for a new user's storage at once agree on one.
func TestTwoManagersAgreeOnTheCredential(t *testing.T) {
	carol := unique(t, "carol")
	st1, _ := open(t, carol)
	st2, err := agentdb.Open(t.Context(), registrytest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	st2.MakeOnAsk = true
	var wg sync.WaitGroup
	got := make([]gatewayapi.StorageCredential, 2)
	errs := make([]error, 2)
	for i, st := range []*agentdb.Store{st1, st2} {
		wg.Add(1)
		go func() { defer wg.Done(); got[i], errs[i] = st.Credential(t.Context(), carol) }()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || got[0] != got[1] {
		t.Fatalf("two managers: %+v %v and %+v %v; want one credential", got[0], errs[0], got[1], errs[1])
	}
}

// relay serves Connect for the user its X-Test-User header names (the
// manager's route authenticates the sandbox's token first).
func relay(t *testing.T, st *agentdb.Store) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := st.Connect(w, r, r.Header.Get("X-Test-User")); err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, agentdb.ErrNotUpgrade) {
				code = http.StatusBadRequest
			}
			http.Error(w, err.Error(), code)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// connect opens a pgx connection through the relay as user, with the
// startup parameters of c (and extra ones).
func connect(ctx context.Context, srv *httptest.Server, user string, c gatewayapi.StorageCredential, extra map[string]string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=relay port=5432 user=%s dbname=%s password=%s sslmode=prefer", c.Role, c.Database, c.Password))
	if err != nil {
		return nil, err
	}
	for k, v := range extra {
		cfg.RuntimeParams[k] = v
	}
	cfg.LookupFunc = func(_ context.Context, host string) ([]string, error) { return []string{host}, nil }
	cfg.DialFunc = func(ctx context.Context, _, _ string) (net.Conn, error) {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: %s\r\nX-Test-User: %s\r\n\r\n",
			gatewayapi.Prefix+gatewayapi.StorageConnectPath, gatewayapi.StorageUpgrade, user)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			conn.Close()
			return nil, err
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			conn.Close()
			return nil, fmt.Errorf("relay: %s", resp.Status)
		}
		return &buffered{conn, br}, nil
	}
	return pgx.ConnectConfig(ctx, cfg)
}

type buffered struct {
	net.Conn
	r *bufio.Reader
}

func (b *buffered) Read(p []byte) (int, error) { return b.r.Read(p) }

// The relay admits a user's own role to its own database (answering the
// driver's SSL request with N), where it may make its schemas; it refuses
// another user's role, another database, and any startup parameter that
// could change what the session is (replication, options).
func TestRelayAdmitsTheUsersRoleToItsDatabaseOnly(t *testing.T) {
	alice, bob := unique(t, "alice"), unique(t, "bob")
	st, _ := open(t, alice, bob)
	ctx := t.Context()
	a, err := st.Credential(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Credential(ctx, bob)
	if err != nil {
		t.Fatal(err)
	}
	srv := relay(t, st)

	conn, err := connect(ctx, srv, alice, a, nil)
	if err != nil {
		t.Fatalf("alice through her tunnel: %v", err)
	}
	var user, db string
	if err := conn.QueryRow(ctx, `SELECT current_user, current_database()`).Scan(&user, &db); err != nil {
		t.Fatal(err)
	}
	if user != a.Role || db != a.Database {
		t.Fatalf("alice's session is %s in %s, want %s in %s", user, db, a.Role, a.Database)
	}
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS agent_main; CREATE TABLE IF NOT EXISTS agent_main.t (x int); INSERT INTO agent_main.t VALUES (1)`); err != nil {
		t.Fatalf("alice makes a schema in her database: %v", err)
	}
	conn.Close(ctx)

	for name, try := range map[string]struct {
		cred  gatewayapi.StorageCredential
		extra map[string]string
		want  string
	}{
		"bob's role on alice's tunnel":   {b, nil, "admits the role"},
		"the registry's database":        {gatewayapi.StorageCredential{Role: a.Role, Database: "affido", Password: a.Password}, nil, "admits the database"},
		"bob's database with alice role": {gatewayapi.StorageCredential{Role: a.Role, Database: b.Database, Password: a.Password}, nil, "admits the database"},
		"replication":                    {a, map[string]string{"replication": "database"}, `"replication" is not relayed`},
		"options setting a GUC":          {a, map[string]string{"options": "-c role=" + b.Role}, `"options" is not relayed`},
	} {
		conn, err := connect(ctx, srv, alice, try.cred, try.extra)
		if err == nil {
			conn.Close(ctx)
			t.Errorf("%s: connected, want refused", name)
			continue
		}
		if !strings.Contains(err.Error(), try.want) {
			t.Errorf("%s: %v, want the relay's refusal (%q)", name, err, try.want)
		}
	}

	// A plain request, not an upgrade, is refused before anything else.
	resp, err := http.Get(srv.URL + gatewayapi.Prefix + gatewayapi.StorageConnectPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a plain GET: %s, want 400", resp.Status)
	}
}

// A client that opens a tunnel and then stalls is cut off after the startup
// deadline, so it cannot hold a Postgres slot. Here it sends no startup
// packet; the same deadline runs until the server's first ReadyForQuery,
// which a client that never finishes authenticating does not get (this
// test Postgres trusts every login, so that case is not shown here).
func TestRelayCutsAStalledStartup(t *testing.T) {
	alice := unique(t, "alice")
	st, _ := open(t, alice)
	srv := relay(t, st)
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: %s\r\nX-Test-User: %s\r\n\r\n", gatewayapi.StorageUpgrade, alice)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
	if _, err := io.ReadAll(br); err != nil {
		t.Fatalf("waiting for the relay to close a stalled tunnel: %v after %s", err, time.Since(start))
	}
	// Closed by the relay (EOF), long before the test's own bound.
	if waited := time.Since(start); waited > time.Minute {
		t.Fatalf("the stalled tunnel stayed open %s", waited)
	}
}

// On a stack whose default is SQLite a sandbox's ask makes nothing: only a
// user the admin moved to Postgres (Make) is served.
func TestASQLiteStackMakesStorageOnlyForTheAdmin(t *testing.T) {
	dave := unique(t, "dave")
	st, su := open(t, dave)
	st.MakeOnAsk = false
	if _, err := st.Credential(t.Context(), dave); !errors.Is(err, agentdb.ErrNotOffered) {
		t.Fatalf("a sandbox's ask on a SQLite stack: %v, want ErrNotOffered", err)
	}
	var rows int
	if err := su.QueryRow(t.Context(), `SELECT count(*) FROM agent_storage WHERE user_id = $1`, dave).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("the refused ask stored %d rows (%v)", rows, err)
	}
	made, err := st.Make(t.Context(), dave)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := st.Credential(t.Context(), dave); err != nil || got != made {
		t.Fatalf("after the admin made it: %+v %v, want %+v", got, err, made)
	}
}
