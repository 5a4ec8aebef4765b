package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"

	"github.com/affido/affido/internal/profiling"
	"github.com/affido/affido/internal/sandboxapi"
)

// ProfileWarm is how many warm requests the profile window holds.
const ProfileWarm = 1000

// profileLead is how long the window runs before the first measured
// request: the profiles are asked for through docker exec and HTTP, and
// each process opens its window when the ask arrives.
const profileLead = time.Second

// profile takes the manager's and Caddy's profiles (profiling.Kinds) over
// one window of ProfileSeconds in which the bench makes one claim from the
// warm pool, one resume from paused and ProfileWarm warm requests, and
// writes them to ProfileDir with a summary. The manager's come from its
// admin socket (docker exec), Caddy's from its control listener with the
// control key, which the bench reads from Caddy's container.
func (r *runner) profile(ctx context.Context) error {
	dir := r.cfg.ProfileDir
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("profile directory: %w", err)
	}
	caddyBase, key, err := r.caddyControl(ctx)
	if err != nil {
		return err
	}

	// Everything the window's requests need, made before it opens: one
	// sandbox ready in the pool with no refill behind it, a new user's
	// token, a warm sandbox and a paused one.
	// The rows before this one leave more sandboxes running than the
	// stack's running capacity allows, and a full stack builds no pool
	// sandbox: every bench user but the two measured here goes to rest.
	r.mu.Lock()
	users := append([]string(nil), r.users...)
	r.mu.Unlock()
	warm, resumed := users[0], users[len(users)/2]
	if err := r.restExcept(users, warm, resumed); err != nil {
		return err
	}
	defer func() { _ = r.setPool(ctx, r.poolSize, false, 0) }()
	if err := r.setPool(ctx, max(r.poolSize, 1), false, 1); err != nil {
		return err
	}
	if _, err := r.admin("pool", "--size", "0"); err != nil {
		return err
	}
	claimer, err := r.newUser("profile")
	if err != nil {
		return err
	}
	for _, u := range []string{warm, resumed} {
		if _, err := r.get(ctx, u, "/health"); err != nil {
			return err
		}
	}
	_, id, err := r.endpoint(ctx, resumed)
	if err != nil {
		return err
	}
	if _, err := r.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err != nil {
		return err
	}
	time.Sleep(50 * time.Millisecond) // let the manager see the event, as in resume

	seconds := r.cfg.ProfileSeconds
	if seconds <= 0 {
		seconds = 10
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(profiling.Kinds))
	for _, kind := range profiling.Kinds {
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs <- r.managerProfile(ctx, kind, seconds, filepath.Join(dir, profileFile("manager", kind)))
		}()
		go func() {
			defer wg.Done()
			errs <- r.caddyProfile(ctx, caddyBase, key, kind, seconds, filepath.Join(dir, profileFile("caddy", kind)))
		}()
	}

	time.Sleep(profileLead)
	opened := time.Now()
	var notes []string
	timed := func(what, user string, n int) error {
		var ds []time.Duration
		for range n {
			d, err := r.get(ctx, user, "/health")
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			ds = append(ds, d)
		}
		f := summarize(what, ds)
		notes = append(notes, fmt.Sprintf("%-40s at +%6.0f ms: n=%d p50 %.2f ms p99 %.2f ms max %.2f ms",
			what, float64(time.Since(opened).Milliseconds())+float64(profileLead.Milliseconds()), f.Samples, f.P50ms, f.P99ms, f.MaxMs))
		return nil
	}
	opErr := errors.Join(
		timed("claim from the warm pool (new user)", claimer, 1),
		timed("resume from paused", resumed, 1),
		timed(fmt.Sprintf("%d warm requests, one at a time", ProfileWarm), warm, ProfileWarm),
	)
	took := time.Since(opened) + profileLead
	wg.Wait()
	close(errs)
	for err := range errs {
		opErr = errors.Join(opErr, err)
	}
	if opErr != nil {
		return opErr
	}
	if took > time.Duration(seconds)*time.Second {
		return fmt.Errorf("the requests took %v, longer than the %d s window: raise --profile-seconds", took.Round(time.Millisecond), seconds)
	}
	return r.profileSummary(dir, seconds, notes)
}

// restExcept pauses the sandboxes of users but keep through the manager
// (affido admin evict --to paused), four at a time.
func (r *runner) restExcept(users []string, keep ...string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 4)
	)
	for _, u := range users {
		if slices.Contains(keep, u) {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := r.admin("evict", u, "--to", "paused"); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func profileFile(proc, kind string) string {
	if kind == "trace" {
		return proc + ".trace"
	}
	return proc + "-" + kind + ".pprof"
}

// caddyControl returns the base URL of Caddy's control listener and the
// control key, from Caddy's container.
func (r *runner) caddyControl(ctx context.Context) (string, string, error) {
	res, err := r.cli.ContainerInspect(ctx, r.cfg.Stack+"-caddy", client.ContainerInspectOptions{})
	if err != nil {
		return "", "", fmt.Errorf("inspect caddy: %w", err)
	}
	env := map[string]string{}
	if res.Container.Config != nil {
		for _, kv := range res.Container.Config.Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	ip, key := env["AFFIDO_CADDY_IP"], env["AFFIDO_CONTROL_KEY"]
	if ip == "" || key == "" {
		return "", "", fmt.Errorf("caddy's container has no AFFIDO_CADDY_IP or AFFIDO_CONTROL_KEY")
	}
	return "http://" + ip + ":8081", key, nil
}

// managerProfile writes one of the manager's profiles to path.
func (r *runner) managerProfile(ctx context.Context, kind string, seconds int, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, "docker", "exec", r.manager(), "/bin/affido", "admin", "profile", kind, "--seconds", strconv.Itoa(seconds))
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = f, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("manager %s profile: %v: %s", kind, err, stderr.String())
	}
	return f.Close()
}

// caddyProfile writes one of Caddy's profiles to path.
func (r *runner) caddyProfile(ctx context.Context, base, key, kind string, seconds int, path string) error {
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/_profile/%s?seconds=%d", base, kind, seconds), nil)
	req.Header.Set(sandboxapi.HeaderControlKey, key)
	resp, err := (&http.Client{Timeout: time.Duration(seconds)*time.Second + 30*time.Second}).Do(req)
	if err != nil {
		return fmt.Errorf("caddy %s profile: %w", kind, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("caddy %s profile: %s: %s", kind, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(f, resp.Body); err != nil {
		return fmt.Errorf("caddy %s profile: %w", kind, err)
	}
	return f.Close()
}

// profileSummary writes SUMMARY.txt: what the window held, and, where the
// go command is found, the top of each profile.
func (r *runner) profileSummary(dir string, seconds int, notes []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "affido bench --profile, %s, %s\n\n", time.Now().UTC().Format(time.RFC3339), r.res.Machine)
	fmt.Fprintf(&b, "One window of %d s on the manager and Caddy (CPU, allocations, block, mutex, trace);\n", seconds)
	fmt.Fprintf(&b, "the requests, through Caddy, started %v into it:\n\n", profileLead)
	for _, n := range notes {
		b.WriteString("  " + n + "\n")
	}
	b.WriteString("\nRead: go tool pprof -top FILE.pprof; go tool pprof -http=: FILE.pprof; go tool trace FILE.trace\n")
	for _, proc := range []string{"manager", "caddy"} {
		for _, kind := range []string{"cpu", "allocs", "block", "mutex"} {
			args := []string{"tool", "pprof", "-top", "-nodecount=25"}
			if kind == "allocs" {
				args = append(args, "-sample_index=alloc_space")
			}
			out, err := exec.Command("go", append(args, filepath.Join(dir, profileFile(proc, kind)))...).CombinedOutput()
			if err != nil {
				continue // no go command here: the files are the result
			}
			fmt.Fprintf(&b, "\n== %s %s ==\n%s", proc, kind, out)
		}
	}
	return os.WriteFile(filepath.Join(dir, "SUMMARY.txt"), []byte(b.String()), 0o644)
}
