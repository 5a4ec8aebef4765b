package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/provision"
)

// Reminder and job lateness: how long after its due time a reminder and a
// scheduled job fire in an agent whose sandbox sleeps in each idle tier, or
// whose agent hangs, measured by the agent itself (the fired - due it
// records in the reminder and job_run entries). Each row runs quiet and
// again with every core busy. Goal (issue 29): p99 ≤ 100 ms in every row.

// latenessTiers are the rows: the tier the bench puts the sandbox in, and
// "hung", an agent stopped by SIGSTOP before the manager pauses it.
var latenessTiers = []string{"paused", "stopped", "removed", "hung"}

// latenessAhead is how far ahead each sample's reminder and job are due:
// time to set both, to put the sandbox down (a hung agent's pause waits
// 3 s for an answer that does not come) and still to leave the manager
// its whole wake lead (a hung agent's is the longest: resume, probe,
// replace).
const latenessAhead = 20 * time.Second

// lateness adds a reminder row and a job row per tier, quiet and busy.
func (r *runner) lateness(ctx context.Context) error {
	if r.cfg.Lateness <= 0 {
		return nil
	}
	for _, busy := range []bool{false, true} {
		for _, tier := range latenessTiers {
			if err := r.latenessRows(ctx, tier, busy); err != nil {
				return fmt.Errorf("%s: %w", tier, err)
			}
		}
	}
	return nil
}

// latenessRows measures Lateness samples of tier at once, each with a user
// of its own; with busy, one busy loop per core runs meanwhile.
func (r *runner) latenessRows(ctx context.Context, tier string, busy bool) error {
	if busy {
		stop := hog()
		defer stop()
	}
	n := r.cfg.Lateness
	rem, job := make([]time.Duration, n), make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rem[i], job[i], errs[i] = r.lateOnce(ctx, tier)
		}()
	}
	wg.Wait()
	var rems, jobs []time.Duration
	var failed []string
	for i, err := range errs {
		if err != nil {
			failed = append(failed, err.Error())
			continue
		}
		rems, jobs = append(rems, rem[i]), append(jobs, job[i])
	}
	if len(rems) == 0 {
		return fmt.Errorf("no sample: %s", strings.Join(failed, "; "))
	}
	where := map[string]string{"paused": "sandbox paused", "stopped": "sandbox stopped", "removed": "container removed",
		"hung": "agent hung (SIGSTOP) when paused"}[tier]
	if busy {
		where += ", every core busy"
	}
	note := "fired - due, as the agent records it; goal p99 ≤ 100 ms"
	if len(failed) > 0 {
		note += fmt.Sprintf("; %d of %d samples failed: %s", len(failed), n, failed[0])
	}
	for _, row := range []struct {
		what string
		ds   []time.Duration
	}{{"reminder", rems}, {"job", jobs}} {
		f := summarize(fmt.Sprintf("%s lateness, %s", row.what, where), row.ds)
		f.Note = note
		r.add(f)
	}
	return nil
}

// lateOnce is one sample: a new user sets a reminder and a job due
// latenessAhead from now, its sandbox goes down to tier (for "hung": its
// agent is stopped, then the sandbox paused, and the manager finds out),
// and once the manager has woken it the lateness of both is read back.
func (r *runner) lateOnce(ctx context.Context, tier string) (rem, job time.Duration, err error) {
	u, err := r.newUser("late-" + tier)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _, _ = r.admin("reset", u) }() // its job would wake it every latenessAhead
	if _, err := r.send(ctx, u, "POST", "/rules", `{"tool":"set_reminder","effect":"allow","confirm_unconditional":true}`); err != nil {
		return 0, 0, err
	}
	ahead := fmt.Sprintf("%ds", int(latenessAhead.Seconds()))
	due := time.Now().Add(latenessAhead) // a little early: both are set from the answers' time on
	if _, err := r.send(ctx, u, "POST", "/prompt", `{"text":"remind in `+ahead+`: bench"}`); err != nil {
		return 0, 0, err
	}
	body, err := r.send(ctx, u, "POST", "/jobs", `{"cron":"@every `+ahead+`","prompt":"bench tick"}`)
	if err != nil {
		return 0, 0, err
	}
	var created struct {
		Conversation int64 `json:"conversation_id"`
	}
	if err := json.Unmarshal(body, &created); err != nil {
		return 0, 0, fmt.Errorf("POST /jobs answered %s: %w", body, err)
	}
	// The manager must know the agent's due time before a hung agent
	// goes down: it is all the manager has of it then.
	if err := r.waitSandbox(ctx, u, 10*time.Second, func(s listed) bool { return s.ReportedWakeAt != nil }); err != nil {
		return 0, 0, err
	}
	to := tier
	if tier == "hung" {
		to = "paused"
		n := r.sandboxName(u)
		if out, err := exec.Command("docker", "kill", "-s", "STOP", provision.ContainerName(n)).CombinedOutput(); err != nil {
			return 0, 0, fmt.Errorf("stop the agent: %v: %s", err, out)
		}
	}
	if _, err := r.admin("evict", u, "--to", to); err != nil {
		return 0, 0, err
	}
	// Nothing touches the sandbox until the manager has woken it: a
	// request would bring it up itself.
	// (Started: running per the engine, its agent not yet seen by this
	// manager since an engine event, which the wake's own start can be.)
	up := func(s listed) bool { return s.State == "running" || s.State == "started" }
	if err := r.waitSandbox(ctx, u, latenessAhead+time.Minute, up); err != nil {
		return 0, 0, err
	}
	// Read only once both are due, so the reads do not compete with the
	// agent for the machine while it fires them.
	if err := pause(ctx, time.Until(due.Add(time.Second))); err != nil {
		return 0, 0, err
	}
	deadline := time.Now().Add(time.Minute)
	for rem == 0 || job == 0 {
		if rem == 0 {
			rem, err = r.firstLate(ctx, u, "/inspect?limit=1000", "reminder")
		}
		if err == nil && job == 0 {
			job, err = r.firstLate(ctx, u, fmt.Sprintf("/inspect?limit=1000&conversation=%d", created.Conversation), "job_run")
		}
		if err != nil {
			return 0, 0, err
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("%s woken, but its reminder or job did not fire within a minute", u)
		}
		if rem == 0 || job == 0 {
			if err := pause(ctx, 250*time.Millisecond); err != nil {
				return 0, 0, err
			}
		}
	}
	return rem, job, nil
}

// send sends method path with a JSON body through Caddy as user and
// returns the answer's body; a status other than 2xx is an error.
func (r *runner) send(ctx context.Context, user, method, path, body string) ([]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, method, r.cfg.URL+"/u/"+user+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+r.token(user))
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("%s /u/%s%s: %d %s", method, user, path, resp.StatusCode, out)
	}
	return out, nil
}

// firstLate returns the lateness recorded in the first entry of kind
// that path lists (0 when there is none yet). An entry that fired early
// (it never does) counts as 1 µs late, so it still counts as fired.
func (r *runner) firstLate(ctx context.Context, user, path, kind string) (time.Duration, error) {
	body, err := r.send(ctx, user, "GET", path, "")
	if err != nil {
		return 0, err
	}
	var in struct {
		Entries struct {
			Items []struct {
				Kind string
				Data json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return 0, fmt.Errorf("GET %s: %w", path, err)
	}
	for _, e := range in.Entries.Items {
		if e.Kind != kind {
			continue
		}
		var d struct {
			Due   time.Time `json:"due"`
			Fired time.Time `json:"fired"`
		}
		if err := json.Unmarshal(e.Data, &d); err != nil || d.Due.IsZero() || d.Fired.IsZero() {
			return 0, fmt.Errorf("a %s entry without due and fired times: %s", kind, e.Data)
		}
		return max(d.Fired.Sub(d.Due), time.Microsecond), nil
	}
	return 0, nil
}

// listed is one sandbox as `affido admin sandboxes --json` lists it.
type listed = lifecycle.Sandbox

// listing is the manager's list of sandboxes, read at most every
// listEvery however many samples wait on it: each read is a docker exec,
// and on a busy machine the bench's own polling must not be the load.
type listing struct {
	mu   sync.Mutex
	at   time.Time
	list []listed
	err  error
}

const listEvery = 250 * time.Millisecond

// sandboxes returns the list, read after since.
func (r *runner) sandboxes(since time.Time) ([]listed, error) {
	l := &r.listing
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at.After(since) && time.Since(l.at) < listEvery {
		return l.list, l.err
	}
	l.list, l.err = nil, nil
	out, err := exec.Command("docker", "exec", r.manager(), "/bin/affido", "admin", "sandboxes", "--json").Output()
	if err != nil {
		l.err = fmt.Errorf("list sandboxes: %w", err)
	} else {
		l.err = json.Unmarshal(out, &l.list)
	}
	l.at = time.Now()
	return l.list, l.err
}

// waitSandbox polls the manager's list of sandboxes (no request reaches
// the sandbox), read from now on, until user's satisfies ok.
func (r *runner) waitSandbox(ctx context.Context, user string, within time.Duration, ok func(listed) bool) error {
	since := time.Now()
	deadline := since.Add(within)
	last := "not listed"
	for {
		list, err := r.sandboxes(since)
		if err != nil {
			return err
		}
		for _, s := range list {
			if s.User == user {
				if ok(s) {
					return nil
				}
				last = string(s.State)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s's sandbox: still %s after %v", user, last, within)
		}
		if err := pause(ctx, listEvery); err != nil {
			return err
		}
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
