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
