package resolve

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/internal/edgeapi"
)

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
	return Decision{User: user, Endpoint: "10.213.0.2:8080", Until: clk.now().Add(time.Minute)}
}

// lease applies an answer with nothing to forget, sent now.
func lease(c *Cache, clk *clock, seq uint64) {
	c.Apply(edgeapi.Answer{Epoch: "e1", Seq: seq, LeaseMS: 2000}, clk.now())
}

func TestCacheKeepsOnlyUnderAFreshLease(t *testing.T) {
	c, clk := newTestCache()
	k := KeyOf("alice", "s-alice", "", true)
	c.Put(k, decision("alice", clk), c.Begin())
	if _, ok := c.Get(k); ok {
		t.Fatal("a decision kept without a lease")
	}
	lease(c, clk, 0)
	c.Put(k, decision("alice", clk), c.Begin())
	if _, ok := c.Get(k); !ok {
		t.Fatal("not kept under a lease")
	}
	// The manager stops answering polls: once the lease lapses nothing is
	// answered, and a later lease does not bring back what was kept.
	clk.add(2 * time.Second)
	if _, ok := c.Get(k); ok {
		t.Fatal("answered after the lease lapsed")
	}
	lease(c, clk, 0)
	if _, ok := c.Get(k); ok {
		t.Fatal("a decision from before the lapse came back with the next lease")
	}
}

// The race a naive cache loses: a request asks the manager, the owner
// revokes the credential (the manager pushes a forget and answers the
// revoke), then the request's answer, given before the revoke, arrives.
// It must not be kept, or the next request is let in.
func TestCacheDropsAnAnswerThatCrossedAForget(t *testing.T) {
	for _, a := range []edgeapi.Answer{{Epoch: "e1", Seq: 1, Forget: []string{"bob"}, LeaseMS: 2000},
		{Epoch: "e1", Seq: 1, All: true, LeaseMS: 2000}, {Epoch: "e2", Seq: 1, LeaseMS: 2000}} {
		c, clk := newTestCache()
		lease(c, clk, 0)
		k := KeyOf("alice", "s-alice", "", true)
		gen := c.Begin() // the request asks the manager
		c.Apply(a, clk.now())
		c.Put(k, decision("alice", clk), gen) // its answer arrives after the forget
		if _, ok := c.Get(k); ok {
			t.Fatalf("%+v: an answer from before the forget was kept", a)
		}
	}
}

func TestCacheForgetsOnlyWhomItIsTold(t *testing.T) {
	c, clk := newTestCache()
	lease(c, clk, 0)
	ka, kb := KeyOf("alice", "s-a", "", true), KeyOf("bob", "", "t-b", true)
	c.Put(ka, decision("alice", clk), c.Begin())
	c.Put(kb, decision("bob", clk), c.Begin())
	c.Apply(edgeapi.Answer{Epoch: "e1", Seq: 1, Forget: []string{"bob"}, LeaseMS: 2000}, clk.now())
	if _, ok := c.Get(kb); ok {
		t.Fatal("bob's decision outlived his forget")
	}
	if _, ok := c.Get(ka); !ok {
		t.Fatal("alice's decision went with bob's forget")
	}
	if p := c.Poll("x"); p.Acked != 1 || p.Epoch != "e1" {
		t.Fatalf("the next poll acknowledges %d of %q, want 1 of e1", p.Acked, p.Epoch)
	}
}

func TestCacheReportsItsAnswersAsTouches(t *testing.T) {
	c, clk := newTestCache()
	lease(c, clk, 0)
	k := KeyOf("alice", "", "Bearer t", false)
	d := decision("alice", clk)
	d.Token = "abcd"
	c.Put(k, d, c.Begin())
	c.Get(k)
	p := c.Poll("x")
	if len(p.Touched) != 1 || p.Touched[0].User != "alice" || p.Touched[0].Active || len(p.Touched[0].Tokens) != 1 {
		t.Fatalf("touches %+v", p.Touched)
	}
	if p := c.Poll("x"); len(p.Touched) != 0 {
		t.Fatalf("touches reported twice: %+v", p.Touched)
	}
	c.Untouch([]edgeapi.Touch{{User: "alice", Active: true}}) // a poll that failed gives them back
	if p := c.Poll("x"); len(p.Touched) != 1 || !p.Touched[0].Active {
		t.Fatalf("touches given back: %+v", p.Touched)
	}
}

// One user's keys (a credential and whatever other cookies a client sends)
// take at most maxPerUser entries: a client varying a cookie cannot fill
// the cache and stop it keeping other users' decisions.
func TestCacheBoundsOneUsersPart(t *testing.T) {
	c, clk := newTestCache()
	lease(c, clk, 0)
	for i := range maxPerUser + 50 {
		c.Put(KeyOf("mallory", fmt.Sprintf("s; junk=%d", i), "", true), decision("mallory", clk), c.Begin())
	}
	if n := len(c.m); n != maxPerUser {
		t.Fatalf("one user holds %d entries, want %d", n, maxPerUser)
	}
	k := KeyOf("alice", "s-alice", "", true)
	c.Put(k, decision("alice", clk), c.Begin())
	if _, ok := c.Get(k); !ok {
		t.Fatal("alice's decision not kept beside mallory's")
	}
	c.Apply(edgeapi.Answer{Epoch: "e1", Seq: 1, Forget: []string{"mallory"}, LeaseMS: 2000}, clk.now())
	c.Put(KeyOf("mallory", "s", "", true), decision("mallory", clk), c.Begin())
	if n := len(c.m); n != 2 {
		t.Fatalf("after mallory's forget: %d entries, want alice's and mallory's new one", n)
	}
}
