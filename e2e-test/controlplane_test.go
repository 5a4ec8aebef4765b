//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestColdProvisionThenReuse(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "cold")
	if c, n, v := objects(t, user); c+n+v != 0 {
		t.Fatalf("before the first request: %d containers, %d networks, %d volumes", c, n, v)
	}
	r := mustGet(t, user, tok, "/health")
	if strings.Contains(strings.ToLower(fmt.Sprint(r.Header)), "x-sandbox-endpoint") {
		t.Fatalf("endpoint leaked to the client: %v", r.Header)
	}
	if c, n, v := objects(t, user); c != 1 || n != 1 || v != 2 {
		t.Fatalf("after provisioning: %d containers, %d networks, %d volumes; want 1, 1, 2", c, n, v)
	}
	id := containerID(t, user)
	if got := statusUser(t, mustGet(t, user, tok, "/status")); got != user {
		t.Fatalf("/status answered for %q", got)
	}
	if again := containerID(t, user); again != id {
		t.Fatalf("second request made a new container: %s then %s", id, again)
	}

	// The container is hardened as ARCHITECTURE.md section 2 says.
	ins := inspect(t, "container", stack+"-"+user+"-agent")
	hc := ins["HostConfig"].(map[string]any)
	cfg := ins["Config"].(map[string]any)
	checks := map[string]bool{
		"read-only root":       hc["ReadonlyRootfs"] == true,
		"cap-drop ALL":         fmt.Sprint(hc["CapDrop"]) == "[ALL]",
		"no-new-privileges":    strings.Contains(fmt.Sprint(hc["SecurityOpt"]), "no-new-privileges"),
		"pids limit":           hc["PidsLimit"] != nil && hc["PidsLimit"].(float64) > 0,
		"memory limit":         hc["Memory"].(float64) > 0,
		"cpu limit":            hc["NanoCpus"].(float64) > 0,
		"root only to start":   cfg["User"] == "0:0",
		"only SETUID, SETGID":  onlySetuidSetgid(hc["CapAdd"]),
		"tmpfs /tmp":           strings.Contains(fmt.Sprint(hc["Tmpfs"]), "/tmp"),
		"no docker socket":     !strings.Contains(fmt.Sprint(ins["Mounts"]), "docker.sock"),
		"session volume /data": strings.Contains(fmt.Sprint(ins["Mounts"]), stack+"-"+user+"-session"),
		"env SESSION_DB":       strings.Contains(fmt.Sprint(cfg["Env"]), "SESSION_DB=/data/session.db"),
	}
	for what, ok := range checks {
		if !ok {
			t.Errorf("container is not hardened: %s", what)
		}
	}
	net := inspect(t, "network", stack+"-"+user+"-net")
	if net["Internal"] != true {
		t.Errorf("user network is not internal")
	}
	if _, err := inAgent(t, user, tok, "ls", "/var/run/docker.sock"); err == nil {
		t.Errorf("the Docker socket exists inside the sandbox")
	}
	if out, err := inAgent(t, user, tok, "sh", "-c", "echo x > /evil"); err == nil {
		t.Errorf("writing to / worked: %s", out)
	}
}

func TestCredentials(t *testing.T) {
	t.Parallel()
	alice, aliceTok := newUser(t, "alice")
	bob, bobTok := newUser(t, "bob")
	mustGet(t, alice, aliceTok, "/health")

	tests := []struct {
		name string
		path string
		hdr  map[string]string
		want int
	}{
		{"no credentials", "/u/" + alice + "/health", nil, 401},
		{"unknown bearer", "/u/" + alice + "/health", bearer("not-a-token"), 401},
		{"unknown session cookie", "/u/" + alice + "/health", map[string]string{"Cookie": "better-auth.session_token=nope"}, 401},
		{"another user's token", "/u/" + bob + "/health", bearer(aliceTok), 403},
		{"dot-dot into another user", "/u/" + alice + "/../" + bob + "/health", bearer(aliceTok), 403},
		{"encoded dots", "/u/%2e%2e/health", bearer(aliceTok), 404},
		{"bad characters", "/u/a.b/health", bearer(aliceTok), 404},
		{"65 characters", "/u/" + strings.Repeat("x", 65) + "/health", bearer(aliceTok), 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := request(t, "GET", tt.path, tt.hdr)
			if r.Code != tt.want {
				t.Fatalf("got %d %s, want %d", r.Code, r.Body, tt.want)
			}
			if r.Header.Get("X-Sandbox-Endpoint") != "" {
				t.Fatalf("error response carries an endpoint")
			}
		})
	}
	if c, n, v := objects(t, bob); c+n+v != 0 {
		t.Fatalf("refused requests touched bob's sandbox: %d containers, %d networks, %d volumes", c, n, v)
	}
	mustGet(t, bob, bobTok, "/health")
}

func TestSessionCookie(t *testing.T) {
	t.Parallel()
	user, _ := newUser(t, "cookie")
	docker(t, "exec", managerName(), "/bin/affido", "admin", "session", user, "tok-"+user)
	r := request(t, "GET", "/u/"+user+"/status", map[string]string{"Cookie": "better-auth.session_token=tok-" + user})
	if r.Code != 200 || statusUser(t, r) != user {
		t.Fatalf("session cookie: %d %s", r.Code, r.Body)
	}
	// An expired session is refused.
	docker(t, "exec", oltpName(), "psql", "-U", "affido", "-d", "affido", "-c",
		"UPDATE session SET expires_at = now() - interval '1 second' WHERE token_hash = sha256(convert_to('tok-"+user+"', 'UTF8'))")
	// This manager's credential cache may serve it for at most
	// AFFIDO_AUTH_CACHE_TTL (1 s) more: expiring it in SQL revokes nothing in
	// the manager.
	waitUntil(t, 10*time.Second, "the expired session refused", func() bool {
		return request(t, "GET", "/u/"+user+"/status", map[string]string{"Cookie": "better-auth.session_token=tok-" + user}).Code == 401
	})
}

func TestForgedEndpointHeaderIsIgnored(t *testing.T) {
	t.Parallel()
	alice, aliceTok := newUser(t, "fa")
	bob, bobTok := newUser(t, "fb")
	mustGet(t, alice, aliceTok, "/health")
	mustGet(t, bob, bobTok, "/health")
	bobIP := ipOn(t, stack+"-"+bob+"-agent", stack+"-"+bob+"-net")
	managerIP := ipOn(t, managerName(), stack+"_control")
	for _, forged := range []string{bobIP + ":8080", "unix//var/run/docker.sock", managerIP + ":9090", "sandbox-manager:9090", "127.0.0.1:2019", "localhost:8080"} {
		for _, path := range []string{"/status", "/health"} {
			h := bearer(aliceTok)
			h["X-Sandbox-Endpoint"] = forged
			r := request(t, "GET", "/u/"+alice+path, h)
			if r.Code != 200 {
				t.Fatalf("forged %q on %s: %d %s", forged, path, r.Code, r.Body)
			}
			if path == "/status" && statusUser(t, r) != alice {
				t.Fatalf("forged %q: answered by %s", forged, statusUser(t, r))
			}
		}
		// Forged header with no credentials or on the manager's own routes.
		for _, path := range []string{"/u/" + alice + "/status", "/app/", "/api/x"} {
			r := request(t, "GET", path, map[string]string{"X-Sandbox-Endpoint": forged})
			if strings.Contains(r.Body, alice) {
				t.Fatalf("forged %q without credentials on %s reached the sandbox: %d %s", forged, path, r.Code, r.Body)
			}
		}
	}
}

func TestConcurrentFirstRequestsProvisionOnce(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "burst")
	const n = 50
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = request(t, "GET", "/u/"+user+"/health", bearer(tok)).Code
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("request %d: %d", i, c)
		}
	}
	if c, nw, v := objects(t, user); c != 1 || nw != 1 || v != 2 {
		t.Fatalf("%d containers, %d networks, %d volumes; want 1, 1, 2", c, nw, v)
	}
}

// The e2e stack runs with idle tiers of seconds (see run.sh).
func TestIdleTiers(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "tiers")
	mustGet(t, user, tok, "/status")
	mustInAgent(t, user, tok, "sh", "-c", "echo kept > /workspace/note.txt")

	// /session counts as activity, so the sandbox it wakes stays running
	// for the 3 s idle period (a passive /status could be paused again at once).
	t.Run("paused, then a request unpauses and answers", func(t *testing.T) {
		waitStatus(t, user, "paused", 20*time.Second)
		if got := statusUser(t, mustGet(t, user, tok, "/status")); got != user {
			t.Fatalf("answered by %q", got)
		}
		waitStatus(t, user, "paused", 20*time.Second)
		mustGet(t, user, tok, "/session")
		if s := containerStatus(user); s != "running" {
			t.Fatalf("after the request: %s", s)
		}
	})
	t.Run("stopped, then a request starts it", func(t *testing.T) {
		waitStatus(t, user, "exited", 30*time.Second)
		mustGet(t, user, tok, "/session")
		if s := containerStatus(user); s != "running" {
			t.Fatalf("after the request: %s", s)
		}
	})
	t.Run("removed, then a request recreates it with the same volumes", func(t *testing.T) {
		before := containerID(t, user)
		waitStatus(t, user, "missing", 40*time.Second)
		if _, _, v := objects(t, user); v != 2 {
			t.Fatalf("volumes after removal: %d, want 2", v)
		}
		mustGet(t, user, tok, "/status")
		if after := containerID(t, user); after == before {
			t.Fatal("container was not recreated")
		}
		out := mustInAgent(t, user, tok, "cat", "/workspace/note.txt")
		if strings.TrimSpace(out) != "kept" {
			t.Fatalf("workspace file after recreation: %q", out)
		}
	})
}

func TestHealthPollingDoesNotKeepSandboxAwake(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "poll")
	mustGet(t, user, tok, "/status") // activity
	paused := false
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) && !paused {
		mustGet(t, user, tok, "/health")
		for range 10 {
			if containerStatus(user) == "paused" {
				paused = true
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !paused {
		t.Fatal("polling /health every second kept the sandbox from pausing")
	}
	// And an activating request does keep it awake for the idle period.
	mustGet(t, user, tok, "/session")
	if s := containerStatus(user); s != "running" {
		t.Fatalf("after an activating request: %s", s)
	}
}

func TestManagerKilledMidProvision(t *testing.T) {
	for i, delay := range []time.Duration{30 * time.Millisecond, 120 * time.Millisecond, time.Duration(rand.IntN(250)) * time.Millisecond} {
		t.Run(fmt.Sprintf("kill after %v", delay), func(t *testing.T) {
			user, tok := newUser(t, fmt.Sprintf("kill%d", i))
			if r := killManagerDuringFirstRequest(t, user, tok, delay); statusUser(t, r) != user {
				t.Fatalf("after restart: %d %s", r.Code, r.Body)
			}
			if c, n, v := objects(t, user); c != 1 || n != 1 || v != 2 {
				t.Fatalf("%d containers, %d networks, %d volumes; want 1, 1, 2", c, n, v)
			}
		})
	}
}

// killManagerDuringFirstRequest sends user's first request, SIGKILLs the
// manager delay later, starts it again and returns the first 200 after.
func killManagerDuringFirstRequest(t *testing.T, user, tok string, delay time.Duration) response {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequest("GET", baseURL+"/u/"+user+"/status", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		if r, err := client.Do(req); err == nil {
			r.Body.Close()
		}
	}()
	time.Sleep(delay) // the kill point under test, not a wait for anything
	killManager(t)
	// Started again at once: Caddy keeps trying the manager for the request
	// in flight (30 s), which it would otherwise wait out.
	docker(t, "start", managerName())
	waitManagerHealthy(t)
	<-done
	var r response
	// Caddy may still hold a dead connection for a moment.
	waitUntil(t, 30*time.Second, "a 200 after the restart", func() bool {
		r = request(t, "GET", "/u/"+user+"/status", bearer(tok))
		return r.Code == 200
	})
	return r
}

func TestPostgresDown(t *testing.T) {
	user, tok := newUser(t, "pgdown")
	mustGet(t, user, tok, "/health")
	other, otherTok := newUser(t, "pgdown2")
	docker(t, "pause", oltpName())
	defer dockerTry("unpause", oltpName())

	// user's token was used a moment ago: the manager's credential cache
	// may serve its running sandbox for at most AFFIDO_AUTH_CACHE_TTL (1 s);
	// then it is asked of Postgres like other's, never seen before.
	waitUntil(t, 10*time.Second, user+"'s cached credentials expired", func() bool {
		return request(t, "GET", "/u/"+user+"/health", bearer(tok)).Code == 503
	})
	for _, u := range []struct{ user, tok string }{{user, tok}, {other, otherTok}} {
		start := time.Now()
		r := request(t, "GET", "/u/"+u.user+"/health", bearer(u.tok))
		took := time.Since(start)
		if r.Code != 503 || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s with Postgres down: %d %v %s", u.user, r.Code, r.Header, r.Body)
		}
		// The manager gives Postgres 2 s; the bound here only proves the
		// answer does not wait for the 30 s provisioning budget.
		t.Logf("%s: 503 after %v", u.user, took.Round(time.Millisecond))
		if took > 15*time.Second {
			t.Errorf("%s: 503 took %v, want well within the 30 s budget", u.user, took)
		}
	}
	if _, err := dockerTry("exec", managerName(), "/bin/affido", "manager", "healthcheck"); err == nil {
		t.Error("/healthz passed with Postgres down")
	}
	docker(t, "unpause", oltpName())
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := request(t, "GET", "/u/"+other+"/status", bearer(otherTok))
		if r.Code == 200 && statusUser(t, r) == other {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery after Postgres came back: %d %s", r.Code, r.Body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	mustGet(t, user, tok, "/health")
}

// From inside a user network (where code in the sandbox runs), only the
// gateway listener answers: not the manager, Postgres, Caddy's admin API or
// user listener, the host, or another user's sandbox.
func TestSandboxNetworkIsolation(t *testing.T) {
	t.Parallel()
	alice, aliceTok := newUser(t, "iso-a")
	bob, bobTok := newUser(t, "iso-b")
	mustGet(t, alice, aliceTok, "/health")
	mustGet(t, bob, bobTok, "/health")
	aliceNet := stack + "-" + alice + "-net"
	control := stack + "_control"
	gw := ipOn(t, caddyName(), aliceNet)
	net := inspect(t, "network", aliceNet)
	bridge := net["IPAM"].(map[string]any)["Config"].([]any)[0].(map[string]any)["Gateway"].(string)
	targets := map[string]bool{
		"gateway:8088":                            true,
		gw + ":8088":                              true,
		gw + ":8080":                              false, // Caddy's user listener
		gw + ":8081":                              false, // Caddy's sandbox control listener
		gw + ":2019":                              false, // Caddy admin
		"gateway:2019":                            false,
		ipOn(t, caddyName(), control) + ":2019":   false,
		ipOn(t, caddyName(), control) + ":8080":   false,
		ipOn(t, managerName(), control) + ":9090": false,
		ipOn(t, managerName(), control) + ":9091": false,
		ipOn(t, stack+"-"+bob+"-agent", stack+"-"+bob+"-net") + ":8080": false,
		bridge + ":18080": false, // the host, through the bridge
		bridge + ":2375":  false, // dockerd over TCP
	}
	args := []string{"run", "--rm", "--network", aliceNet, "affido/probe:test"}
	for addr := range targets {
		args = append(args, addr)
	}
	out := docker(t, args...)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		addr, result, _ := strings.Cut(line, " ")
		open := result == "open"
		if open != targets[addr] {
			t.Errorf("from %s's network, %s: %s (want open=%v)", alice, addr, result, targets[addr])
		}
	}
	// The gateway listener forwards only gateway routes.
	r := request(t, "GET", "/u/"+alice+"/health", bearer(aliceTok))
	if r.Code != 200 {
		t.Fatalf("alice after probing: %d", r.Code)
	}
}

func TestGatewayAuthenticatesSandboxByTokenAndAddress(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "gw")
	keepAwake(t, user, tok) // the docker exec and the probes below need it running
	name := stack + "-" + user + "-agent"
	// The token is in no environment: the manager handed it to the agent
	// over the control path, and the agent keeps it in /data.
	if env := docker(t, "inspect", "-f", "{{range .Config.Env}}{{println .}}{{end}}", name); strings.Contains(env, "AFFIDO_GATEWAY_TOKEN") || strings.Contains(env, user) {
		t.Fatalf("the container's environment names the user or a token:\n%s", env)
	}
	sbToken, _ := sandboxGateway(t, user)
	gw := ipOn(t, caddyName(), stack+"-"+user+"-net")
	url := "http://" + gw + ":8088/v1/gateway/whoami"
	// From the sandbox's own network namespace (its address) with its token: accepted.
	out := docker(t, "run", "--rm", "--network", "container:"+name, "affido/probe:test", "-get", url, sbToken)
	if !strings.HasPrefix(out, "200 ") || !strings.Contains(out, user) {
		t.Fatalf("own token from own address: %s", out)
	}
	// The same token from another address on the same network: refused.
	out = docker(t, "run", "--rm", "--network", stack+"-"+user+"-net", "affido/probe:test", "-get", url, sbToken)
	if !strings.HasPrefix(out, "403 ") {
		t.Fatalf("stolen token from another address: %s", out)
	}
	// No token, or a user's API token: refused.
	out = docker(t, "run", "--rm", "--network", "container:"+name, "affido/probe:test", "-get", url, tok)
	if !strings.HasPrefix(out, "401 ") {
		t.Fatalf("user API token at the gateway: %s", out)
	}
}

// A Docker error answers 503 with Retry-After, and the registry never claims
// a container that does not exist.
func TestDockerErrorIs503(t *testing.T) {
	mustRunAlone(t, "it untags the agent image every stack on this machine uses")
	docker(t, "tag", "affido/agent:dev", "affido/agent:e2e-keep")
	docker(t, "rmi", "affido/agent:dev") // untags only: the image stays under the other name
	restored := false
	restore := func() {
		if !restored {
			restored = true
			docker(t, "tag", "affido/agent:e2e-keep", "affido/agent:dev")
			docker(t, "rmi", "affido/agent:e2e-keep")
		}
	}
	defer restore()
	user, tok := newUser(t, "dockerr")
	r := request(t, "GET", "/u/"+user+"/health", bearer(tok))
	if r.Code != 503 || r.Header.Get("Retry-After") == "" || r.Header.Get("X-Sandbox-Endpoint") != "" {
		t.Fatalf("agent image missing: %d %v %s", r.Code, r.Header, r.Body)
	}
	if c, _, _ := objects(t, user); c != 0 {
		t.Fatalf("%d containers after a failed create", c)
	}
	row := strings.TrimSpace(docker(t, "exec", oltpName(), "psql", "-U", "affido", "-d", "affido", "-tAc",
		"SELECT state || '|' || container_id || '|' || endpoint FROM sandboxes WHERE user_id = '"+user+"'"))
	if row != "provisioning||" {
		t.Fatalf("registry row after a failed create: %q", row)
	}
	restore()
	mustGet(t, user, tok, "/health")
}

// The manager is not root (issue 28): its process runs under its own uid
// with the Docker socket's group, and its admin socket still answers.
func TestManagerIsNotRoot(t *testing.T) {
	t.Parallel()
	pid := strings.TrimSpace(docker(t, "inspect", "-f", "{{.State.Pid}}", managerName()))
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 5 && f[0] == "Uid:" {
			for _, id := range f[1:] {
				if id == "0" {
					t.Fatalf("the manager runs as root: %s", line)
				}
			}
		}
	}
	if out := docker(t, "exec", managerName(), "affido", "admin", "sandboxes"); !strings.Contains(out, "USER") {
		t.Fatalf("affido admin as the manager's user: %q", out)
	}
}

// Postgres is on no network (issue 28: it listened on the control network,
// which the host has an address in, with the compose default password):
// its container has no address anywhere, the server listens on no TCP
// address, and the name oltp resolves nowhere on the control network.
// The password is the one dev.sh made, not the old default.
func TestPostgresIsOnNoNetwork(t *testing.T) {
	t.Parallel()
	var nets map[string]any
	if err := json.Unmarshal([]byte(docker(t, "inspect", "-f", "{{json .NetworkSettings.Networks}}", oltpName())), &nets); err != nil {
		t.Fatal(err)
	}
	for name, n := range nets {
		if ip, _ := n.(map[string]any)["IPAddress"].(string); ip != "" || name != "none" {
			t.Errorf("oltp is on network %s with address %q", name, ip)
		}
	}
	if got := psql(t, "SHOW listen_addresses"); got != "" {
		t.Errorf("listen_addresses = %q, want none", got)
	}
	out := docker(t, "run", "--rm", "--network", stack+"_control", "affido/probe:test", "oltp:5432", oltpName()+":5432")
	if strings.Contains(out, " open") {
		t.Errorf("Postgres answered on the control network: %s", out)
	}
	if pw := strings.TrimSpace(docker(t, "exec", oltpName(), "sh", "-c", "printf %s \"$POSTGRES_PASSWORD\"")); pw == "affido" || len(pw) < 32 {
		t.Errorf("the database password is %d characters (the old default: %v)", len(pw), pw == "affido")
	}
}

// The manager's metrics are read on its admin socket (affido admin
// metrics); on the control network, which the host has an address in,
// :9090/metrics is not found (issue 28: they answered the host).
func TestMetricsAreExported(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "metrics")
	mustGet(t, user, tok, "/health")
	ip := ipOn(t, managerName(), stack+"_control")
	if out := docker(t, "run", "--rm", "--network", stack+"_control", "affido/probe:test", "-get", "http://"+ip+":9090/metrics"); !strings.HasPrefix(out, "404 ") {
		t.Errorf("/metrics on the control network: %.200s", out)
	}
	out := docker(t, "exec", managerName(), "affido", "admin", "metrics")
	// The sandboxes gauge has a line per state a sandbox is in; which state
	// this user's is in by now is the idle tiers' business (3 s here).
	for _, want := range []string{"affido_resolve_seconds_bucket", "affido_provision_seconds_count", "affido_unpause_seconds", `affido_sandboxes{state="`} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A registry written by newer code stops the manager with a message naming
// both versions; nothing is changed.
func TestNewerRegistrySchemaIsRefused(t *testing.T) {
	psql := func(sql string) string {
		return strings.TrimSpace(docker(t, "exec", oltpName(), "psql", "-U", "affido", "-d", "affido", "-tAc", sql))
	}
	known := psql("SELECT max(version) FROM schema_migrations")
	psql("INSERT INTO schema_migrations (version, name) VALUES (99, '0099_from_the_future.sql')")
	defer func() {
		psql("DELETE FROM schema_migrations WHERE version = 99")
		dockerTry("start", managerName())
		waitManagerHealthy(t)
	}()
	docker(t, "restart", managerName())
	waitUntil(t, 30*time.Second, "the manager refuses to start", func() bool {
		out, _ := dockerTry("logs", "--tail", "20", managerName())
		return strings.Contains(out, "version 99") && strings.Contains(out, "("+known+")")
	})
}

// onlySetuidSetgid says whether a container's CapAdd is exactly SETUID and
// SETGID (Docker may spell them CAP_SETUID, CAP_SETGID).
func onlySetuidSetgid(v any) bool {
	caps, _ := v.([]any)
	want := map[string]bool{"SETUID": true, "SETGID": true}
	for _, c := range caps {
		name, _ := c.(string)
		delete(want, strings.TrimPrefix(name, "CAP_"))
	}
	return len(caps) == 2 && len(want) == 0
}
