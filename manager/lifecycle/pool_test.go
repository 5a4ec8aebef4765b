package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/affido/affido/manager/registry"
)

// The pool fills to its size with running, unclaimed sandboxes that
// belong to nobody; a new user's first request claims one (no unpause, no
// create) under its pool name, and the pool refills.
func TestPoolFillsAndIsClaimed(t *testing.T) {
	r := newRig(t, Config{WarmPool: 2})
	r.run()
	r.eventually("two ready pool sandboxes", func() bool { return r.reg.PoolCount(registry.PoolReady) == 2 })
	ready := map[string]bool{}
	for _, p := range mustPool(t, r) {
		if got := r.eng.status(p.Name); got != "running" || !IsPoolName(p.Name) {
			t.Fatalf("pool sandbox %s is %q", p.Name, got)
		}
		ready[p.Name] = true
	}
	ep := r.mustResolve("alice")
	row, _ := r.reg.Row("alice")
	if !ready[row.Name] || r.eng.status(row.Name) != "running" {
		t.Fatalf("alice's row %+v: not one of the ready pool sandboxes, running", row)
	}
	if got := r.agents.Owner(ep); got != "alice" {
		t.Fatalf("claimed agent bound to %q", got)
	}
	r.eventually("the pool to refill", func() bool { return r.reg.PoolCount(registry.PoolReady) == 2 })
}

// Twenty new users with a pool of twenty: every one claims, none creates.
func TestBurstFromAFullPool(t *testing.T) {
	r := newRig(t, Config{WarmPool: 20})
	r.run()
	r.eventually("a full pool", func() bool { return r.reg.PoolCount(registry.PoolReady) == 20 })
	r.m.SetPool(context.Background(), 0, false) // no refill, so every container counted is a claim
	creates := r.eng.creates
	users := make([]string, 20)
	for i := range users {
		users[i] = fmt.Sprintf("u%d", i)
	}
	for _, err := range r.resolveAll(users) {
		if err != nil {
			t.Fatal(err)
		}
	}
	if r.eng.creates != creates {
		t.Fatalf("%d creates during a burst from a full pool", r.eng.creates-creates)
	}
	seen := map[string]bool{}
	for _, u := range users {
		row, _ := r.reg.Row(u)
		if seen[row.Name] {
			t.Fatalf("%s given to two users", row.Name)
		}
		seen[row.Name] = true
	}
}

// The pool never builds while a user waits for an admission slot.
func TestPoolWaitsBehindUsers(t *testing.T) {
	r := newRig(t, Config{Admission: 1})
	r.run()
	r.eng.gate = make(chan struct{})
	go r.resolve("first") // holds the only slot
	r.eventually("first in the engine", func() bool { r.eng.mu.Lock(); defer r.eng.mu.Unlock(); return r.eng.heavy == 1 })
	go r.resolve("second") // waits
	r.eventually("second queued", func() bool { return r.m.adm.position("second") == 1 })
	if _, ok := r.m.adm.tryAcquire(); ok {
		t.Fatal("background work took a slot ahead of a waiting user")
	}
	close(r.eng.gate)
}

// Evicting a claimed sandbox keeps its pool-named volumes; the next request
// provisions a container on them; reset removes them.
func TestClaimedSandboxKeepsItsNames(t *testing.T) {
	r := newRig(t, Config{WarmPool: 1})
	r.run()
	r.eventually("a ready pool sandbox", func() bool { return r.reg.PoolCount(registry.PoolReady) == 1 })
	r.m.SetPool(context.Background(), 0, false)
	r.mustResolve("alice")
	row, _ := r.reg.Row("alice")
	if err := r.m.Evict(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if r.eng.status(row.Name) != "" || !r.eng.hasVolumes(row.Name) {
		t.Fatal("evict: container left or volumes gone")
	}
	ep := r.mustResolve("alice")
	if r.eng.status(row.Name) != "running" || r.agents.Owner(ep) != "alice" {
		t.Fatal("reprovision did not use the recorded names")
	}
	if err := r.m.Reset(context.Background(), "alice"); err != nil {
		t.Fatal(err)
	}
	if r.eng.hasVolumes(row.Name) || r.eng.status(row.Name) != "" {
		t.Fatal("reset left the pool-named volumes")
	}
	if _, ok := r.reg.Row("alice"); ok {
		t.Fatal("reset left the row")
	}
}

// A changed image drains the pool: the old sandboxes go, new ones come.
func TestPoolDrainsOnAnotherImage(t *testing.T) {
	r := newRig(t, Config{WarmPool: 2})
	r.run()
	r.eventually("a full pool", func() bool { return r.reg.PoolCount(registry.PoolReady) == 2 })
	old := mustPool(t, r)
	r.restart(Config{WarmPool: 2, ImageID: "sha256:other"})
	r.eventually("the old pool retired", func() bool {
		for _, p := range old {
			if r.eng.status(p.Name) != "" {
				return false
			}
		}
		return r.reg.PoolCount(registry.PoolReady) == 2
	})
}

func mustPool(t *testing.T, r *rig) []registry.PoolSandbox {
	t.Helper()
	ps, err := r.reg.PoolSandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// A claim from the pool binds its agent in one call: the claim's
// transaction stores the token's hash, and the agent gets that token with
// POST /claim if_unclaimed; no /health, no user lock, no second write of
// the token. The registry and the agent agree on the token.
func TestClaimFromThePoolBindsInOneCall(t *testing.T) {
	r := newRig(t, Config{WarmPool: 1})
	r.run()
	r.eventually("a ready pool sandbox", func() bool { return r.reg.PoolCount(registry.PoolReady) == 1 })
	if err := r.m.SetPool(context.Background(), 0, false); err != nil { // no refill: its build asks /health
		t.Fatal(err)
	}
	healthBefore := r.agents.HealthCalls()
	ep := r.mustResolve("alice")
	if got := r.agents.HealthCalls() - healthBefore; got != 0 {
		t.Errorf("the claim asked /health %d times, want 0", got)
	}
	row, _ := r.reg.Row("alice")
	tok := r.agents.Token(ep)
	if r.agents.Owner(ep) != "alice" || tok == "" || !bytes.Equal(row.TokenHash, registry.HashToken(tok)) {
		t.Fatalf("agent bound to %q with token %q; the registry holds hash %x", r.agents.Owner(ep), tok, row.TokenHash)
	}
}

// Another manager binds the claimed agent (its own token, stored first)
// between this manager's claim and its POST /claim: the claim if_unclaimed
// is refused (claimed-already), this manager writes no token, and the
// registry and the agent agree on one token: the other manager's. (The
// first version failed this: the bring-up's last row write put the
// claim's hash back.)
func TestClaimFromThePoolNeverUndoesAnotherManagersBind(t *testing.T) {
	r := newRig(t, Config{WarmPool: 1})
	r.run()
	r.eventually("a ready pool sandbox", func() bool { return r.reg.PoolCount(registry.PoolReady) == 1 })
	var once sync.Once
	r.agents.SetBeforeClaim(func(key string) {
		once.Do(func() { // the other manager's bind, as bind does it: the hash, then the agent
			if err := r.reg.SetSandboxToken(context.Background(), "alice", registry.HashToken("tok-other-manager")); err != nil {
				t.Error(err)
			}
			r.agents.ClaimKey(key, "alice", "tok-other-manager")
		})
	})
	ep := r.mustResolve("alice")
	row, _ := r.reg.Row("alice")
	if tok := r.agents.Token(ep); tok != "tok-other-manager" || !bytes.Equal(row.TokenHash, registry.HashToken(tok)) {
		t.Fatalf("the agent holds %q; the registry holds hash %x (want both the other manager's token)", tok, row.TokenHash)
	}
}

// A pool agent that another user's bind reached first is refused, never
// rebound, and the request fails with ErrClaimedByOther.
func TestClaimFromThePoolOfAnotherUsersAgentIsRefused(t *testing.T) {
	r := newRig(t, Config{WarmPool: 1})
	r.run()
	r.eventually("a ready pool sandbox", func() bool { return r.reg.PoolCount(registry.PoolReady) == 1 })
	r.agents.SetBeforeClaim(func(key string) { r.agents.ClaimKey(key, "mallory", "tok-mallory") })
	_, err := r.resolve("alice")
	if !errors.Is(err, ErrClaimedByOther) {
		t.Fatalf("resolve: %v, want ErrClaimedByOther", err)
	}
	row, _ := r.reg.Row("alice")
	r.eng.mu.Lock()
	ip := r.eng.containers[row.Name].ip
	r.eng.mu.Unlock()
	ep := netip.AddrPortFrom(ip, 8080)
	if owner, tok := r.agents.Owner(ep), r.agents.Token(ep); owner != "mallory" || tok != "tok-mallory" {
		t.Fatalf("the agent is bound to %q with %q, want mallory's kept", owner, tok)
	}
}

// A manager that starts beside a full pool adopts it and builds nothing:
// the pool fills only after the first reconcile has read what is there.
// (Before, the fill loop started with an empty view and built a second
// pool beside the adopted one at every restart.)
func TestRestartBesideAFullPoolBuildsNothing(t *testing.T) {
	r := newRig(t, Config{WarmPool: 2})
	r.run()
	r.eventually("a full pool", func() bool { return r.reg.PoolCount(registry.PoolReady) == 2 })
	for i := range 3 {
		r = r.restart(Config{WarmPool: 2})
		r.eventually("no pool sandbox being built", func() bool {
			return r.reg.PoolCount(registry.PoolReady) == r.reg.PoolCount("")
		})
		if n := r.reg.PoolCount(""); n != 2 {
			t.Fatalf("after restart %d the pool has %d sandboxes, want 2", i+1, n)
		}
	}
}

// Two managers on one registry, engine and set of agents bring up the same
// new users at once, from the pool and not: every user ends with one
// sandbox whose agent holds the token whose hash the registry holds. (The
// second claim for a user fails on the registry's key and that request
// is answered with an error, as before; its client asks again.)
func TestTwoManagersClaimingTheSameUsersAgreeOnTheToken(t *testing.T) {
	a := newRig(t, Config{WarmPool: 3})
	a.run()
	b := newRigOn(t, Config{WarmPool: 3}, a.eng, a.reg, a.agents)
	b.run()
	a.eventually("a ready pool", func() bool { return a.reg.PoolCount(registry.PoolReady) >= 3 })
	for i := range 12 {
		user := fmt.Sprintf("u%d", i)
		var wg sync.WaitGroup
		eps := make([]netip.AddrPort, 2)
		for j, r := range []*rig{a, b} {
			wg.Go(func() {
				ep, err := r.resolve(user)
				if err != nil { // lost the claim to the other manager: ask again
					ep, err = r.resolve(user)
				}
				if err != nil {
					t.Errorf("resolve %s twice: %v", user, err)
				}
				eps[j] = ep
			})
		}
		wg.Wait()
		row, _ := a.reg.Row(user)
		if eps[0] != eps[1] {
			t.Fatalf("%s: the managers answered %s and %s", user, eps[0], eps[1])
		}
		tok := a.agents.Token(eps[0])
		if a.agents.Owner(eps[0]) != user || !bytes.Equal(row.TokenHash, registry.HashToken(tok)) {
			t.Fatalf("%s: the agent is %q's with token %q; the registry holds hash %x", user, a.agents.Owner(eps[0]), tok, row.TokenHash)
		}
	}
}

// A first reconcile that fails (the registry not answering yet) is tried
// again, and the pool fills once one succeeds. (With the pool waiting for
// the first reconcile, a failed one left it empty until the engine's event
// stream broke.)
func TestPoolFillsAfterAFailedFirstReconcile(t *testing.T) {
	r := newRig(t, Config{WarmPool: 2})
	r.reg.FailPoolSandboxes(1)
	r.run()
	r.eventually("a full pool", func() bool { return r.reg.PoolCount(registry.PoolReady) == 2 })
}

// A claim from the pool takes a running slot like any bring-up: with the
// capacity full of users in use, a new user's claim is refused (429), and
// no more user sandboxes run than the capacity, though ready pool
// sandboxes run too.
func TestClaimFromThePoolKeepsToTheCapacity(t *testing.T) {
	r := newRig(t, Config{WarmPool: 3, MaxRunning: 2})
	r.run()
	r.eventually("a ready pool", func() bool { return r.reg.PoolCount(registry.PoolReady) == 3 })
	if err := r.m.SetPool(context.Background(), 0, false); err != nil { // no refill: a build takes a slot too
		t.Fatal(err)
	}
	r.mustResolve("alice")
	r.mustResolve("bob")
	_, err := r.resolve("carol")
	if !errors.Is(err, ErrCapacity) {
		t.Fatalf("carol's claim with the capacity full of users in use: %v, want ErrCapacity", err)
	}
	running := 0
	for _, u := range []string{"alice", "bob", "carol"} {
		if row, ok := r.reg.Row(u); ok && r.eng.status(row.Name) == "running" {
			running++
		}
	}
	if running > 2 {
		t.Fatalf("%d user sandboxes run, capacity 2", running)
	}
	if _, ok := r.reg.Row("carol"); ok {
		t.Fatal("carol was given a pool sandbox she cannot run")
	}
}

// Another manager's bind stored its token, but its claim never reached the
// agent (still nobody's), just before this manager's one-call bind took the
// lock: sending the claim's own token then would leave the registry and
// the agent on different tokens for good. The one-call bind sees the row's
// token is not its own and takes the general path, which binds the agent
// under the lock with a token the registry holds.
func TestClaimFromThePoolAfterAnotherBindsLostClaim(t *testing.T) {
	r := newRig(t, Config{WarmPool: 1})
	r.run()
	r.eventually("a ready pool sandbox", func() bool { return r.reg.PoolCount(registry.PoolReady) == 1 })
	var once sync.Once
	r.reg.OnLockUser(func(user string) {
		once.Do(func() {
			if err := r.reg.SetSandboxToken(context.Background(), user, registry.HashToken("tok-lost")); err != nil {
				t.Error(err)
			}
		})
	})
	ep := r.mustResolve("alice")
	row, _ := r.reg.Row("alice")
	if tok := r.agents.Token(ep); r.agents.Owner(ep) != "alice" || !bytes.Equal(row.TokenHash, registry.HashToken(tok)) {
		t.Fatalf("the agent is %q's with token %q; the registry holds hash %x", r.agents.Owner(ep), tok, row.TokenHash)
	}
}
