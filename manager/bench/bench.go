// Package bench measures the paths users feel on a running stack and prints
// each next to its floor measured in the same run: cold provision against a
// raw create+start of the same image, resume against a raw unpause/start,
// a warm request through Caddy and forward_auth against the same request
// straight to the container; and how late reminders and jobs fire in each
// idle tier, quiet and with every core busy (lateness.go).
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/affido/affido/manager/provision"
)

// Config says what to measure and how much.
type Config struct {
	URL         string // Caddy, e.g. http://127.0.0.1:18080
	Stack       string // AFFIDO_STACK of the running stack
	Image       string // the agent image
	Users       int    // cold provisions (and resumes)
	Burst       int    // new users at once
	SameUser    int    // concurrent first requests for one user
	Warm        int    // sequential warm requests per path
	Concurrency int    // concurrent warm requests for the throughput figure
	Prompts     int    // prompt round trips per kind
	Lateness    int    // samples per tier of reminder and job lateness, quiet and busy (0: skip)
	Density     int    // with N > 0, also bring the stack to N sandboxes at rest and measure it
	// ProfileDir, if set, also receives the manager's and Caddy's profiles
	// over one window of ProfileSeconds (default 10) holding a pool claim,
	// a resume and ProfileWarm warm requests, with SUMMARY.txt.
	ProfileDir     string
	ProfileSeconds int
	Out            string // JSON output file
	Log            io.Writer
}

// Figure is one measured row.
type Figure struct {
	Name    string  `json:"name"`
	Samples int     `json:"samples"`
	P50ms   float64 `json:"p50_ms"`
	P99ms   float64 `json:"p99_ms"`
	MaxMs   float64 `json:"max_ms,omitempty"`
	Floor   string  `json:"floor,omitempty"` // name of the floor row
	Ratio   float64 `json:"ratio_p50,omitempty"`
	Note    string  `json:"note,omitempty"`
}

// Result is the whole run.
type Result struct {
	At      time.Time `json:"at"`
	Machine string    `json:"machine"`
	Figures []Figure  `json:"figures"`
}

func summarize(name string, ds []time.Duration) Figure {
	if len(ds) == 0 {
		return Figure{Name: name}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	// Nearest rank: the smallest sample with at least p of them at or
	// below it. With fewer than 100 samples p99 is the largest, never a
	// smaller one (rounding the index down under-reported it).
	pct := func(p float64) float64 {
		i := max(int(math.Ceil(p*float64(len(s))))-1, 0)
		return float64(s[i].Microseconds()) / 1000
	}
	return Figure{Name: name, Samples: len(s), P50ms: pct(0.5), P99ms: pct(0.99), MaxMs: float64(s[len(s)-1].Microseconds()) / 1000}
}

type runner struct {
	cfg   Config
	cli   *client.Client
	http  *http.Client
	res   Result
	users []string
	toks  map[string]string
	names map[string]string // user -> sandbox name, from the admin API
	mu    sync.Mutex
	// poolSize is the warm pool's size before the bench emptied it.
	poolSize int
	listing  listing // lateness.go
}

func (r *runner) logf(format string, args ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, format+"\n", args...)
	}
}

func (r *runner) add(f Figure) { r.res.Figures = append(r.res.Figures, f) }

// Run measures everything, prints the table to w and writes the JSON.
func Run(ctx context.Context, cfg Config, w io.Writer) (Result, error) {
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return Result{}, err
	}
	defer cli.Close()
	host, _ := os.Hostname()
	cores := strings.TrimSpace(run("nproc"))
	r := &runner{cfg: cfg, cli: cli, http: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		toks: map[string]string{}, names: map[string]string{}, res: Result{At: time.Now().UTC(), Machine: fmt.Sprintf("%s, %s cores", host, cores)}}
	defer r.cleanup()
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"pool off", r.poolOff},
		{"cold provision", r.cold},
		{"cold floor", r.coldFloor},
		{"warm", r.warm},
		{"resume", r.resume},
		{"burst", r.burst},
		{"from the pool", r.fromPool},
		{"prompt", r.prompts},
		{"lateness", r.lateness},
		{"profile", r.profile},
		{"density", r.density},
		{"density at N", r.densityAt},
	}
	for _, st := range steps {
		start := time.Now()
		if err := st.fn(ctx); err != nil {
			return r.res, fmt.Errorf("%s: %w", st.name, err)
		}
		r.logf("bench: %s done in %v", st.name, time.Since(start).Round(time.Millisecond))
	}
	Print(w, r.res)
	if cfg.Out != "" {
		if err := os.MkdirAll(filepath.Dir(cfg.Out), 0o755); err == nil {
			b, _ := json.MarshalIndent(r.res, "", "  ")
			_ = os.WriteFile(cfg.Out, b, 0o644)
		}
	}
	return r.res, nil
}

// Print writes the result as a table.
func Print(w io.Writer, res Result) {
	fmt.Fprintf(w, "Affido benchmark, %s, on %s\n\n", res.At.Format(time.RFC3339), res.Machine)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "what\tn\tp50 ms\tp99 ms\tmax ms\tvs floor (p50)\tnote")
	for _, f := range res.Figures {
		ratio := ""
		if f.Floor != "" {
			ratio = fmt.Sprintf("%.2fx %s", f.Ratio, f.Floor)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%s\t%s\n", f.Name, f.Samples, f.P50ms, f.P99ms, f.MaxMs, ratio, f.Note)
	}
	tw.Flush()
}

func run(name string, args ...string) string {
	out, _ := exec.Command(name, args...).Output()
	return string(out)
}

func (r *runner) manager() string { return r.cfg.Stack + "-manager" }

// newUser creates a bench user with an API token.
func (r *runner) newUser(tag string) (string, error) {
	user := fmt.Sprintf("bench-%s-%d", tag, time.Now().UnixNano()%1e9)
	out, err := exec.Command("docker", "exec", r.manager(), "/bin/affido", "admin", "token", user).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("create token: %v: %s", err, out)
	}
	r.mu.Lock()
	r.users = append(r.users, user)
	r.toks[user] = strings.TrimSpace(string(out))
	r.mu.Unlock()
	return user, nil
}

func (r *runner) token(user string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.toks[user]
}

func (r *runner) cleanup() {
	for _, u := range r.users {
		_ = exec.Command("docker", "exec", r.manager(), "/bin/affido", "admin", "reset", u).Run()
	}
	ctx := context.Background()
	_, _ = r.cli.ContainerRemove(ctx, "affidobench-floor", client.ContainerRemoveOptions{Force: true})
	_, _ = r.cli.NetworkRemove(ctx, "affidobench-floor", client.NetworkRemoveOptions{})
}

// timedGet sends req, reads the body and returns the time it took and the status.
func (r *runner) timedGet(req *http.Request) (time.Duration, int, error) {
	start := time.Now()
	resp, err := r.http.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(start), resp.StatusCode, nil
}

// get sends GET path through Caddy for user and fails on non-200.
func (r *runner) get(ctx context.Context, user, path string) (time.Duration, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", r.cfg.URL+"/u/"+user+path, nil)
	req.Header.Set("Authorization", "Bearer "+r.token(user))
	d, code, err := r.timedGet(req)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("GET /u/%s%s: %d", user, path, code)
	}
	return d, err
}

// direct sends GET path straight to the container at ep.
func (r *runner) direct(ctx context.Context, ep netip.AddrPort, path string) (time.Duration, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+ep.String()+path, nil)
	d, _, err := r.timedGet(req)
	return d, err
}

// waitDirect polls /health straight at ep every 5 ms until it answers.
func (r *runner) waitDirect(ctx context.Context, ep netip.AddrPort, start time.Time) error {
	for {
		if _, err := r.direct(ctx, ep, "/health"); err == nil {
			return nil
		}
		if time.Since(start) > 30*time.Second {
			return fmt.Errorf("%s never answered /health", ep)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *runner) endpoint(ctx context.Context, user string) (netip.AddrPort, string, error) {
	n := r.sandboxName(user)
	res, err := r.cli.ContainerInspect(ctx, provision.ContainerName(n), client.ContainerInspectOptions{})
	if err != nil {
		return netip.AddrPort{}, "", err
	}
	ep := res.Container.NetworkSettings.Networks[provision.NetworkName(n)]
	if ep == nil {
		return netip.AddrPort{}, "", fmt.Errorf("%s has no address", user)
	}
	return netip.AddrPortFrom(ep.IPAddress, 8080), res.Container.ID, nil
}

func (r *runner) cold(ctx context.Context) error {
	var ds []time.Duration
	for range r.cfg.Users {
		u, err := r.newUser("cold")
		if err != nil {
			return err
		}
		d, err := r.get(ctx, u, "/health")
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	f := summarize("cold provision (new user, first request through Caddy)", ds)
	f.Floor, f.Note = "raw create+start+/health", "network, 2 volumes, hardened container, readiness"
	r.add(f)
	return nil
}

// coldFloor creates and starts the same image on a plain internal network
// through the Docker API and polls /health directly.
func (r *runner) coldFloor(ctx context.Context) error {
	subnet := netip.MustParsePrefix("10.215.255.0/28")
	_, err := r.cli.NetworkCreate(ctx, "affidobench-floor", client.NetworkCreateOptions{Driver: "bridge", Internal: true,
		IPAM: &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet, Gateway: subnet.Addr().Next()}}}})
	if err != nil {
		return fmt.Errorf("create floor network: %w", err)
	}
	var ds []time.Duration
	ip := subnet.Addr().Next().Next()
	for range r.cfg.Users {
		start := time.Now()
		cr, err := r.cli.ContainerCreate(ctx, client.ContainerCreateOptions{Name: "affidobench-floor",
			// The floor is the bare agent: no second identity, no volumes.
			Config: &container.Config{Image: r.cfg.Image, User: "10001:10001",
				Env: []string{"SESSION_DB=/tmp/s.db", "WORKSPACE=/tmp/w", "AFFIDO_PRIVSEP=off"}},
			HostConfig: &container.HostConfig{NetworkMode: "affidobench-floor", Tmpfs: map[string]string{"/tmp": "rw"}},
			NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
				"affidobench-floor": {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: ip}}}},
		})
		if err != nil {
			return err
		}
		if _, err := r.cli.ContainerStart(ctx, cr.ID, client.ContainerStartOptions{}); err != nil {
			return err
		}
		if err := r.waitDirect(ctx, netip.AddrPortFrom(ip, 8080), start); err != nil {
			return err
		}
		ds = append(ds, time.Since(start))
		if _, err := r.cli.ContainerRemove(ctx, cr.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
			return err
		}
	}
	f := summarize("raw create+start+/health", ds)
	r.add(f)
	r.ratio("cold provision (new user, first request through Caddy)", f)
	return nil
}

// ratio sets the ratio of the named figure against floor.
func (r *runner) ratio(name string, floor Figure) {
	for i := range r.res.Figures {
		if r.res.Figures[i].Name == name && floor.P50ms > 0 {
			r.res.Figures[i].Ratio = r.res.Figures[i].P50ms / floor.P50ms
		}
	}
}

func (r *runner) warm(ctx context.Context) error {
	user := r.users[0]
	if _, err := r.get(ctx, user, "/status"); err != nil {
		return err
	}
	ep, _, err := r.endpoint(ctx, user)
	if err != nil {
		return err
	}
	var via, straight []time.Duration
	asked := r.resolves()
	for i := range r.cfg.Warm * 2 { // interleaved so both see the same noise
		if i%2 == 0 {
			d, err := r.get(ctx, user, "/health")
			if err != nil {
				return err
			}
			via = append(via, d)
		} else {
			d, err := r.direct(ctx, ep, "/health")
			if err != nil {
				return err
			}
			straight = append(straight, d)
		}
	}
	asked = r.resolves() - asked
	fv := summarize("warm /health through Caddy (the edge keeps the manager's answer)", via)
	fs := summarize("warm /health straight to the container", straight)
	fv.Floor, fv.Ratio = "straight to the container", fv.P50ms/fs.P50ms
	fv.Note = fmt.Sprintf("adds %.2f ms at p50; the manager was asked %d times for %d requests", fv.P50ms-fs.P50ms, asked, len(via))
	rps := func(fn func() error) float64 {
		var n int64
		var mu sync.Mutex
		deadline := time.Now().Add(2 * time.Second)
		var wg sync.WaitGroup
		for range r.cfg.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					if fn() == nil {
						mu.Lock()
						n++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		return float64(n) / 2
	}
	viaRPS := rps(func() error { _, err := r.get(ctx, user, "/health"); return err })
	directRPS := rps(func() error { _, err := r.direct(ctx, ep, "/health"); return err })
	fv.Note += fmt.Sprintf("; %.0f req/s vs %.0f req/s straight at concurrency %d", viaRPS, directRPS, r.cfg.Concurrency)
	r.add(fv)
	r.add(fs)
	return nil
}

// resolves is how many resolves the manager has answered (its metric, from
// the admin socket); -1 when it cannot be read.
func (r *runner) resolves() int {
	out, err := r.admin("metrics")
	if err != nil {
		return -1
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "affido_resolve_seconds_count") {
			if f := strings.Fields(line); len(f) == 2 {
				v, _ := strconv.ParseFloat(f[1], 64)
				n += int(v)
			}
		}
	}
	return n
}

func (r *runner) resume(ctx context.Context) error {
	var paused, behind, pausedFloor, stopped, stoppedFloor []time.Duration
	for _, u := range r.users[:r.cfg.Users] {
		ep, id, err := r.endpoint(ctx, u)
		if err != nil {
			return err
		}
		// From paused by the manager (the idle tier's way: evict --to
		// paused answers once the container is paused).
		if out, err := r.admin("evict", u, "--to", "paused"); err != nil {
			return fmt.Errorf("evict %s to paused: %v: %s", u, err, out)
		}
		d, err := r.get(ctx, u, "/health")
		if err != nil {
			return err
		}
		paused = append(paused, d)
		// From paused behind the manager's back (docker pause): the
		// manager looks at the container and asks the agent.
		if _, err := r.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond) // let the manager see the event
		if d, err = r.get(ctx, u, "/health"); err != nil {
			return err
		}
		behind = append(behind, d)
		// Floor: raw unpause plus one request.
		if _, err := r.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err != nil {
			return err
		}
		start := time.Now()
		if _, err := r.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{}); err != nil {
			return err
		}
		if _, err := r.direct(ctx, ep, "/health"); err != nil {
			return err
		}
		pausedFloor = append(pausedFloor, time.Since(start))
		// From stopped.
		timeout := 5
		if _, err := r.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
		if d, err = r.get(ctx, u, "/health"); err != nil {
			return err
		}
		stopped = append(stopped, d)
		if _, err := r.cli.ContainerStop(ctx, id, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
			return err
		}
		start = time.Now()
		if _, err := r.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
			return err
		}
		if err := r.waitDirect(ctx, ep, start); err != nil {
			return err
		}
		stoppedFloor = append(stoppedFloor, time.Since(start))
		if _, err := r.get(ctx, u, "/health"); err != nil { // let the manager catch up
			return err
		}
	}
	fp, fpf := summarize("resume from paused (first request through Caddy)", paused), summarize("raw unpause + one request", pausedFloor)
	fp.Floor, fp.Ratio = fpf.Name, fp.P50ms/fpf.P50ms
	fp.Note = "paused by the manager (evict --to paused, as the idle tier does)"
	fb := summarize("resume from a docker pause behind the manager's back", behind)
	fb.Floor, fb.Ratio = fpf.Name, fb.P50ms/fpf.P50ms
	fb.Note = "the manager looks at the container and asks the agent's /health"
	fs, fsf := summarize("resume from stopped (first request through Caddy)", stopped), summarize("raw start + /health", stoppedFloor)
	fs.Floor, fs.Ratio = fsf.Name, fs.P50ms/fsf.P50ms
	r.add(fp)
	r.add(fb)
	r.add(fpf)
	r.add(fs)
	r.add(fsf)
	return nil
}

func (r *runner) burst(ctx context.Context) error {
	f, err := r.burstNew(ctx, "burst")
	if err != nil {
		return err
	}
	f.Name = fmt.Sprintf("burst: %d new users at once, pool empty", r.cfg.Burst)
	r.add(f)

	// One user's first requests at once, on a machine whose cores are busy.
	stop := hog()
	defer stop()
	var wg sync.WaitGroup
	one, err := r.newUser("same")
	if err != nil {
		return err
	}
	ds := make([]time.Duration, r.cfg.SameUser)
	errs := make([]error, r.cfg.SameUser)
	for i := range ds {
		wg.Add(1)
		go func() { defer wg.Done(); ds[i], errs[i] = r.get(ctx, one, "/health") }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	stop()
	n := r.sandboxName(one)
	list, err := r.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("name", provision.ContainerName(n))})
	if err != nil {
		return err
	}
	f = summarize(fmt.Sprintf("burst: %d concurrent first requests, one user, every core busy", r.cfg.SameUser), ds)
	f.Note = fmt.Sprintf("%d container(s) created", len(list.Items))
	r.add(f)
	return nil
}

func (r *runner) prompts(ctx context.Context) error {
	user := r.users[0]
	if _, err := r.get(ctx, user, "/health"); err != nil {
		return err
	}
	for _, kind := range []struct{ name, text string }{
		{"prompt round trip, no tools (scripted model)", "hello"},
		{"prompt round trip, one tool call (scripted model)", "list"},
	} {
		var ds []time.Duration
		for range r.cfg.Prompts {
			body := strings.NewReader(`{"text":"` + kind.text + `"}`)
			req, _ := http.NewRequestWithContext(ctx, "POST", r.cfg.URL+"/u/"+user+"/prompt", body)
			req.Header.Set("Authorization", "Bearer "+r.token(user))
			start := time.Now()
			resp, err := r.http.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("prompt: %s", resp.Status)
			}
			ds = append(ds, time.Since(start))
		}
		r.add(summarize(kind.name, ds))
	}
	return nil
}

func (r *runner) density(ctx context.Context) error {
	// Pause every bench sandbox first: density is about sandboxes at rest.
	var sets, usages []float64
	for _, u := range r.users {
		n := r.sandboxName(u)
		if res, err := r.cli.ContainerInspect(ctx, provision.ContainerName(n), client.ContainerInspectOptions{}); err == nil && res.Container.State != nil && res.Container.State.Running && !res.Container.State.Paused {
			_, _ = r.cli.ContainerPause(ctx, provision.ContainerName(n), client.ContainerPauseOptions{})
		}
		if ws, usage, err := r.memory(ctx, provision.ContainerName(n)); err == nil && usage > 0 {
			sets, usages = append(sets, ws), append(usages, usage)
		}
	}
	ws, usage := medians(sets, usages)
	mgr, _, _ := r.memory(ctx, r.cfg.Stack+"-manager")
	cad, _, _ := r.memory(ctx, r.cfg.Stack+"-caddy")
	r.add(Figure{Name: "density: memory per paused agent (MiB, median, working set)", Samples: len(sets), P50ms: ws,
		Note: fmt.Sprintf("cgroup usage less inactive file pages, as docker stats shows; with page cache %.1f MiB. Manager %.1f MiB, caddy %.1f MiB (working set); p50 column holds MiB", usage, mgr, cad)})
	return nil
}
