package host_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/host"
)

func newHost(t *testing.T, db string) *host.Host {
	h := host.New(host.Config{User: func() string { return "u" }, SessionDB: db, DefaultModel: "fake/echo",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	t.Cleanup(func() { h.Close() })
	return h
}

// Storage opens on the first use, and pausing closes it; the status cache
// tells which, and a host started over storage left open reopens it.
func TestStorageOpensOnUseAndClosesOnPause(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "data", "session.db")
	os.MkdirAll(filepath.Dir(db), 0o755)
	h := newHost(t, db)
	if st := h.Status(ctx); st.StorageOpen || st.User != "u" {
		t.Fatalf("fresh host: %+v", st)
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the status opened storage: %v", err)
	}
	if _, err := h.Runtime(ctx, "nobody"); !errors.Is(err, agents.ErrNoAgent) {
		t.Fatalf("no such agent: %v", err)
	}
	rt, err := h.Runtime(ctx, agents.Main)
	if err != nil || rt.Agent.Name != agents.Main || !h.Status(ctx).StorageOpen {
		t.Fatalf("main: %+v %v", rt, err)
	}
	var busy *host.BusyError
	if _, err := h.Pause(ctx, func() bool { return false }); !errors.As(err, &busy) {
		t.Fatalf("pause while the caller is busy: %v", err)
	}
	if _, err := h.Pause(ctx, func() bool { return true }); err != nil || h.Status(ctx).StorageOpen {
		t.Fatalf("pause when idle: %v, open %v", err, h.Status(ctx).StorageOpen)
	}
	if _, err := h.Wake(ctx); err != nil || !h.Status(ctx).StorageOpen {
		t.Fatalf("wake: %v", err)
	}
	// A crash leaves the cache saying open: a new host reopens at once.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(filepath.Dir(db), "status.json")
	b, _ := os.ReadFile(cache)
	os.WriteFile(cache, bytes.Replace(b, []byte(`"storage_open":false`), []byte(`"storage_open":true`), 1), 0o644)
	again := newHost(t, db)
	if !again.Status(ctx).StorageOpen {
		t.Fatal("a host over storage left open did not reopen it")
	}
}

func TestStorageThatDoesNotOpenIsUnavailable(t *testing.T) {
	db := filepath.Join(t.TempDir(), "session.db")
	os.MkdirAll(db, 0o755) // a directory where the database should be
	if _, err := newHost(t, db).Runtime(context.Background(), agents.Main); !errors.Is(err, host.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
}
