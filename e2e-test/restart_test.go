//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// outcome is one request's end: what it was and what it got.
type outcome struct {
	what string
	code int
	body string
	err  error
}

// sendAs makes one request with user's token without failing the test, so
// that it can run in its own goroutine.
func sendAs(method, user, tok, path, body string) (int, string, error) {
	req, err := http.NewRequest(method, baseURL+"/u/"+user+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	return resp.StatusCode, readAll(resp), nil
}

// Requests survive a manager restart, by SIGTERM (it drains) and by
// SIGKILL (it does not): 20 requests through Caddy, each answered 200 and
// none 502. They are 5 prompts whose model calls are inside the manager
// when the signal comes (past forward_auth, through the gateway), requests
// sent just before the signal and while the manager stops, and requests
// sent while no manager runs, one of them a user's very first (its sandbox
// is made by the manager that comes back). With SIGTERM, a new user's first
// request is also in flight: the drain lets it finish, or hands it to the
// next manager.
func TestManagerRestartKeepsRequests(t *testing.T) {
	for _, sig := range []string{"TERM", "KILL"} {
		t.Run("SIG"+sig, func(t *testing.T) { restartUnderLoad(t, sig) })
	}
}

func restartUnderLoad(t *testing.T, sig string) {
	type who struct{ user, tok string }
	prefix := "rst" + strings.ToLower(sig)
	var users []who
	for range 5 {
		u, tok := newUser(t, prefix)
		mustGet(t, u, tok, "/health")
		users = append(users, who{u, tok})
	}
	// Users whose first request comes around the restart: their tokens are
	// made now, while the admin command can run.
	var fresh []who
	for range 2 {
		u, tok := newUser(t, prefix+"new")
		fresh = append(fresh, who{u, tok})
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := dockerTry("logs", "--tail", "60", managerName())
			t.Logf("manager logs:\n%s", out)
		}
	})

	// Bring the five sandboxes up together, just before the prompts: the
	// test stack's tiers stop a sandbox within seconds, and five prompts
	// that each first waited for a stopped sandbox's start were not all
	// inside the manager during one 5 s model call on a loaded machine.
	var up sync.WaitGroup
	codes := make([]int, len(users))
	for i, u := range users {
		up.Go(func() { codes[i], _, _ = sendAs("GET", u.user, u.tok, "/inspect?limit=1", "") }) // activating
	}
	up.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("bringing %s's sandbox up: %d", users[i].user, c)
		}
	}

	const total = 20
	results := make(chan outcome, total)
	launched := 0
	launch := func(what, method string, u who, path, body string) {
		launched++
		go func() {
			code, b, err := sendAs(method, u.user, u.tok, path, body)
			results <- outcome{what + " " + u.user + path, code, b, err}
		}()
	}

	// The model calls: each reserves its worst case in the spend ledger
	// before it reaches the (slow) model, and settles after, so five
	// unsettled rows say all five are inside the manager.
	for i, u := range users {
		launch("prompt", "POST", u, "/prompt", fmt.Sprintf(`{"text":"slow 5000: %s %d"}`, sig, i))
	}
	var names []string
	for _, u := range users {
		names = append(names, "'"+u.user+"'")
	}
	waitUntil(t, 30*time.Second, "5 model calls in flight at the manager", func() bool {
		return psql(t, "SELECT count(*) FROM spend WHERE NOT settled AND user_id IN ("+strings.Join(names, ",")+")") == "5"
	})
	drainedBefore := strings.Count(mustLogs(t), `"msg":"drained"`)
	pid := strings.TrimSpace(docker(t, "inspect", "-f", "{{.State.Pid}}", managerName()))

	if sig == "TERM" {
		launch("first request", "GET", fresh[0], "/status", "")
	} else {
		launch("just before", "GET", users[0], "/status", "")
	}
	docker(t, "kill", "-s", sig, managerName())
	for _, u := range users {
		launch("while it stops", "GET", u, "/status", "")
	}
	waitUntil(t, 30*time.Second, "the manager stopped", func() bool {
		out, _ := dockerTry("inspect", "-f", "{{.State.Running}} {{.State.Pid}}", managerName())
		f := strings.Fields(out)
		return len(f) == 2 && (f[0] == "false" || f[1] != pid) // or Docker started it again already
	})
	launch("while down, first request", "GET", fresh[1], "/status", "")
	for i := 0; launched < total; i++ {
		launch("while down", "GET", users[i%len(users)], "/status", "")
	}
	docker(t, "start", managerName())

	deadline := time.After(90 * time.Second)
	for range total {
		select {
		case o := <-results:
			switch {
			case o.err != nil:
				t.Errorf("%s: %v", o.what, o.err)
			case o.code != 200:
				t.Errorf("%s: %d %s", o.what, o.code, o.body)
			case strings.HasPrefix(o.what, "prompt") && !strings.Contains(o.body, "echo: slow 5000: "+sig):
				t.Errorf("%s: no reply in %s", o.what, o.body)
			}
		case <-deadline:
			t.Fatal("requests still unanswered 90 s after the restart began")
		}
	}
	waitManagerHealthy(t)
	drained := strings.Count(mustLogs(t), `"msg":"drained"`) - drainedBefore
	if want := map[string]int{"TERM": 1, "KILL": 0}[sig]; drained != want {
		t.Errorf("the manager logged %d drains on SIG%s, want %d", drained, sig, want)
	}
}

// mustLogs returns every log line of the manager container, across its
// restarts.
func mustLogs(t *testing.T) string {
	t.Helper()
	return docker(t, "logs", managerName())
}
