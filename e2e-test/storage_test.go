//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// The suites of agent storage on Postgres run on a stack started with
// AFFIDO_AGENT_STORAGE=postgres (e2e-test/run.sh's third one, with the
// kill tests of agent_test.go beside them); elsewhere they skip.
func needPostgresStorage(t *testing.T) {
	t.Helper()
	if os.Getenv("AFFIDO_AGENT_STORAGE") != "postgres" {
		t.Skip("the stack keeps agents' storage in SQLite; e2e-test/run.sh runs this on its Postgres-storage stack")
	}
}

// psqlAs runs one query in the stack's Postgres as role, with password,
// in database db, through the same socket the manager uses; it returns the
// output and the error (a refusal is a result here).
func psqlAs(t *testing.T, role, password, db, query string) (string, error) {
	t.Helper()
	return dockerTry("exec", "-e", "PGPASSWORD="+password, "-e", "PGPASSFILE=/dev/null", oltpName(),
		"psql", "-h", "/var/run/postgresql", "-U", role, "-d", db, "-tAc", query)
}

// A user's conversation lives in the user's own database, not on the
// volume; an agent killed with SIGKILL comes back to it; and the role that
// holds it reaches nothing else: not another user's database, not the
// registry, and not without its password.
func TestAgentStorageOnPostgres(t *testing.T) {
	needPostgresStorage(t)
	t.Parallel()
	alice, atok := newUser(t, "pgalice")
	bob, btok := newUser(t, "pgbob")
	prompt(t, alice, atok, map[string]any{"text": "remember the tulips"})
	prompt(t, bob, btok, map[string]any{"text": "remember the daffodils"})

	var aRole, aPass, bRole string
	if f := strings.Split(psql(t, "SELECT role || '|' || password FROM agent_storage WHERE user_id = '"+alice+"'"), "|"); len(f) == 2 {
		aRole, aPass = f[0], f[1]
	} else {
		t.Fatalf("no storage row for %s", alice)
	}
	bRole = psql(t, "SELECT role FROM agent_storage WHERE user_id = '"+bob+"'")
	count := func() string {
		out, err := psqlAs(t, aRole, aPass, aRole, "SELECT count(*) FROM agent_main.entries WHERE record LIKE '%tulips%'")
		if err != nil {
			t.Fatalf("alice's role in her database: %v\n%s", err, out)
		}
		return strings.TrimSpace(out)
	}
	if n := count(); n == "0" {
		t.Fatalf("alice's prompt is not in her database (%s entries name the tulips)", n)
	}
	if out := mustInAgentAs(t, alice, atok, "agent", "ls", "-a", "/data"); strings.Contains(out, "session.db") {
		t.Fatalf("the agent wrote a SQLite database on the volume: %s", out)
	}

	// Killed mid-life, the agent comes back to what it stored.
	before := inspectOf(t, alice, atok).EntryCount
	docker(t, "kill", "-s", "KILL", stack+"-"+alice+"-agent")
	waitUntil(t, 60*time.Second, "alice's agent answers again with her entries", func() bool {
		r := request(t, "GET", "/u/"+alice+"/inspect?limit=1", bearer(atok))
		return r.Code == 200 && inspectOf(t, alice, atok).EntryCount == before
	})
	prompt(t, alice, atok, map[string]any{"text": "and the tulips again"})
	if in := inspectOf(t, alice, atok); in.EntryCount <= before {
		t.Fatalf("after the kill: %d entries, want more than %d", in.EntryCount, before)
	}

	// The walls: what was tried, and what Postgres answered.
	for _, try := range []struct {
		what, password, db, want string
	}{
		{"alice's role in bob's database", aPass, bRole, "permission denied for database"},
		{"alice's role in the registry", aPass, "affido", "permission denied for database"},
		{"alice's role in postgres", aPass, "postgres", "permission denied for database"},
		{"alice's role without its password", strings.Repeat("0", 64), aRole, "password authentication failed"},
	} {
		out, err := psqlAs(t, aRole, try.password, try.db, "SELECT 1")
		if err == nil || !strings.Contains(out, try.want) {
			t.Errorf("%s: %v %q, want refused (%q)", try.what, err, out, try.want)
		}
	}
	if out, err := psqlAs(t, aRole, aPass, aRole, "SELECT rolname FROM pg_roles WHERE rolname = 'affido' AND pg_has_role(current_user, oid, 'MEMBER')"); err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("alice's role is a member of the stack's superuser: %v %q", err, out)
	}
}

// From inside a sandbox, without the agent's token (the tools' uid cannot
// read it), the gateway hands out no storage credential and opens no
// tunnel; and the sandbox has no route to Postgres of its own.
func TestStorageGatewayWantsTheSandboxToken(t *testing.T) {
	needPostgresStorage(t)
	t.Parallel()
	user, tok := newUser(t, "pgwall")
	prompt(t, user, tok, map[string]any{"text": "hello"})
	keepAwake(t, user, tok) // the probes join its network namespace
	if out, err := inAgent(t, user, tok, "cat", "/data/identity.json"); err == nil {
		t.Fatalf("the tools' uid read the agent's identity: %s", out)
	}
	name := stack + "-" + user + "-agent"
	for _, path := range []string{"/v1/gateway/storage", "/v1/gateway/storage/connect"} {
		out := strings.TrimSpace(docker(t, "run", "--rm", "--network", "container:"+name, "affido/probe:test",
			"-get", "http://gateway:8088"+path))
		if !strings.HasPrefix(out, "401") {
			t.Errorf("GET %s without the token from the sandbox: %q, want 401", path, out)
		}
	}
	// Another sandbox's token from this one's address is refused too.
	other, otok := newUser(t, "pgwall2")
	prompt(t, other, otok, map[string]any{"text": "hello"})
	keepAwake(t, other, otok)
	otherToken, _ := sandboxGateway(t, other)
	out := strings.TrimSpace(docker(t, "run", "--rm", "--network", "container:"+name, "affido/probe:test",
		"-get", "http://gateway:8088/v1/gateway/storage", otherToken))
	if strings.HasPrefix(out, "200") || strings.Contains(out, "password") {
		t.Errorf("another sandbox's token from this sandbox got its credential: %q", out)
	}
	if out := strings.TrimSpace(docker(t, "run", "--rm", "--network", "container:"+name, "affido/probe:test",
		oltpName()+":5432", "postgres:5432")); strings.Contains(out, " open") {
		t.Errorf("a sandbox reaches Postgres directly: %s", out)
	}
}

// Two agent processes for one user at once: a second one started in the
// same sandbox (so it reaches the gateway from the sandbox's address with
// its token, as an old process that would not die could) is a newer
// generation and takes the lease; the first, which lost it, answers 503
// and writes nothing; the second killed with SIGKILL leaves its lease to
// run out (60 s), and then the first takes over from the last commit and
// stores the next prompt once.
func TestTwoAgentProcessesOneLease(t *testing.T) {
	needPostgresStorage(t)
	t.Parallel()
	user, tok := newUser(t, "pglease")
	prompt(t, user, tok, map[string]any{"text": "first words"})
	keepAwake(t, user, tok)
	db := psql(t, "SELECT role FROM agent_storage WHERE user_id = '"+user+"'")
	inDB := func(q string) string {
		return strings.TrimSpace(docker(t, "exec", oltpName(), "psql", "-U", "affido", "-d", db, "-tAc", q))
	}
	holder := func() string { return inDB("SELECT coalesce(max(holder), '') FROM agent_main.durable_lease") }
	entries := func() string { return inDB("SELECT count(*) FROM agent_main.entries") }
	first, before := holder(), entries()
	if first == "" {
		t.Fatal("no lease held after a prompt")
	}

	name := stack + "-" + user + "-agent"
	docker(t, "exec", "-d", "-u", "root", "-e", "AFFIDO_LISTEN=:8081", name, "/bin/affido-agent", "serve")
	var second string
	waitUntil(t, 60*time.Second, "the second process takes the lease", func() bool {
		second = holder()
		return second != "" && second != first
	})
	r := post(t, user, tok, "/prompt", `{"text":"while another holds it"}`)
	if r.Code != 503 {
		t.Fatalf("a prompt to the process that lost the lease: %d %s, want 503", r.Code, r.Body)
	}
	if n := entries(); n != before {
		t.Fatalf("the process that lost the lease wrote: %s entries, before %s", n, before)
	}

	f := strings.Split(second, "/")
	if len(f) != 3 {
		t.Fatalf("holder %q: want host/pid/random", second)
	}
	docker(t, "exec", "-u", "10001", name, "sh", "-c", "kill -9 "+f[1]) // the agent's uid, which the process dropped to
	body := `{"text":"after the takeover","requestId":"takeover-1"}`
	waitUntil(t, 150*time.Second, "the first process takes over once the lease runs out", func() bool {
		return post(t, user, tok, "/prompt", body).Code == 200
	})
	if n := inDB("SELECT count(*) FROM agent_main.entries WHERE record LIKE '%after the takeover%' AND kind = 'owner_message'"); n != "1" {
		t.Fatalf("the prompt after the takeover is stored %s times, want once", n)
	}
	if h := holder(); h == second || h == "" {
		t.Fatalf("the lease after the takeover: %q", h)
	}
}

// affido admin migrate-storage moves a user's agents between their Postgres
// database and SQLite files on their volume and back, each time copied
// and checked table by table: what was said on either side is there on
// the other, and the agent reads it from where the last move put it.
func TestMigrateStorageBothWays(t *testing.T) {
	needPostgresStorage(t)
	t.Parallel()
	user, tok := newUser(t, "pgmove")
	prompt(t, user, tok, map[string]any{"text": "said on postgres"})
	db := psql(t, "SELECT role FROM agent_storage WHERE user_id = '"+user+"'")
	inDB := func(q string) string {
		return strings.TrimSpace(docker(t, "exec", oltpName(), "psql", "-U", "affido", "-d", db, "-tAc", q))
	}
	migrate := func(to string) map[string]any {
		t.Helper()
		out := docker(t, "exec", managerName(), "/bin/affido", "admin", "migrate-storage", user, "--to", to)
		var ans map[string]any
		if err := json.Unmarshal([]byte(out), &ans); err != nil {
			t.Fatalf("migrate-storage --to %s: %v\n%s", to, err, out)
		}
		return ans
	}
	before := inspectOf(t, user, tok).EntryCount

	if ans := migrate("sqlite"); ans["from"] != "postgres" || ans["to"] != "sqlite" || ans["agents"].(float64) < 2 {
		t.Fatalf("to sqlite: %v", ans)
	}
	if n := inspectOf(t, user, tok).EntryCount; n != before {
		t.Fatalf("on sqlite the agent reads %d entries, want %d", n, before)
	}
	prompt(t, user, tok, map[string]any{"text": "said on sqlite"})
	out := mustInAgentAs(t, user, tok, "agent", "sh", "-c", "ls /data; cat /data/storage.json")
	if !strings.Contains(out, "session.db") || !strings.Contains(out, `"kind":"sqlite"`) {
		t.Fatalf("after the move to sqlite the volume holds: %s", out)
	}
	if n := inDB("SELECT count(*) FROM agent_main.entries WHERE record LIKE '%said on sqlite%'"); n != "0" {
		t.Fatalf("a prompt after the move to sqlite went to Postgres (%s rows)", n)
	}

	if ans := migrate("postgres"); ans["from"] != "sqlite" || ans["to"] != "postgres" {
		t.Fatalf("back to postgres: %v", ans)
	}
	if n := inDB("SELECT count(*) FROM agent_main.entries WHERE record LIKE '%said on sqlite%' AND kind = 'owner_message'"); n != "1" {
		t.Fatalf("the prompt said on sqlite is in Postgres %s times, want once", n)
	}
	prompt(t, user, tok, map[string]any{"text": "said on postgres again"})
	if n := inDB("SELECT count(*) FROM agent_main.entries WHERE record LIKE '%said on postgres again%' AND kind = 'owner_message'"); n != "1" {
		t.Fatalf("after the move back, a prompt is in Postgres %s times, want once", n)
	}
	if ans := migrate("postgres"); ans["agents"].(float64) != 0 {
		t.Fatalf("moving to where it is: %v", ans)
	}
	// A storage that is neither is refused before anything happens.
	if out, err := dockerTry("exec", managerName(), "/bin/affido", "admin", "migrate-storage", user, "--to", "tape"); err == nil || !strings.Contains(out, `not "tape"`) {
		t.Fatalf("--to tape: %v %s", err, out)
	}
}

// On a stack whose default is SQLite, a sandbox asking for Postgres
// storage gets none (no role or database is made by asking); the admin
// moves a user there, and back, with what they said kept each way.
func TestMigrateStorageFromASQLiteStack(t *testing.T) {
	if os.Getenv("AFFIDO_AGENT_STORAGE") == "postgres" {
		t.Skip("runs on a stack whose default is SQLite")
	}
	t.Parallel()
	user, tok := newUser(t, "sqmove")
	prompt(t, user, tok, map[string]any{"text": "said on sqlite"})
	keepAwake(t, user, tok)
	sandboxTok, _ := sandboxGateway(t, user)
	name := stack + "-" + sandboxName(t, user) + "-agent"
	out := strings.TrimSpace(docker(t, "run", "--rm", "--network", "container:"+name, "affido/probe:test",
		"-get", "http://gateway:8088/v1/gateway/storage", sandboxTok))
	if !strings.HasPrefix(out, "404") {
		t.Fatalf("the sandbox's own ask for Postgres storage on a SQLite stack: %q, want 404", out)
	}
	if n := psql(t, "SELECT count(*) FROM agent_storage WHERE user_id = '"+user+"'"); n != "0" {
		t.Fatalf("the refused ask made a storage row (%s)", n)
	}

	out = docker(t, "exec", managerName(), "/bin/affido", "admin", "migrate-storage", user, "--to", "postgres")
	if !strings.Contains(out, `"from": "sqlite"`) || !strings.Contains(out, `"to": "postgres"`) {
		t.Fatalf("to postgres: %s", out)
	}
	db := psql(t, "SELECT role FROM agent_storage WHERE user_id = '"+user+"'")
	prompt(t, user, tok, map[string]any{"text": "said on postgres"})
	for _, text := range []string{"said on sqlite", "said on postgres"} {
		n := strings.TrimSpace(docker(t, "exec", oltpName(), "psql", "-U", "affido", "-d", db, "-tAc",
			"SELECT count(*) FROM agent_main.entries WHERE kind = 'owner_message' AND record LIKE '%"+text+"%'"))
		if n != "1" {
			t.Fatalf("%q is in the user's Postgres %s times, want once", text, n)
		}
	}
	out = docker(t, "exec", managerName(), "/bin/affido", "admin", "migrate-storage", user, "--to", "sqlite")
	if !strings.Contains(out, `"from": "postgres"`) {
		t.Fatalf("back to sqlite: %s", out)
	}
	in := inspectOf(t, user, tok)
	seen := map[string]int{}
	for _, e := range in.Entries.Items {
		if e.Kind == "owner_message" {
			seen[e.Text]++
		}
	}
	if seen["said on sqlite"] != 1 || seen["said on postgres"] != 1 {
		t.Fatalf("back on sqlite the owner's words read %v, want each once", seen)
	}
}
