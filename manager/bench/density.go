package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/affido/affido/manager/provision"
)

// densityAt brings the stack to Density sandboxes at rest (new users, one
// after another, the capacity rule pausing the least recently active),
// then measures what a machine full of them costs: memory per paused agent,
// a paused one's resume against the raw unpause floor at that density, the
// engine's networks and iptables rules, and whether a new user still gets
// a sandbox.
func (r *runner) densityAt(ctx context.Context) error {
	n := r.cfg.Density
	if n <= 0 {
		return nil
	}
	var made []string
	start := time.Now()
	for i := range n {
		u, err := r.newUser(fmt.Sprintf("d%d", i))
		if err != nil {
			return err
		}
		if err := r.getRetrying(ctx, u, "/health"); err != nil {
			return fmt.Errorf("sandbox %d of %d: %w", i+1, n, err)
		}
		made = append(made, u)
		if (i+1)%50 == 0 {
			r.logf("bench: density: %d sandboxes in %v", i+1, time.Since(start).Round(time.Second))
		}
	}
	for _, u := range made { // at rest
		if _, id, err := r.endpoint(ctx, u); err == nil {
			_, _ = r.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{})
		}
	}
	var sets, usages []float64
	for _, u := range sample(made, 20) {
		if ws, usage, err := r.memory(ctx, provision.ContainerName(r.sandboxName(u))); err == nil && usage > 0 {
			sets, usages = append(sets, ws), append(usages, usage)
		}
	}
	ws, usage := medians(sets, usages)
	r.add(Figure{Name: fmt.Sprintf("density %d: memory per paused agent (MiB, median, working set)", n), Samples: len(sets), P50ms: ws,
		Note: fmt.Sprintf("cgroup usage less inactive file pages, as docker stats shows; with page cache %.1f MiB; p50 column holds MiB", usage)})

	var resumed, floor []time.Duration
	for _, u := range sample(made, 10) {
		// Up, then paused by the manager, as the idle tier pauses (the
		// docker pause above was behind its back), then the timed resume.
		if err := r.getRetrying(ctx, u, "/health"); err != nil {
			return err
		}
		if out, err := r.admin("evict", u, "--to", "paused"); err != nil {
			return fmt.Errorf("evict %s to paused: %v: %s", u, err, out)
		}
		d, err := r.get(ctx, u, "/health")
		if err != nil {
			return err
		}
		resumed = append(resumed, d)
		ep, id, err := r.endpoint(ctx, u)
		if err != nil {
			return err
		}
		if _, err := r.cli.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err != nil {
			return err
		}
		t0 := time.Now()
		if _, err := r.cli.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{}); err != nil {
			return err
		}
		if _, err := r.direct(ctx, ep, "/health"); err != nil {
			return err
		}
		floor = append(floor, time.Since(t0))
	}
	fr, ff := summarize(fmt.Sprintf("density %d: resume from paused", n), resumed), summarize(fmt.Sprintf("density %d: raw unpause + one request", n), floor)
	fr.Floor, fr.Ratio = ff.Name, fr.P50ms/ff.P50ms
	nets, _ := r.cli.NetworkList(ctx, client.NetworkListOptions{})
	rules := "iptables not readable"
	if out, err := exec.Command("iptables", "-S").Output(); err == nil {
		rules = fmt.Sprintf("%d iptables rules", strings.Count(string(out), "\n"))
	}
	fresh, err := r.newUser("dfresh")
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := r.getRetrying(ctx, fresh, "/health"); err != nil {
		return fmt.Errorf("a new user at density %d: %w", n, err)
	}
	fr.Note = fmt.Sprintf("%d networks, %s; a new user's sandbox came up in %v", len(nets.Items), rules, time.Since(t0).Round(time.Millisecond))
	r.add(fr)
	r.add(ff)
	return nil
}

// getRetrying is get, asking again while the answer is 429 or 503 (the
// capacity rule or the admission queue said when).
func (r *runner) getRetrying(ctx context.Context, user, path string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", r.cfg.URL+"/u/"+user+path, nil)
		req.Header.Set("Authorization", "Bearer "+r.token(user))
		_, code, err := r.timedGet(req)
		if err == nil && code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) || (err == nil && code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable) {
			return fmt.Errorf("GET /u/%s%s: %d %v", user, path, code, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// memory is a container's cgroup memory use in MiB.
// memory returns a container's memory in MiB: its working set (the cgroup's
// usage less its inactive file pages, which the kernel reclaims first:
// what docker stats shows and what the kubelet evicts by), and the raw
// usage, page cache included (the bench's figure before 2026-12-05).
func (r *runner) memory(ctx context.Context, name string) (workingSet, usage float64, err error) {
	st, err := r.cli.ContainerStats(ctx, name, client.ContainerStatsOptions{Stream: false})
	if err != nil {
		return 0, 0, err
	}
	defer st.Body.Close()
	var s container.StatsResponse
	if err := json.NewDecoder(st.Body).Decode(&s); err != nil {
		return 0, 0, err
	}
	inactive, ok := s.MemoryStats.Stats["total_inactive_file"] // cgroup v1
	if !ok {
		inactive = s.MemoryStats.Stats["inactive_file"] // cgroup v2
	}
	ws := s.MemoryStats.Usage
	if inactive < ws {
		ws -= inactive
	}
	return float64(ws) / (1 << 20), float64(s.MemoryStats.Usage) / (1 << 20), nil
}

// medians returns the medians of two samples.
func medians(a, b []float64) (float64, float64) {
	med := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		xs = append([]float64(nil), xs...)
		sort.Float64s(xs)
		return xs[len(xs)/2]
	}
	return med(a), med(b)
}

// sample returns up to k of xs, chosen at random.
func sample(xs []string, k int) []string {
	s := append([]string(nil), xs...)
	rand.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
	return s[:min(k, len(s))]
}
