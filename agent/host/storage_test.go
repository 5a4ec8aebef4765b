package host_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
	"github.com/affido/affido/agent/host"
)

// losable is a Storage whose databases lose their lease on demand (as a
// Postgres one does when another process takes it), over SQLite files.
type losable struct {
	dir   string
	lost  atomic.Bool
	opens atomic.Int32
}

func (l *losable) Open(ctx context.Context, a agents.Agent) (durable.DB, error) {
	l.opens.Add(1)
	db, err := sqlite.Open(ctx, filepath.Join(l.dir, a.ID+".db"))
	if err != nil {
		return nil, err
	}
	return &losableDB{DB: db, lost: &l.lost}, nil
}

func (l *losable) Remove(context.Context, agents.Agent) error { return nil }

type losableDB struct {
	durable.DB
	lost *atomic.Bool
}

func (d *losableDB) Transaction(ctx context.Context, fn func(durable.Executor) error) error {
	if d.lost.Load() {
		return durable.ErrLeaseLost
	}
	return d.DB.Transaction(ctx, fn)
}

func (d *losableDB) Run(ctx context.Context, q string, args ...any) error {
	if d.lost.Load() {
		return durable.ErrLeaseLost
	}
	return d.DB.Run(ctx, q, args...)
}

// A storage lost under a running host (its lease taken, a commit's outcome
// unknown) is closed and opened again on the next call, which recovers
// what was committed: the host does not answer storage-lost until the
// process restarts.
func TestLostStorageIsReopenedOnTheNextCall(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := &losable{dir: dir}
	h := host.New(host.Config{User: func() string { return "u" }, SessionDB: filepath.Join(dir, "session.db"), Storage: st, UseStorage: true,
		DefaultModel: "fake/echo", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { h.Close() })
	rt, err := h.Runtime(ctx, agents.Main)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Harness.Submit(ctx, durable.RootConversation, durable.Input{Text: "kept", RequestID: "r1"}); err != nil {
		t.Fatal(err)
	}
	opened := st.opens.Load()

	st.lost.Store(true)
	if _, err := rt.Harness.Submit(ctx, durable.RootConversation, durable.Input{Text: "lost", RequestID: "r2"}); !durable.Fatal(err) && err == nil {
		t.Fatalf("a write after the lease was lost: %v, want it refused", err)
	}
	select {
	case <-rt.Harness.Store().Failed():
	default:
		t.Fatal("the store did not fail on a lost lease")
	}
	st.lost.Store(false)

	again, err := h.Runtime(ctx, agents.Main)
	if err != nil {
		t.Fatalf("the call after the loss: %v, want the storage reopened", err)
	}
	if again == rt || st.opens.Load() <= opened {
		t.Fatalf("the lost runtime was handed out again (opens %d, before %d)", st.opens.Load(), opened)
	}
	sub, err := again.Harness.Submit(ctx, durable.RootConversation, durable.Input{Text: "kept", RequestID: "r1"})
	if err != nil {
		t.Fatalf("submit after reopening: %v", err)
	}
	if sub.Input.Text != "kept" {
		t.Fatalf("the reopened storage lost the committed input: %+v", sub)
	}
}

// Moving a user's agents between storages: every agent's store (main's,
// and one the owner made) is copied and opens on the other side with what
// was committed; work done there comes back on the way back; moving to
// where they are is nothing; an unknown storage is refused.
func TestMigrateStorageBackAndForth(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	other := &losable{dir: t.TempDir()}
	h := host.New(host.Config{User: func() string { return "u" }, SessionDB: filepath.Join(dir, "session.db"), Storage: other,
		DefaultModel: "fake/echo", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { h.Close() })
	submit := func(agent, text string) {
		t.Helper()
		rt, err := h.Runtime(ctx, agent)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rt.Harness.Submit(ctx, durable.RootConversation, durable.Input{Text: text, RequestID: text}); err != nil {
			t.Fatal(err)
		}
	}
	// has reports whether agent's storage holds the submission of text (its
	// request id). Not a count of entries: a turn the move interrupted
	// resumes on the new side and writes its reply meanwhile.
	has := func(agent, text string) bool {
		t.Helper()
		rt, err := h.Runtime(ctx, agent)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := rt.Harness.Store().SubmissionByRequest(ctx, durable.RootConversation, text)
		return err == nil && sub.Input.Text == text
	}
	submit(agents.Main, "kept on sqlite")
	if _, err := h.CreateAgent(ctx, agents.Spec{Name: "helper"}); err != nil {
		t.Fatal(err)
	}
	submit("helper", "helper's words")
	if kind, err := h.StorageKind(); err != nil || kind != host.KindSQLite {
		t.Fatalf("before: %q %v", kind, err)
	}

	opened := other.opens.Load()
	ans, err := h.MigrateStorage(ctx, host.KindPostgres)
	if err != nil {
		t.Fatal(err)
	}
	if ans.From != host.KindSQLite || ans.To != host.KindPostgres || ans.Agents < 2 || ans.Rows == 0 {
		t.Fatalf("migrate to postgres: %+v", ans)
	}
	if kind, _ := h.StorageKind(); kind != host.KindPostgres {
		t.Fatalf("after: %q", kind)
	}
	if !h.Status(ctx).StorageOpen {
		t.Fatal("storage is not open on the new side after the move")
	}
	if !has(agents.Main, "kept on sqlite") || !has("helper", "helper's words") || other.opens.Load() <= opened {
		t.Fatal("after the move the agents' work is not read from the other storage")
	}
	submit(agents.Main, "said on postgres")

	if ans, err = h.MigrateStorage(ctx, host.KindSQLite); err != nil || ans.From != host.KindPostgres || ans.Agents < 2 {
		t.Fatalf("migrate back: %+v %v", ans, err)
	}
	if !has(agents.Main, "said on postgres") || !has(agents.Main, "kept on sqlite") || !has("helper", "helper's words") {
		t.Fatal("the way back lost work")
	}
	if ans, err = h.MigrateStorage(ctx, host.KindSQLite); err != nil || ans.Agents != 0 {
		t.Fatalf("migrate to where it is: %+v %v", ans, err)
	}
	if _, err := h.MigrateStorage(ctx, "tape"); !errors.Is(err, host.ErrBadStorage) {
		t.Fatalf("an unknown storage: %v", err)
	}
}

// A move that fails half way (here the second agent's target cannot be
// made) leaves the agents where they were, even on a volume from before
// storage.json, where the target's fresh session database would otherwise
// read as "on SQLite".
func TestFailedMigrationLeavesTheStorageWhereItWas(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	other := &losable{dir: t.TempDir()}
	h := host.New(host.Config{User: func() string { return "u" }, SessionDB: filepath.Join(dir, "session.db"), Storage: other, UseStorage: true,
		DefaultModel: "fake/echo", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { h.Close() })
	rt, err := h.Runtime(ctx, agents.Main)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Harness.Submit(ctx, durable.RootConversation, durable.Input{Text: "kept", RequestID: "kept"}); err != nil {
		t.Fatal(err)
	}
	helper, err := h.CreateAgent(ctx, agents.Spec{Name: "helper"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Pause(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// A volume from before storage.json, and a file where the helper's
	// SQLite directory would go.
	if err := os.Remove(filepath.Join(dir, "storage.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agents", helper.ID), []byte("in the way"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.MigrateStorage(ctx, host.KindSQLite); err == nil {
		t.Fatal("the move succeeded with the helper's target in the way")
	}
	if kind, err := h.StorageKind(); err != nil || kind != host.KindPostgres {
		t.Fatalf("after a failed move the storage reads %q (%v), want postgres", kind, err)
	}
	rt, err = h.Runtime(ctx, agents.Main)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := rt.Harness.Store().EntryCount(ctx, durable.RootConversation); err != nil || n == 0 {
		t.Fatalf("after a failed move main reads %d entries (%v), want its own", n, err)
	}
}
