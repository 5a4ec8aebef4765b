//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"
)

// The fault driver: at random moments (a seeded RNG) it SIGKILLs an agent
// container or the manager (and starts it again, as the other e2e tests
// do), restarts Postgres (gracefully or by SIGKILL) and Caddy, pauses,
// stops and removes a sandbox behind the manager's back (docker) or through
// it (admin evict), fills a user's disk (uploads up to the workspace quota,
// held, then deleted) and keeps every core busy for a while. Faults that
// touch the whole stack come one at a time; a disk fill and a busy CPU run
// beside the others. Every fault is logged with the time it began and the
// time the stack was whole again, so a failed request can be checked
// against it.

// Fault kinds.
const (
	faultAgentKill       = "agent-kill"
	faultManagerKill     = "manager-kill"
	faultPostgresRestart = "postgres-restart"
	faultCaddyRestart    = "caddy-restart"
	faultSandboxPause    = "sandbox-pause"
	faultSandboxStop     = "sandbox-stop"
	faultSandboxRemove   = "sandbox-remove"
	faultDiskFill        = "disk-fill"
	faultCPUBusy         = "cpu-busy"
)

// faultDeck is drawn from without replacement and shuffled anew when
// empty, so every kind comes within each round of len(faultDeck) faults
// (an agent kill twice a round).
var faultDeck = []string{faultAgentKill, faultAgentKill, faultManagerKill, faultPostgresRestart, faultCaddyRestart,
	faultSandboxPause, faultSandboxStop, faultSandboxRemove, faultDiskFill, faultCPUBusy}

// faultGrace is how long after a fault's end a failure may still be its
// doing (a sandbox being brought back, a connection Caddy held to the old
// manager).
const faultGrace = 20 * time.Second

// fault is one injected fault.
type fault struct {
	Kind       string
	User       string // the user whose sandbox or disk it hit; "" for the whole stack
	Start, End time.Time
	Detail     string
	Skipped    string // why nothing was injected (no sandbox running, …)
}

// explains reports whether f can be why a try of user's failed between
// start and end with code (0: no HTTP answer).
func (f fault) explains(user string, start, end time.Time, code int) bool {
	if f.Skipped != "" || f.Kind == faultCPUBusy {
		return false // a busy machine is slower, never a reason to fail
	}
	if f.User != "" && f.User != user {
		return false
	}
	if f.Kind == faultDiskFill && code != 507 {
		return false
	}
	return !end.Before(f.Start) && !start.After(f.End.Add(faultGrace))
}

// faultLog keeps the faults in the order they began.
type faultLog struct {
	mu     sync.Mutex
	faults []*fault
}

func (l *faultLog) begin(kind, user string) *fault {
	f := &fault{Kind: kind, User: user, Start: time.Now()}
	l.mu.Lock()
	l.faults = append(l.faults, f)
	l.mu.Unlock()
	return f
}

func (l *faultLog) end(f *fault, format string, args ...any) {
	l.mu.Lock()
	f.End, f.Detail = time.Now(), fmt.Sprintf(format, args...)
	l.mu.Unlock()
}

func (l *faultLog) skip(f *fault, format string, args ...any) {
	l.mu.Lock()
	f.End, f.Skipped = time.Now(), fmt.Sprintf(format, args...)
	l.mu.Unlock()
}

func (l *faultLog) list() []fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]fault, len(l.faults))
	for i, f := range l.faults {
		out[i] = *f
	}
	return out
}

// faultDriver injects faults until its context ends.
type faultDriver struct {
	s    *soak
	rng  *rand.Rand
	deck []string
	bg   sync.WaitGroup // disk fills and busy CPUs still running
	mu   sync.Mutex
	busy bool            // a cpu-busy is running
	full map[string]bool // users whose disk is being filled
}

func newFaultDriver(s *soak) *faultDriver {
	return &faultDriver{s: s, rng: rand.New(rand.NewPCG(s.cfg.Seed, 0xfa017)), full: map[string]bool{}}
}

// run injects a fault every 4 to 30 s (exponentially distributed, mean
// about 12 s) until ctx ends; background faults are undone by wait.
func (d *faultDriver) run(ctx context.Context) {
	for {
		gap := 4*time.Second + time.Duration(d.rng.ExpFloat64()*float64(8*time.Second))
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(gap, 30*time.Second)):
		}
		d.inject(ctx, d.draw())
	}
}

func (d *faultDriver) draw() string {
	if len(d.deck) == 0 {
		d.deck = append([]string(nil), faultDeck...)
		d.rng.Shuffle(len(d.deck), func(i, j int) { d.deck[i], d.deck[j] = d.deck[j], d.deck[i] })
	}
	k := d.deck[0]
	d.deck = d.deck[1:]
	return k
}

// wait returns once every background fault has been undone.
func (d *faultDriver) wait() { d.bg.Wait() }

func (d *faultDriver) inject(ctx context.Context, kind string) {
	log := d.s.faults
	switch kind {
	case faultAgentKill:
		u, f := d.sandboxTarget(kind, "running")
		if u == nil {
			return
		}
		if out, err := dockerTry("kill", "-s", "KILL", u.container()); err != nil {
			log.skip(f, "docker kill: %v %s", err, strings.TrimSpace(out))
			return
		}
		log.end(f, "SIGKILL to %s", u.container())
	case faultSandboxPause:
		u, f := d.sandboxTarget(kind, "running")
		if u == nil {
			return
		}
		if out, err := dockerTry("pause", u.container()); err != nil {
			log.skip(f, "docker pause: %v %s", err, strings.TrimSpace(out))
			return
		}
		log.end(f, "docker pause %s behind the manager's back", u.container())
	case faultSandboxStop:
		u, f := d.sandboxTarget(kind, "running", "paused")
		if u == nil {
			return
		}
		dockerTry("unpause", u.container()) // a frozen container is thawed before a stop (the engine can wedge otherwise)
		if out, err := dockerTry("stop", "-t", "5", u.container()); err != nil {
			log.skip(f, "docker stop: %v %s", err, strings.TrimSpace(out))
			return
		}
		log.end(f, "docker stop %s behind the manager's back", u.container())
	case faultSandboxRemove:
		u, f := d.sandboxTarget(kind, "running", "paused", "exited")
		if u == nil {
			return
		}
		if d.rng.IntN(2) == 0 {
			if out, err := dockerTry("exec", managerName(), "/bin/affido", "admin", "evict", u.ID); err != nil {
				log.skip(f, "admin evict: %v %s", err, strings.TrimSpace(out))
				return
			}
			log.end(f, "affido admin evict %s", u.ID)
			return
		}
		dockerTry("unpause", u.container())
		if out, err := dockerTry("rm", "-f", u.container()); err != nil {
			log.skip(f, "docker rm: %v %s", err, strings.TrimSpace(out))
			return
		}
		log.end(f, "docker rm -f %s behind the manager's back", u.container())
	case faultManagerKill:
		f := log.begin(kind, "")
		down := time.Duration(d.rng.IntN(3000)) * time.Millisecond
		if err := killAndStart(managerName(), down); err != nil {
			log.end(f, "%v", err)
			return
		}
		healthy := waitManager(90 * time.Second)
		log.end(f, "SIGKILL, down %v, healthy again: %v", down, healthy)
	case faultPostgresRestart:
		f := log.begin(kind, "")
		how := "docker restart"
		var err error
		if d.rng.IntN(2) == 0 {
			how = "SIGKILL and start"
			err = killAndStart(oltpName(), 0)
		} else if out, e := dockerTry("restart", "-t", "10", oltpName()); e != nil {
			err = fmt.Errorf("docker restart: %v %s", e, strings.TrimSpace(out))
		}
		healthy := waitManager(90 * time.Second)
		log.end(f, "%s, error %v; the manager healthy again: %v", how, err, healthy)
	case faultCaddyRestart:
		f := log.begin(kind, "")
		out, err := dockerTry("restart", "-t", "5", caddyName())
		answering := waitCaddy(60 * time.Second)
		log.end(f, "docker restart (error %v %s); answering again: %v", err, strings.TrimSpace(out), answering)
	case faultDiskFill:
		d.diskFill(ctx)
	case faultCPUBusy:
		d.cpuBusy(ctx)
	}
}

// sandboxTarget picks a user whose agent container is in one of states,
// and begins the fault on them; nil (and a skipped fault) when none is.
func (d *faultDriver) sandboxTarget(kind string, states ...string) (*soakUser, *fault) {
	var candidates []*soakUser
	for _, u := range d.s.users {
		st := containerState(u.container())
		for _, want := range states {
			if st == want {
				candidates = append(candidates, u)
			}
		}
	}
	if len(candidates) == 0 {
		f := d.s.faults.begin(kind, "")
		d.s.faults.skip(f, "no sandbox %s", strings.Join(states, " or "))
		return nil, nil
	}
	u := candidates[d.rng.IntN(len(candidates))]
	return u, d.s.faults.begin(kind, u.ID)
}

// containerState is Docker's status of a container, "missing" if none.
func containerState(name string) string {
	out, err := dockerTry("inspect", "-f", "{{.State.Status}}", name)
	if err != nil {
		return "missing"
	}
	return strings.TrimSpace(out)
}

// killAndStart SIGKILLs a control-plane container, waits until Docker has
// it stopped, keeps it down for down, and starts it again.
func killAndStart(name string, down time.Duration) error {
	if out, err := dockerTry("kill", "-s", "KILL", name); err != nil {
		return fmt.Errorf("docker kill %s: %v %s", name, err, strings.TrimSpace(out))
	}
	for deadline := time.Now().Add(30 * time.Second); containerState(name) == "running"; {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still running 30 s after SIGKILL", name)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(down) // the outage itself, drawn by the driver
	if out, err := dockerTry("start", name); err != nil {
		return fmt.Errorf("docker start %s: %v %s", name, err, strings.TrimSpace(out))
	}
	return nil
}

// waitManager waits until the manager's healthcheck passes (it fails while
// Postgres or the Docker event stream is down); false after within.
func waitManager(within time.Duration) bool {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if containerState(managerName()) != "running" {
			dockerTry("start", managerName()) // restart: unless-stopped also brings it back; this is quicker
			continue
		}
		if _, err := dockerTry("exec", managerName(), "/bin/affido", "manager", "healthcheck"); err == nil {
			return true
		}
	}
	return false
}

// waitCaddy waits until Caddy answers its published port at all.
func waitCaddy(within time.Duration) bool {
	c := &http.Client{Timeout: 2 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if resp, err := c.Get(baseURL + "/"); err == nil {
			resp.Body.Close()
			return true
		}
	}
	return false
}

// diskFill fills one user's workspace up to its quota in the background:
// uploads of 16 MiB, then 1 MiB, 64 KiB and 4 KiB until each size is
// refused (507), so even a small upload no longer fits; it holds the disk
// full for 10 to 40 s, then deletes what it wrote.
func (d *faultDriver) diskFill(ctx context.Context) {
	d.mu.Lock()
	var candidates []*soakUser
	for _, u := range d.s.users {
		if !d.full[u.ID] {
			candidates = append(candidates, u)
		}
	}
	if len(candidates) == 0 {
		d.mu.Unlock()
		d.s.faults.skip(d.s.faults.begin(faultDiskFill, ""), "every user's disk is being filled")
		return
	}
	u := candidates[d.rng.IntN(len(candidates))]
	d.full[u.ID] = true
	d.mu.Unlock()
	hold := 10*time.Second + time.Duration(d.rng.IntN(30))*time.Second
	f := d.s.faults.begin(faultDiskFill, u.ID)
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		defer func() { d.mu.Lock(); delete(d.full, u.ID); d.mu.Unlock() }()
		written, files, full := 0, 0, true
		for _, size := range []int{16 << 20, 1 << 20, 64 << 10, 4 << 10} {
			chunk := bytes.Repeat([]byte{'x'}, size)
			refused := false
			for i := 0; i < 80 && !refused; i++ {
				r, err := d.s.client.do(soakReq{user: u.ID, token: u.Token, method: "PUT",
					path: fmt.Sprintf("/u/%s/uploads/soak-fill/%d-%d.bin", u.ID, size, i), body: chunk, final: []int{507}})
				switch {
				case err != nil:
					refused = true // unanswered: the ledger has it
				case r.Code == 507:
					refused = true
				case r.Code == 201:
					written += size
					files++
				default:
					refused = true
				}
			}
			full = full && refused
		}
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
		r, err := d.s.client.do(soakReq{user: u.ID, token: u.Token, method: "DELETE", path: "/u/" + u.ID + "/files?path=uploads/soak-fill"})
		d.s.faults.end(f, "%d files, %d MiB written, quota reached %v, held %v, deleted: %d %v", files, written>>20, full, hold, r.Code, err)
	}()
}

// cpuBusy keeps every core busy for 10 to 40 s with one busy-looping
// process per core (as ./verify.sh --stress does), in the background.
func (d *faultDriver) cpuBusy(ctx context.Context) {
	d.mu.Lock()
	if d.busy {
		d.mu.Unlock()
		d.s.faults.skip(d.s.faults.begin(faultCPUBusy, ""), "the CPUs are busy already")
		return
	}
	d.busy = true
	d.mu.Unlock()
	hold := 10*time.Second + time.Duration(d.rng.IntN(30))*time.Second
	f := d.s.faults.begin(faultCPUBusy, "")
	n := runtime.NumCPU()
	var procs []*exec.Cmd
	for range n {
		cmd := exec.Command("yes")
		if err := cmd.Start(); err == nil {
			procs = append(procs, cmd)
		}
	}
	d.bg.Add(1)
	go func() {
		defer d.bg.Done()
		select {
		case <-ctx.Done():
		case <-time.After(hold):
		}
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
		d.mu.Lock()
		d.busy = false
		d.mu.Unlock()
		d.s.faults.end(f, "%d busy processes for %v", len(procs), hold)
	}()
}
