package edge

import (
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/internal/edgeapi"
)

// settledNow returns Decisions whose start is a lease ago, so Forget does
// not wait for a manager before this one, and records the touches.
func settledNow(t *testing.T) (*Decisions, *[]edgeapi.Touch) {
	t.Helper()
	var mu sync.Mutex
	var touched []edgeapi.Touch
	d := New(func(tc edgeapi.Touch) {
		mu.Lock()
		defer mu.Unlock()
		touched = append(touched, tc)
	})
	d.settled = time.Now()
	d.hold = 20 * time.Millisecond
	return d, &touched
}

// poll is one poll with nothing held.
func poll(d *Decisions, p edgeapi.Poll) edgeapi.Answer { return d.Poll(p, nil) }

func TestANewCaddyIsToldToForgetEverything(t *testing.T) {
	d, _ := settledNow(t)
	d.Forget("alice")
	a := poll(d, edgeapi.Poll{Caddy: "c1"})
	if !a.All || a.Seq != 1 || a.Epoch == "" || a.LeaseMS != edgeapi.Lease.Milliseconds() {
		t.Fatalf("first answer %+v, want all forgotten at seq 1 with a lease", a)
	}
	// Acks counted in another manager's epoch (this one restarted) are
	// worth nothing: everything again.
	if a := poll(d, edgeapi.Poll{Caddy: "c1", Epoch: "another", Acked: 7}); !a.All {
		t.Fatalf("another epoch's acks: %+v", a)
	}
}

func TestForgetWaitsForTheAckOfACaddyHoldingALease(t *testing.T) {
	d, touched := settledNow(t)
	first := poll(d, edgeapi.Poll{Caddy: "c1"})
	// c1 holds a lease now. Its next poll waits for a forget.
	answer := make(chan edgeapi.Answer, 1)
	go func() { answer <- d.Poll(edgeapi.Poll{Caddy: "c1", Epoch: first.Epoch, Acked: first.Seq}, nil) }()
	returned := make(chan struct{})
	go func() { d.Forget("bob"); close(returned) }()
	a := <-answer
	if a.All || len(a.Forget) != 1 || a.Forget[0] != "bob" || a.Seq != first.Seq+1 {
		t.Fatalf("the held poll answered %+v, want bob forgotten", a)
	}
	select {
	case <-returned:
		t.Fatal("Forget returned before the Caddy acknowledged it")
	default:
	}
	// The ack comes with the touches of the requests answered before it:
	// they are recorded before Forget returns.
	go poll(d, edgeapi.Poll{Caddy: "c1", Epoch: a.Epoch, Acked: a.Seq, Touched: []edgeapi.Touch{{User: "bob", Active: true}}})
	select {
	case <-returned:
	case <-time.After(edgeapi.Lease / 2):
		t.Fatal("Forget did not return on the ack")
	}
	if len(*touched) != 1 || (*touched)[0].User != "bob" {
		t.Fatalf("touches at Forget's return: %+v", *touched)
	}
}

func TestForgetOutwaitsASilentCaddysLease(t *testing.T) {
	d, _ := settledNow(t)
	d.lease = 300 * time.Millisecond
	poll(d, edgeapi.Poll{Caddy: "silent"}) // then never again
	start := time.Now()
	d.Forget("alice")
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("Forget returned after %v, inside the silent Caddy's lease", took)
	}
	// Its lease is over: the next forget does not wait.
	start = time.Now()
	d.Forget("alice")
	if took := time.Since(start); took > 200*time.Millisecond {
		t.Fatalf("a second Forget waited %v for a lease already over", took)
	}
}

func TestForgetWaitsOutTheLeasesOfAManagerBeforeThisOne(t *testing.T) {
	d := New(func(edgeapi.Touch) {})
	d.settled = time.Now().Add(200 * time.Millisecond)
	start := time.Now()
	d.Forget("") // no Caddy has polled this process yet
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("Forget returned after %v, inside the last manager's leases", took)
	}
}

func TestAForgetOfEveryoneAndATooLongGapAreAll(t *testing.T) {
	d, _ := settledNow(t)
	d.lease = time.Millisecond // the Forgets below wait at most that for c1
	first := poll(d, edgeapi.Poll{Caddy: "c1"})
	d.Forget("alice")
	d.Forget("")
	if a := poll(d, edgeapi.Poll{Caddy: "c1", Epoch: first.Epoch, Acked: first.Seq}); !a.All || a.Forget != nil {
		t.Fatalf("forget of everyone: %+v", a)
	}
	for range keepEvents + 1 {
		d.Forget("x")
	}
	if a := poll(d, edgeapi.Poll{Caddy: "c1", Epoch: first.Epoch, Acked: first.Seq}); !a.All {
		t.Fatalf("a Caddy past the kept forgets: %+v", a)
	}
}

// A Caddy back after a long silence is not dropped by another Caddy's
// poll while its own is held (the sweep of Caddies gone away): a Forget
// after its answer waits for it.
func TestAReturningCaddyIsNotSweptWhileItsPollIsHeld(t *testing.T) {
	d, _ := settledNow(t)
	clk := time.Now()
	var mu sync.Mutex
	d.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clk }
	first := poll(d, edgeapi.Poll{Caddy: "x"})
	mu.Lock()
	clk = clk.Add(2 * time.Minute) // x went silent; its record is old
	mu.Unlock()
	held := make(chan edgeapi.Answer, 1)
	go func() { held <- d.Poll(edgeapi.Poll{Caddy: "x", Epoch: first.Epoch, Acked: first.Seq}, nil) }()
	// y polls while x's poll is held (x's record is new or being renewed).
	deadline := time.Now().Add(10 * time.Second)
	for {
		d.mu.Lock()
		_, ok := d.caddies["x"]
		fresh := ok && d.caddies["x"].seen.Equal(clk)
		d.mu.Unlock()
		if fresh {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("x's poll did not arrive in 10 s")
		}
		time.Sleep(time.Millisecond) // the pace of the poll for the condition
	}
	poll(d, edgeapi.Poll{Caddy: "y"})
	<-held
	d.mu.Lock()
	_, kept := d.caddies["x"]
	d.mu.Unlock()
	if !kept {
		t.Fatal("x's record was swept while its poll was held: a Forget would not wait for its lease")
	}
}
