//go:build e2e

// Package e2e drives a real Affido stack (Caddy, manager, Postgres, Docker)
// started by e2e-test/run.sh, through Caddy's published port, the way a
// user and an attacker would.
package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	baseURL = env("AFFIDO_E2E_URL", "http://127.0.0.1:18091")
	stack   = env("AFFIDO_STACK", "affidotest")
)

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func managerName() string { return stack + "-manager" }
func oltpName() string    { return stack + "-oltp" }
func caddyName() string   { return stack + "-caddy" }

// newUser returns a fresh user id and an API token for it.
func newUser(t *testing.T, prefix string) (string, string) {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	user := prefix + "-" + hex.EncodeToString(b)
	reportOnFailure(t, user)
	return user, token(t, user)
}

func token(t *testing.T, user string) string {
	t.Helper()
	return strings.TrimSpace(docker(t, "exec", managerName(), "/bin/affido", "admin", "token", user))
}

// docker runs the docker CLI and fails the test on error.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := dockerTry(args...)
	if err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func dockerTry(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return string(out), err
}

type response struct {
	Code   int
	Header http.Header
	Body   string
}

var client = &http.Client{Timeout: 60 * time.Second}

func request(t *testing.T, method, path string, hdr map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, baseURL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

func bearer(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }

// get requests /u/<user><path> with user's token and expects 200.
func mustGet(t *testing.T, user, tok, path string) response {
	t.Helper()
	r := request(t, "GET", "/u/"+user+path, bearer(tok))
	if r.Code != 200 {
		t.Fatalf("GET /u/%s%s: %d %s", user, path, r.Code, r.Body)
	}
	return r
}

// inspect returns docker inspect of one object as a generic map.
func inspect(t *testing.T, kind, name string) map[string]any {
	t.Helper()
	var out []map[string]any
	if err := json.Unmarshal([]byte(docker(t, kind, "inspect", name)), &out); err != nil || len(out) != 1 {
		t.Fatalf("inspect %s %s: %v", kind, name, err)
	}
	return out[0]
}

func containerStatus(user string) string {
	out, err := dockerTry("inspect", "-f", "{{.State.Status}}", stack+"-"+user+"-agent")
	if err != nil {
		return "missing"
	}
	return strings.TrimSpace(out)
}

func containerID(t *testing.T, user string) string {
	return strings.TrimSpace(docker(t, "inspect", "-f", "{{.Id}}", stack+"-"+user+"-agent"))
}

// waitStatus polls the container's Docker status until it is want.
func waitStatus(t *testing.T, user, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if containerStatus(user) == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("container of %s: status %q after %v, want %q", user, containerStatus(user), within, want)
}

// objects counts the labelled containers, networks and volumes of user's
// sandbox made for them (labelled with the user).
func objects(t *testing.T, user string) (containers, networks, volumes int) {
	t.Helper()
	return objectsLabelled(t, "affido.user="+user)
}

// objectsLabelled counts the stack's containers, networks and volumes that
// carry label (k=v).
func objectsLabelled(t *testing.T, label string) (containers, networks, volumes int) {
	t.Helper()
	count := func(args ...string) int {
		out := strings.TrimSpace(docker(t, append(args, "--filter", "label="+label, "--filter", "label=affido.stack="+stack)...))
		if out == "" {
			return 0
		}
		return len(strings.Split(out, "\n"))
	}
	return count("ps", "-aq"), count("network", "ls", "-q"), count("volume", "ls", "-q")
}

// mustRunAlone fails a test that run.sh started while another stack's tests
// run beside it (AFFIDO_E2E_SHARED): such a test belongs in run.sh's ALONE
// list, which runs after the second stack is gone.
func mustRunAlone(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("AFFIDO_E2E_SHARED") != "" {
		t.Fatalf("this test must run with no other stack's tests beside it (%s): add it to ALONE in e2e-test/run.sh", why)
	}
}

func statusUser(t *testing.T, r response) string {
	t.Helper()
	var s struct{ User string }
	if err := json.Unmarshal([]byte(r.Body), &s); err != nil {
		t.Fatalf("decode /status %q: %v", r.Body, err)
	}
	return s.User
}

func waitManagerHealthy(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := dockerTry("exec", managerName(), "/bin/affido", "manager", "healthcheck"); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatal("manager did not become healthy")
}

func ipOn(t *testing.T, container, network string) string {
	return strings.TrimSpace(docker(t, "inspect", "-f", fmt.Sprintf(`{{(index .NetworkSettings.Networks %q).IPAddress}}`, network), container))
}

// inAgent runs a command in user's agent container with docker exec, as
// the tools' user: what the model's shell could do. The test stack pauses an
// idle sandbox after 3 s and stops it after 8 s, and exec into a sandbox
// that is not running fails for that reason alone, so inAgent wakes it with
// a passive request (GET /health unpauses or starts it without opening
// storage) and tries again while Docker does not report it running. An
// error is returned only from an exec into a running container.
func inAgent(t *testing.T, user, tok string, args ...string) (string, error) {
	t.Helper()
	return inAgentAs(t, user, tok, "tools", args...)
}

// inAgentAs is inAgent as another user of the image: "agent" plays someone
// who can change the agent's own files (a disk-level tamper).
func inAgentAs(t *testing.T, user, tok, as string, args ...string) (string, error) {
	t.Helper()
	name := stack + "-" + user + "-agent"
	deadline := time.Now().Add(60 * time.Second)
	for {
		if containerStatus(user) != "running" {
			request(t, "GET", "/u/"+user+"/health", bearer(tok))
		}
		// An exec is no request: the idle tier (3 s here) would pause the
		// container under it and freeze the exec with it, which can wedge the
		// engine's operations on that container (seen on fuse-overlayfs with
		// cgroup v1). So activating requests keep the sandbox up while the
		// exec runs; one that does not end in 20 s is given up and tried again.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		awake := make(chan struct{})
		go func() {
			defer close(awake)
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", baseURL+"/u/"+user+"/files", nil) // activating, opens no storage
				req.Header.Set("Authorization", "Bearer "+tok)
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
		b, err := exec.CommandContext(ctx, "docker", append([]string{"exec", "-u", as, name}, args...)...).CombinedOutput()
		frozen := ctx.Err() != nil
		cancel()
		<-awake
		out := string(b)
		// Paused between the status check and the exec (Docker refuses an
		// exec into a paused container; the requests above resume it), or
		// removed and made again meanwhile (the exec named the old one): again.
		paused := err != nil && strings.Contains(out, "is paused")
		replaced := err != nil && strings.Contains(out, "No such container")
		if !frozen && !paused && !replaced && (err == nil || containerStatus(user) == "running") || time.Now().After(deadline) {
			return out, err
		}
	}
}

// mustInAgent is inAgent that fails the test on error.
func mustInAgent(t *testing.T, user, tok string, args ...string) string {
	t.Helper()
	return mustInAgentAs(t, user, tok, "tools", args...)
}

// mustInAgentAs is inAgentAs that fails the test on error.
func mustInAgentAs(t *testing.T, user, tok, as string, args ...string) string {
	t.Helper()
	out, err := inAgentAs(t, user, tok, as, args...)
	if err != nil {
		t.Fatalf("docker exec %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// keepAwake makes an activating request (GET /session opens storage) every
// 250 ms until the test ends, so the test stack's 3 s idle tier cannot pause
// the sandbox under a test that needs it running throughout. It returns once
// Docker reports the container running.
func keepAwake(t *testing.T, user, tok string) {
	t.Helper()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			req, _ := http.NewRequest("GET", baseURL+"/u/"+user+"/session", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	waitStatus(t, user, "running", 60*time.Second)
}

// reportOnFailure registers a cleanup that, when the test failed, prints
// what is needed to see why without rerunning: the sandbox's Docker state
// and registry row, the manager's log lines about the user, and the tail of
// the agent's own log.
func reportOnFailure(t *testing.T, user string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var b strings.Builder
		fmt.Fprintf(&b, "---- diagnostics for %s\n", user)
		fmt.Fprintf(&b, "container: %s\n", containerStatus(user))
		row, _ := dockerTry("exec", oltpName(), "psql", "-U", "affido", "-d", "affido", "-tAc",
			"SELECT row_to_json(s) FROM sandboxes s WHERE user_id = '"+user+"'")
		fmt.Fprintf(&b, "registry: %s\n", strings.TrimSpace(row))
		events, _ := dockerTry("exec", oltpName(), "psql", "-U", "affido", "-d", "affido", "-tAc",
			"SELECT at || ' ' || kind || ' ' || coalesce(detail::text, '') FROM audit_events WHERE user_id = '"+user+"' ORDER BY id DESC LIMIT 20")
		fmt.Fprintf(&b, "audit events (newest first):\n%s\n", strings.TrimSpace(events))
		mlog, _ := dockerTry("logs", managerName())
		fmt.Fprintf(&b, "manager log lines about %s (last 40):\n%s\n", user, tailMatching(mlog, user, 40))
		alog, _ := dockerTry("logs", "--tail", "40", stack+"-"+user+"-agent")
		fmt.Fprintf(&b, "agent log (last 40 lines):\n%s", alog)
		t.Log(b.String())
	})
}

// tailMatching returns the last n lines of s that contain sub.
func tailMatching(s, sub string, n int) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			keep = append(keep, l)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	return strings.Join(keep, "\n")
}

// psql runs one query in the stack's Postgres and returns its unaligned output.
func psql(t *testing.T, query string) string {
	t.Helper()
	return strings.TrimSpace(docker(t, "exec", oltpName(), "psql", "-U", "affido", "-d", "affido", "-tAc", query))
}

// sandboxGateway returns user's sandbox token (read from the agent's
// identity file as the agent's own uid, as only the test can) and the
// gateway's base URL as the sandbox sees it.
func sandboxGateway(t *testing.T, user string) (token, base string) {
	t.Helper()
	name := sandboxName(t, user)
	var id struct{ Token string }
	if err := json.Unmarshal([]byte(docker(t, "exec", "-u", "10001", stack+"-"+name+"-agent", "cat", "/data/identity.json")), &id); err != nil || id.Token == "" {
		t.Fatalf("identity of %s: %v", user, err)
	}
	return id.Token, "http://" + ipOn(t, caddyName(), stack+"-"+name+"-net") + ":8088/v1/gateway/"
}

// sandboxName is what user's sandbox objects are named after, as the
// registry records it: the user id, or a pool name for a sandbox claimed
// from the warm pool.
func sandboxName(t *testing.T, user string) string {
	t.Helper()
	return psql(t, "SELECT name FROM sandboxes WHERE user_id = '"+user+"'")
}

// objectsOf counts the stack's objects labelled for sandbox name.
func objectsOf(t *testing.T, name string) (containers, networks, volumes int) {
	t.Helper()
	return objectsLabelled(t, "affido.sandbox="+name)
}

// granted remembers the rules grant added, so each is added once.
var granted sync.Map

// grant adds the owner's rules that let user's agent call tools without
// asking (every tool that is not read-only asks by default), on every call:
// the tests mean it, so they confirm it (shell, write_file and fetch_url
// need confirm_unconditional). It provisions the sandbox if it is not up yet.
func grant(t *testing.T, user, tok string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, done := granted.LoadOrStore(user+"/"+tool, true); done {
			continue
		}
		if r := post(t, user, tok, "/rules", `{"tool":"`+tool+`","effect":"allow","confirm_unconditional":true}`); r.Code != 201 {
			granted.Delete(user + "/" + tool)
			t.Fatalf("allow %s for %s: %d %s", tool, user, r.Code, r.Body)
		}
	}
}
