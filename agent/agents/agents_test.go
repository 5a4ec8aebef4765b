package agents_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
)

func harness(t *testing.T) *durable.Harness {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "session.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	h, err := durable.Open(ctx, st, durable.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// A rename carries the lists that named the old name; a delete takes the
// agent out of every list; main and the worker stay.
func TestRegistryRenameAndDeleteKeepListsTrue(t *testing.T) {
	ctx := context.Background()
	h := harness(t)
	var r agents.Registry
	if _, err := r.Create(ctx, h, agents.Spec{Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, h, agents.Spec{Name: "carol", MayMessage: []string{"bob", "main"}}); err != nil {
		t.Fatal(err)
	}
	name := "robert"
	if _, err := r.Update(ctx, h, "bob", agents.Patch{Name: &name}); err != nil {
		t.Fatal(err)
	}
	carol, err := r.Get(ctx, h.Store(), "carol")
	if err != nil || len(carol.MayMessage) != 2 || carol.MayMessage[0] != "robert" {
		t.Fatalf("carol after the rename: %+v %v", carol, err)
	}
	if _, err := r.Delete(ctx, h, "robert"); err != nil {
		t.Fatal(err)
	}
	if carol, _ = r.Get(ctx, h.Store(), "carol"); len(carol.MayMessage) != 1 || carol.MayMessage[0] != "main" {
		t.Fatalf("carol after the delete: %+v", carol)
	}
	list, _ := r.List(ctx, h.Store())
	if len(list) != 3 || list[0].Name != "main" || list[1].Name != "worker" {
		t.Fatalf("agents %+v", list)
	}
}

func TestRegistryRefusals(t *testing.T) {
	ctx := context.Background()
	h := harness(t)
	var r agents.Registry
	if _, err := r.Create(ctx, h, agents.Spec{Name: "bob"}); err != nil {
		t.Fatal(err)
	}
	main, bad := "boss", "Bad"
	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"a bad name", must(r.Create(ctx, h, agents.Spec{Name: "9lives"})), agents.ErrInvalid},
		{"a taken name", must(r.Create(ctx, h, agents.Spec{Name: "bob"})), agents.ErrExists},
		{"messaging the worker", must(r.Create(ctx, h, agents.Spec{Name: "x", MayMessage: []string{"worker"}})), agents.ErrInvalid},
		{"messaging nobody known", must(r.Create(ctx, h, agents.Spec{Name: "x", MayMessage: []string{"ghost"}})), agents.ErrInvalid},
		{"renaming main", must(r.Update(ctx, h, "main", agents.Patch{Name: &main})), agents.ErrBuiltin},
		{"a bad new name", must(r.Update(ctx, h, "bob", agents.Patch{Name: &bad})), agents.ErrInvalid},
		{"messaging itself", must(r.Update(ctx, h, "bob", agents.Patch{MayMessage: &[]string{"bob"}})), agents.ErrInvalid},
		{"deleting the worker", must(r.Delete(ctx, h, "worker")), agents.ErrBuiltin},
		{"a compaction threshold too low", must(r.Create(ctx, h, agents.Spec{Name: "x", CompactTokens: 10})), agents.ErrInvalid},
		{"deleting nobody", must(r.Delete(ctx, h, "ghost")), agents.ErrNoAgent},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.what, c.err, c.want)
		}
	}
	if list, _ := r.List(ctx, h.Store()); len(list) != 3 {
		t.Fatalf("the refusals changed the registry: %+v", list)
	}
}

func must(_ agents.Agent, err error) error { return err }

// owner_notes is true unless the owner says otherwise, also for agents
// stored before there were notes; the worker never gets them.
func TestOwnerNotesDefaults(t *testing.T) {
	ctx := context.Background()
	h := harness(t)
	old := `[{"name":"bob","id":"a1","kind":"owner","may_message":[],"created_at":"2026-11-01T00:00:00Z"},` +
		`{"name":"worker","id":"worker","kind":"worker","model":"fake/alt","may_message":[],"created_at":"0001-01-01T00:00:00Z"}]`
	if err := h.Store().SetSetting(ctx, "agents.registry", old); err != nil {
		t.Fatal(err)
	}
	var r agents.Registry
	off := false
	if _, err := r.Create(ctx, h, agents.Spec{Name: "carol", OwnerNotes: &off}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Create(ctx, h, agents.Spec{Name: "dan"}); err != nil {
		t.Fatal(err)
	}
	list, err := r.List(ctx, h.Store())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, a := range list {
		got[a.Name] = a.OwnerNotes
	}
	want := map[string]bool{"main": true, "worker": false, "bob": true, "carol": false, "dan": true}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: owner_notes %v, want %v", name, got[name], w)
		}
	}
	on := true
	if _, err := r.Update(ctx, h, "worker", agents.Patch{OwnerNotes: &on}); !errors.Is(err, agents.ErrInvalid) {
		t.Fatalf("owner notes for the worker: %v", err)
	}
	if a, err := r.Update(ctx, h, "carol", agents.Patch{OwnerNotes: &on}); err != nil || !a.OwnerNotes {
		t.Fatalf("owner notes turned on: %+v %v", a, err)
	}
}
