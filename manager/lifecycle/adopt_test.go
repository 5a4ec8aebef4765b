package lifecycle

import (
	"context"
	"testing"

	"github.com/affido/affido/manager/registry"
)

// A manager killed in the middle of a claim: the registry moved the row
// (one transaction) but the agent was never told. The next manager adopts
// the sandbox as the user's, binds its agent on the first request, and
// the sandbox is neither in the pool nor lost.
func TestCrashMidClaimIsAdopted(t *testing.T) {
	r := newRig(t, Config{WarmPool: 1})
	r.run()
	r.eventually("a ready pool sandbox", func() bool { return r.reg.PoolCount(registry.PoolReady) == 1 })
	r.m.SetPool(context.Background(), 0, false)
	row, err := r.reg.ClaimPoolSandbox(context.Background(), "alice", testImage, nil) // ... and the manager dies
	if err != nil {
		t.Fatal(err)
	}
	n := r.restart(Config{})
	if n.reg.PoolCount("") != 0 {
		t.Fatal("the claimed sandbox is back in the pool")
	}
	ep := n.mustResolve("alice")
	if got := n.agents.Owner(ep); got != "alice" {
		t.Fatalf("agent bound to %q", got)
	}
	if got, _ := n.reg.Row("alice"); got.Name != row.Name || n.eng.count() != 1 {
		t.Fatalf("alice has %s (want %s), %d containers", got.Name, row.Name, n.eng.count())
	}
	// Bob never gets alice's sandbox.
	n.mustResolve("bob")
	if got, _ := n.reg.Row("bob"); got.Name == row.Name {
		t.Fatal("one sandbox bound to two users")
	}
}

// A pool sandbox half built when the manager died, and pool objects no row
// names, are removed by the next reconcile; users' unknown objects stay.
func TestReconcileRetiresHalfBuiltPool(t *testing.T) {
	r := newRig(t, Config{})
	ctx := context.Background()
	half, err := r.reg.CreatePoolSandbox(ctx, NewPoolName(), testImage, r.m.pickSubnet)
	if err != nil {
		t.Fatal(err)
	}
	n := Names{Stack: "t", Sandbox: half.Name}
	r.eng.EnsureNetwork(ctx, n, half.Subnet)
	r.eng.EnsureVolumes(ctx, n)
	orphan := Names{Stack: "t", Sandbox: NewPoolName()}
	r.eng.EnsureNetwork(ctx, orphan, half.Subnet)
	r.eng.EnsureVolumes(ctx, orphan)
	stranger := Names{Stack: "t", Sandbox: "stranger"}
	r.eng.EnsureNetwork(ctx, stranger, half.Subnet)
	r.run()
	r.eventually("half-built and orphaned pool objects gone", func() bool {
		return !r.eng.hasVolumes(half.Name) && !r.eng.hasVolumes(orphan.Sandbox) && r.reg.PoolCount("") == 0
	})
	r.eng.mu.Lock()
	defer r.eng.mu.Unlock()
	if r.eng.networks["stranger"] == "" {
		t.Fatal("reconcile removed objects that may hold a user's data")
	}
}
