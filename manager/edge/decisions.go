// Package edge is the manager's side of the edge's decision cache (issue
// 30's warm path; the contract is internal/edgeapi): it answers Caddy's
// polls with leases and forgets, and its Forget returns only once no Caddy
// can still answer from a decision the manager no longer gives.
//
// One manager only: a Caddy polling several managers through one address
// would hold leases from one while another forgets. Deployments with more
// than one manager leave it off (AFFIDO_EDGE_TTL=0); Caddy then gets no
// lease and asks the manager every time.
package edge

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/affido/affido/internal/edgeapi"
)

// keepEvents bounds the forgets kept for Caddies behind on their acks; one
// further behind is told to forget everything.
const keepEvents = 4096

// Decisions is the manager's record of the Caddies that keep decisions:
// what each has acknowledged and until when its lease runs. A nil
// *Decisions keeps no Caddy, and its Forget returns at once.
type Decisions struct {
	lease, hold time.Duration
	now         func() time.Time
	touch       func(edgeapi.Touch)
	epoch       string
	// settled: every lease a manager before this process gave has run
	// out (it started one lease ago).
	settled time.Time

	mu      sync.Mutex
	seq     uint64
	events  []event // seq ascending, at most keepEvents
	caddies map[string]*caddy
	changed chan struct{} // closed (and replaced) on a forget or an ack
}

type event struct {
	seq  uint64
	user string // "": everyone
}

type caddy struct {
	seen  time.Time // its last poll's arrival
	acked uint64
	// leaseEnd bounds the lease of every answer given so far: the poll's
	// arrival plus the lease (Caddy counts from its sending, earlier).
	leaseEnd time.Time
}

// New returns Decisions that hand out edgeapi.Lease and record each poll's
// touches with touch (the lifecycle's activity, the API tokens' last use).
func New(touch func(edgeapi.Touch)) *Decisions {
	now := time.Now()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &Decisions{
		lease: edgeapi.Lease, hold: edgeapi.Hold, now: time.Now, touch: touch,
		epoch: hex.EncodeToString(b), settled: now.Add(edgeapi.Lease),
		caddies: map[string]*caddy{}, changed: make(chan struct{}),
	}
}

// signalLocked wakes every poll and Forget waiting. Caller holds mu.
func (d *Decisions) signalLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// Poll records p's touches and acknowledgement, then holds it until there
// is something newer than its Acked to forget or the hold passes (or done
// closes), and answers what to forget and a lease.
func (d *Decisions) Poll(p edgeapi.Poll, done <-chan struct{}) edgeapi.Answer {
	arrived := d.now()
	for _, t := range p.Touched { // before the ack: a Forget that sees it sees them
		d.touch(t)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sweepLocked(arrived)
	c := d.caddies[p.Caddy]
	if c == nil {
		c = &caddy{}
		d.caddies[p.Caddy] = c
	}
	c.seen = arrived
	ours := p.Epoch == d.epoch
	if ours && p.Acked > c.acked && p.Acked <= d.seq {
		c.acked = p.Acked
		d.signalLocked()
	}
	if ours {
		timer := time.NewTimer(d.hold)
		defer timer.Stop()
	wait:
		for d.seq <= p.Acked {
			ch := d.changed
			d.mu.Unlock()
			select {
			case <-ch:
				d.mu.Lock()
			case <-timer.C:
				d.mu.Lock()
				break wait
			case <-done:
				d.mu.Lock()
				break wait
			}
		}
	}
	a := edgeapi.Answer{Epoch: d.epoch, Seq: d.seq, LeaseMS: d.lease.Milliseconds()}
	switch {
	case !ours || (len(d.events) > 0 && d.events[0].seq > p.Acked+1):
		a.All = true // a new Caddy, another manager's acks, or too far behind
	default:
		seen := map[string]bool{}
		for _, e := range d.events {
			if e.seq <= p.Acked || seen[e.user] {
				continue
			}
			if e.user == "" {
				a.All, a.Forget = true, nil
				break
			}
			seen[e.user] = true
			a.Forget = append(a.Forget, e.user)
		}
	}
	if end := arrived.Add(d.lease); end.After(c.leaseEnd) {
		c.leaseEnd = end
	}
	return a
}

// sweepLocked drops Caddies not heard from for a minute, whose last lease
// ran out long ago (a Caddy that went away). One whose poll is held is
// never dropped: its arrival is recent. Caller holds mu.
func (d *Decisions) sweepLocked(now time.Time) {
	for id, c := range d.caddies {
		if now.Sub(c.seen) > time.Minute && now.Sub(c.leaseEnd) > time.Minute {
			delete(d.caddies, id)
		}
	}
}

// Forget makes every Caddy drop user's decisions (user "": everyone's) and
// returns once each has acknowledged it or its lease has run out: at most
// one lease. Call it after the change it announces is committed (a revoked
// credential, a sandbox no longer served), so no decision Caddy asks for
// after it can be the old one.
func (d *Decisions) Forget(user string) {
	if d == nil {
		return
	}
	d.mu.Lock()
	d.seq++
	s := d.seq
	d.events = append(d.events, event{s, user})
	if len(d.events) > keepEvents {
		d.events = append(d.events[:0], d.events[len(d.events)-keepEvents:]...)
	}
	until := map[*caddy]time.Time{}
	for _, c := range d.caddies {
		until[c] = c.leaseEnd // the leases given before this forget
	}
	d.signalLocked()
	for {
		now := d.now()
		last := d.settled
		for c, end := range until {
			if c.acked >= s || !now.Before(end) {
				delete(until, c)
			} else if end.After(last) {
				last = end
			}
		}
		if len(until) == 0 && !now.Before(d.settled) {
			d.mu.Unlock()
			return
		}
		ch := d.changed
		d.mu.Unlock()
		timer := time.NewTimer(last.Sub(now))
		select {
		case <-ch:
		case <-timer.C:
		}
		timer.Stop()
		d.mu.Lock()
	}
}
