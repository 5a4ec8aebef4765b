package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/affido/affido/manager/lifecycle"
)

// admin runs `affido admin ARGS` in the stack's manager.
func (r *runner) admin(args ...string) ([]byte, error) {
	out, err := exec.Command("docker", append([]string{"exec", r.manager(), "/bin/affido", "admin"}, args...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("affido admin %v: %v: %s", args, err, out)
	}
	return out, nil
}

// pool returns the warm pool's size and how many are ready.
func (r *runner) pool() (size, ready int, err error) {
	out, err := exec.Command("docker", "exec", r.manager(), "/bin/affido", "admin", "sandboxes", "--json").Output()
	if err != nil {
		return 0, 0, fmt.Errorf("list sandboxes: %w", err)
	}
	var list []struct{ User, Name, State string }
	if err := json.Unmarshal(out, &list); err != nil {
		return 0, 0, err
	}
	r.mu.Lock()
	for _, s := range list {
		if s.User != "" {
			r.names[s.User] = s.Name
		} else if s.State == "pool" {
			ready++
		}
	}
	r.mu.Unlock()
	sz, err := r.admin("pool")
	if err != nil {
		return 0, 0, err
	}
	_, err = fmt.Sscanf(string(sz), "warm pool: %d", &size)
	return size, ready, err
}

// setPool sizes the pool (drained first with drain) and waits for want ready.
func (r *runner) setPool(ctx context.Context, size int, drain bool, want int) error {
	args := []string{"pool", "--size", strconv.Itoa(size)}
	if drain {
		args = append(args, "--drain")
	}
	if _, err := r.admin(args...); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		_, ready, err := r.pool()
		if err != nil {
			return err
		}
		if ready >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the warm pool has %d ready, want %d", ready, want)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// sandboxName is what user's sandbox objects are named after (the user id,
// or a pool name for a sandbox claimed from the warm pool).
func (r *runner) sandboxName(user string) lifecycle.Names {
	r.mu.Lock()
	name, ok := r.names[user]
	r.mu.Unlock()
	if !ok {
		_, _, _ = r.pool()
		r.mu.Lock()
		name, ok = r.names[user]
		r.mu.Unlock()
	}
	if !ok {
		name = user
	}
	return lifecycle.Names{Stack: r.cfg.Stack, Sandbox: name}
}

// poolOff empties the warm pool for the cold rows, remembering its size.
func (r *runner) poolOff(ctx context.Context) error {
	size, _, err := r.pool()
	if err != nil {
		return err
	}
	r.poolSize = size
	return r.setPool(ctx, 0, true, 0)
}

// fromPool measures a new user's first request claimed from the pool, one
// at a time (the pool refilled between), then a burst of new users with the
// pool full, and puts the pool back to its size.
func (r *runner) fromPool(ctx context.Context) error {
	defer func() { _ = r.setPool(ctx, r.poolSize, false, 0) }()
	if err := r.setPool(ctx, 1, false, 1); err != nil {
		return err
	}
	var ds []time.Duration
	for range r.cfg.Users {
		if err := r.setPool(ctx, 1, false, 1); err != nil {
			return err
		}
		u, err := r.newUser("pool")
		if err != nil {
			return err
		}
		d, err := r.get(ctx, u, "/health")
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	f := summarize("new user from the warm pool (first request through Caddy)", ds)
	f.Floor, f.Note = "raw unpause + one request", "one registry transaction and one POST /claim; the pool runs unpaused, so the floor's unpause is not paid"
	for _, fl := range r.res.Figures {
		if fl.Name == f.Floor && fl.P50ms > 0 {
			f.Ratio = f.P50ms / fl.P50ms
		}
	}
	r.add(f)
	if err := r.setPool(ctx, r.cfg.Burst, false, r.cfg.Burst); err != nil {
		return err
	}
	if _, err := r.admin("pool", "--size", "0"); err != nil { // no refill during the burst
		return err
	}
	bf, err := r.burstNew(ctx, "bpool")
	if err != nil {
		return err
	}
	bf.Name = fmt.Sprintf("burst: %d new users at once, pool full", r.cfg.Burst)
	r.add(bf)
	return nil
}

// burstNew sends the first requests of Burst new users at once.
func (r *runner) burstNew(ctx context.Context, tag string) (Figure, error) {
	users := make([]string, r.cfg.Burst)
	for i := range users {
		u, err := r.newUser(tag)
		if err != nil {
			return Figure{}, err
		}
		users[i] = u
	}
	ds := make([]time.Duration, len(users))
	errs := make([]error, len(users))
	var wg sync.WaitGroup
	for i, u := range users {
		wg.Add(1)
		go func() { defer wg.Done(); ds[i], errs[i] = r.get(ctx, u, "/health") }()
	}
	wg.Wait()
	failed := 0
	var ok []time.Duration
	for i, err := range errs {
		if err != nil {
			failed++
			r.logf("bench: burst: %v", err)
			continue
		}
		ok = append(ok, ds[i])
	}
	f := summarize("", ok)
	f.Note = fmt.Sprintf("%d of %d failed", failed, len(users))
	return f, nil
}

// hog keeps every core busy until the returned stop is called: a machine
// under load, as a same-user burst may meet it.
func hog() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range runtime.NumCPU() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := 0
			for {
				select {
				case <-done:
					return
				default:
					for i := range 100000 {
						x += i
					}
				}
			}
		}()
	}
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}
