package registry_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/registry/registrytest"
)

// A claim from the pool moves the row to the user with the gateway
// token's hash in the same transaction (the manager binds the agent in one
// call after it); a second claim for the same user takes nothing.
func TestPostgresPoolClaimStoresTheTokenHash(t *testing.T) {
	store := registrytest.Store(t)
	ctx := t.Context()
	image := "sha256:pgtest-" + registry.NewToken()[:12]
	name := "pool.pgtest" + registry.NewToken()[:8]
	pick := func(used []netip.Prefix) (netip.Prefix, error) {
		for i := 0; i < 256; i++ {
			p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 250, byte(i), 0}), 24)
			taken := false
			for _, u := range used {
				taken = taken || u == p
			}
			if !taken {
				return p, nil
			}
		}
		return netip.Prefix{}, errors.New("no subnet left")
	}
	p, err := store.CreatePoolSandbox(ctx, name, image, pick)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.DeletePoolSandbox(ctx, name) })
	p.State, p.ContainerID = registry.PoolReady, "c-"+name
	if err := store.UpdatePoolSandbox(ctx, p); err != nil {
		t.Fatal(err)
	}
	user := "pgtest-" + registry.NewToken()[:12]
	token := registry.NewToken()
	row, err := store.ClaimPoolSandbox(ctx, user, image, registry.HashToken(token))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.DeleteSandbox(ctx, user) })
	got, err := store.Sandbox(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	if row.Name != name || got.Name != name || !bytes.Equal(got.TokenHash, registry.HashToken(token)) || got.ContainerID != "c-"+name {
		t.Fatalf("claimed row %+v, stored %+v: want %s with the token's hash", row, got, name)
	}
	// A row written back whole keeps the token hash the registry holds;
	// only SetSandboxToken changes it.
	stale := got
	stale.TokenHash, stale.State = registry.HashToken("stale"), registry.StateRunning
	if err := store.UpdateSandbox(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if again, _ := store.Sandbox(ctx, user); !bytes.Equal(again.TokenHash, registry.HashToken(token)) || again.State != registry.StateRunning {
		t.Fatalf("after UpdateSandbox with another hash: %+v, want the claim's hash kept and the state written", again)
	}
	if err := store.SetSandboxToken(ctx, user, registry.HashToken("rotated")); err != nil {
		t.Fatal(err)
	}
	if again, _ := store.Sandbox(ctx, user); !bytes.Equal(again.TokenHash, registry.HashToken("rotated")) {
		t.Fatalf("after SetSandboxToken: %x", again.TokenHash)
	}
	if err := store.DeletePoolSandbox(ctx, name); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("the pool row after the claim: %v, want gone", err)
	}
	if _, err := store.ClaimPoolSandbox(ctx, user, image, registry.HashToken("another")); err == nil {
		t.Fatal("a second claim for the same user succeeded")
	}
}
