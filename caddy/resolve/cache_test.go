package resolve

import (
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"
)

var epA = netip.MustParseAddrPort("10.213.0.2:8080")

// clock is a settable now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newTestCache() (*Cache, *clock) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	c := NewCache()
	c.now = clk.now
	return c, clk
}

func decision(user string, clk *clock) Decision {
	return Decision{User: user, Endpoint: epA, Until: clk.now().Add(time.Minute)}
}

func TestCacheKeepsOnlyUnderAFreshLease(t *testing.T) {
	c, clk := newTestCache()
	k := KeyOf("alice", "s-alice", "", true)
	c.Put(k, decision("alice", clk), c.Begin())
	if _, ok := c.Get(k); ok {
		t.Fatal("a decision kept without a lease")
	}
	c.Lease(clk.now().Add(2 * time.Second))
	c.Put(k, decision("alice", clk), c.Begin())
	if d, ok := c.Get(k); !ok || d.Endpoint != epA {
		t.Fatalf("under a lease: %v %v", d, ok)
	}
	// The manager stops renewing (it cannot reach this Caddy): once the
	// lease lapses nothing is answered, and a later lease does not bring
	// back what was kept before the gap.
	clk.add(2 * time.Second)
	if _, ok := c.Get(k); ok {
		t.Fatal("answered after the lease lapsed")
	}
	c.Lease(clk.now().Add(2 * time.Second))
	if _, ok := c.Get(k); ok {
		t.Fatal("a decision from before the lapse came back with the next lease")
	}
}

func TestCacheLapseWithoutAGetForgetsToo(t *testing.T) {
	c, clk := newTestCache()
	k := KeyOf("alice", "", "t-alice", false)
	c.Lease(clk.now().Add(time.Second))
	c.Put(k, decision("alice", clk), c.Begin())
	clk.add(3 * time.Second) // no request in the gap
	c.Lease(clk.now().Add(time.Second))
	if _, ok := c.Get(k); ok {
		t.Fatal("kept across a lapse nobody asked during")
	}
}

// The race a naive cache loses: a request asks the manager, the owner
// revokes the credential (the manager pushes a forget and answers the
// revoke), then the request's answer, given before the revoke, arrives.
// It must not be kept, or the next request is let in.
func TestCacheDropsAnAnswerThatCrossedAForget(t *testing.T) {
	for _, forget := range []string{"alice", ""} {
		c, clk := newTestCache()
		c.Lease(clk.now().Add(time.Minute))
		k := KeyOf("alice", "s-alice", "", false)
		gen := c.Begin()
		c.Forget(forget)
		c.Put(k, decision("alice", clk), gen)
		if _, ok := c.Get(k); ok {
			t.Fatalf("Forget(%q): an answer from before the forget was kept", forget)
		}
	}
}

func TestCacheForgetsOneUserOrAll(t *testing.T) {
	c, clk := newTestCache()
	c.Lease(clk.now().Add(time.Minute))
	ka, kb := KeyOf("alice", "s-alice", "", false), KeyOf("bob", "", "t-bob", false)
	c.Put(ka, decision("alice", clk), c.Begin())
	c.Put(kb, decision("bob", clk), c.Begin())
	c.Forget("alice")
	if _, ok := c.Get(ka); ok {
		t.Fatal("alice kept after her forget")
	}
	if _, ok := c.Get(kb); !ok {
		t.Fatal("bob forgotten with alice")
	}
	c.Forget("")
	if _, ok := c.Get(kb); ok {
		t.Fatal("bob kept after forget all")
	}
}

func TestCacheDecisionEndsAtItsUntil(t *testing.T) {
	c, clk := newTestCache()
	c.Lease(clk.now().Add(time.Hour))
	k := KeyOf("alice", "s-alice", "", false)
	c.Put(k, Decision{User: "alice", Endpoint: epA, Until: clk.now().Add(time.Second)}, c.Begin())
	clk.add(time.Second)
	if _, ok := c.Get(k); ok {
		t.Fatal("answered past the decision's until (the session's expiry)")
	}
}

func TestKeysSeparateCredentialsAndActivation(t *testing.T) {
	keys := map[Key]string{}
	for _, c := range []struct {
		name, user, session, bearer string
		act                         bool
	}{
		{"session", "alice", "x", "", false},
		{"bearer", "alice", "", "x", false},
		{"activating", "alice", "x", "", true},
		{"other user", "alicex", "", "", false},
		{"shifted", "alice", "", "", false},
	} {
		k := KeyOf(c.user, c.session, c.bearer, c.act)
		if prev, dup := keys[k]; dup {
			t.Fatalf("%s and %s share a key", prev, c.name)
		}
		keys[k] = c.name
	}
}

func TestCacheReportsTouchedUsers(t *testing.T) {
	c, clk := newTestCache()
	c.Lease(clk.now().Add(time.Minute))
	passive, active := KeyOf("alice", "s", "", false), KeyOf("bob", "", "t", true)
	c.Put(passive, decision("alice", clk), c.Begin())
	d := decision("bob", clk)
	d.Activating = true
	c.Put(active, d, c.Begin())
	c.Get(passive)
	c.Get(active)
	c.Get(passive)
	if got := c.Touched(); !reflect.DeepEqual(got, map[string]bool{"alice": false, "bob": true}) {
		t.Fatalf("touched %v", got)
	}
	if got := c.Touched(); len(got) != 0 {
		t.Fatalf("touched again %v", got)
	}
}

func TestCacheConcurrentUse(t *testing.T) {
	c, clk := newTestCache()
	c.Lease(clk.now().Add(time.Minute))
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := KeyOf("alice", "s", "", i%2 == 0)
			for range 1000 {
				c.Put(k, decision("alice", clk), c.Begin())
				c.Get(k)
				if i == 0 {
					c.Forget("alice")
					c.Touched()
				}
			}
		}()
	}
	wg.Wait()
}

func TestNilCacheKeepsNothing(t *testing.T) {
	var c *Cache
	c.Lease(time.Now().Add(time.Hour))
	c.Put(Key{}, Decision{Until: time.Now().Add(time.Hour)}, c.Begin())
	if _, ok := c.Get(Key{}); ok {
		t.Fatal("a nil cache answered")
	}
	c.Forget("")
	_ = c.Touched()
}
