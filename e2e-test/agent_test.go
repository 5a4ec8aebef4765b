//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

type entry struct {
	ID         int64  `json:"id"`
	Kind       string `json:"kind"`
	Text       string `json:"text"`
	RunID      int64  `json:"run_id"`
	Model      string `json:"model"`
	ToolName   string `json:"tool_name"`
	ToolCallID string `json:"tool_call_id"`
	IsError    bool   `json:"is_error"`
}

type inspection struct {
	EntryCount int64 `json:"entry_count"`
	Entries    struct {
		Items []entry `json:"items"`
	} `json:"entries"`
	Tasks []struct {
		ID    int64  `json:"id"`
		State string `json:"state"`
	} `json:"tasks"`
}

func post(t *testing.T, user, tok, path, body string) response {
	t.Helper()
	req, _ := http.NewRequest("POST", baseURL+"/u/"+user+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, readAll(resp))
	return response{resp.StatusCode, resp.Header, b.String()}
}

func readAll(resp *http.Response) string {
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			return sb.String()
		}
	}
}

type runResult struct {
	RunID   int64   `json:"run_id"`
	Status  string  `json:"status"`
	Reason  string  `json:"reason"`
	Reply   string  `json:"reply"`
	Model   string  `json:"model"`
	Entries []int64 `json:"entries"`
}

func prompt(t *testing.T, user, tok string, body map[string]any) runResult {
	t.Helper()
	b, _ := json.Marshal(body)
	r := post(t, user, tok, "/prompt", string(b))
	if r.Code != 200 && r.Code != 202 {
		t.Fatalf("prompt %v: %d %s", body, r.Code, r.Body)
	}
	var out runResult
	if err := json.Unmarshal([]byte(r.Body), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func inspectOf(t *testing.T, user, tok string) inspection {
	t.Helper()
	var in inspection
	r := mustGet(t, user, tok, "/inspect?limit=1000")
	if err := json.Unmarshal([]byte(r.Body), &in); err != nil {
		t.Fatalf("inspect: %v %s", err, r.Body)
	}
	return in
}

// waitFor polls cond (which may make requests that restart the sandbox).
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v", what, within)
}

func runEntries(in inspection, run int64) []entry {
	var out []entry
	for _, e := range in.Entries.Items {
		if e.RunID == run {
			out = append(out, e)
		}
	}
	return out
}

func TestConversationSurvivesContainerStop(t *testing.T) {
	user, tok := newUser(t, "durable")
	grant(t, user, tok, "write_file")
	first := prompt(t, user, tok, map[string]any{"text": "write notes.txt: remember the milk"})
	if first.Status != "done" || !strings.Contains(first.Reply, "wrote") {
		t.Fatalf("first prompt: %+v", first)
	}
	docker(t, "stop", stack+"-"+user+"-agent")
	second := prompt(t, user, tok, map[string]any{"text": "read notes.txt"})
	if !strings.Contains(second.Reply, "remember the milk") {
		t.Fatalf("second prompt after docker stop: %+v", second)
	}
	in := inspectOf(t, user, tok)
	var kinds []string
	var readResult entry
	for _, e := range in.Entries.Items {
		kinds = append(kinds, e.Kind)
		if e.Kind == "tool_result" && e.ToolName == "read_file" {
			readResult = e
		}
	}
	want := "owner_message,assistant_message,tool_call,tool_result,assistant_message"
	if got := strings.Join(kinds, ","); got != "policy,"+want+","+want { // policy: the grant of write_file
		t.Fatalf("entries after restart: %s", got)
	}
	var verbatim entry
	if err := json.Unmarshal([]byte(mustGet(t, user, tok, fmt.Sprint("/entry?id=", readResult.ID)).Body), &verbatim); err != nil {
		t.Fatal(err)
	}
	if verbatim.Text != "remember the milk" || verbatim.ToolCallID == "" {
		t.Fatalf("/entry of the read result: %+v", verbatim)
	}
}

func TestModelPerPromptIsRecorded(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "models")
	a := prompt(t, user, tok, map[string]any{"text": "one", "model": "fake/echo"})
	b := prompt(t, user, tok, map[string]any{"text": "two", "model": "fake/alt"})
	if a.Model != "fake/echo" || b.Model != "fake/alt" {
		t.Fatalf("models %q %q", a.Model, b.Model)
	}
	var models []string
	for _, e := range inspectOf(t, user, tok).Entries.Items {
		if e.Kind == "assistant_message" {
			models = append(models, e.Model)
		}
	}
	if strings.Join(models, ",") != "fake/echo,fake/alt" {
		t.Fatalf("assistant entries record %v", models)
	}
	if r := post(t, user, tok, "/prompt", `{"text":"x","model":"gpt-nope"}`); r.Code != 400 {
		t.Fatalf("unknown model: %d %s", r.Code, r.Body)
	}
}

// waitIntent waits until the run has committed its tool call intent.
func waitIntent(t *testing.T, user, tok string, run int64) {
	waitUntil(t, 20*time.Second, "tool intent committed", func() bool {
		for _, e := range runEntries(inspectOf(t, user, tok), run) {
			if e.Kind == "tool_call" {
				return true
			}
		}
		return false
	})
}

func waitRunDone(t *testing.T, user, tok string, run int64) []entry {
	var es []entry
	waitUntil(t, 60*time.Second, "run finished after the restart", func() bool {
		r := request(t, "GET", "/u/"+user+"/inspect?limit=1000", bearer(tok))
		if r.Code != 200 {
			return false
		}
		var in inspection
		if json.Unmarshal([]byte(r.Body), &in) != nil {
			return false
		}
		for _, tk := range in.Tasks {
			if tk.ID == run {
				return false
			}
		}
		es = runEntries(in, run)
		return true
	})
	return es
}

func TestAgentKilledDuringUnsafeShell(t *testing.T) {
	user, tok := newUser(t, "killsh")
	grant(t, user, tok, "shell")
	mustGet(t, user, tok, "/health")
	run := prompt(t, user, tok, map[string]any{"text": "run: sleep 5; echo finished-sleeping", "wait": false})
	waitIntent(t, user, tok, run.RunID)
	docker(t, "kill", "-s", "KILL", stack+"-"+user+"-agent")
	es := waitRunDone(t, user, tok, run.RunID)
	var result, reply entry
	for _, e := range es {
		switch e.Kind {
		case "tool_result":
			result = e
		case "assistant_message":
			reply = e
		}
	}
	if !strings.Contains(result.Text, "was interrupted and may have partially run") || !result.IsError {
		t.Fatalf("shell result after the kill: %+v", result)
	}
	if strings.Contains(result.Text, "finished-sleeping") || !strings.Contains(reply.Text, "interrupted") {
		t.Fatalf("the unsafe shell reran or the model was not told: result %q reply %q", result.Text, reply.Text)
	}
}

func TestAgentKilledDuringSafeReadReruns(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "killrd")
	mustGet(t, user, tok, "/health")
	name := stack + "-" + user + "-agent"
	// A FIFO makes read_file block until the test writes into it.
	mustInAgent(t, user, tok, "mkfifo", "/workspace/slow.fifo")
	run := prompt(t, user, tok, map[string]any{"text": "read slow.fifo", "wait": false})
	waitIntent(t, user, tok, run.RunID)
	docker(t, "kill", "-s", "KILL", name)
	mustGet(t, user, tok, "/health") // starts the container; the agent reopens storage and reruns the read
	waitUntil(t, 20*time.Second, "write into the fifo", func() bool {
		_, err := inAgent(t, user, tok, "timeout", "3", "sh", "-c", "echo fed-after-restart > /workspace/slow.fifo")
		return err == nil
	})
	es := waitRunDone(t, user, tok, run.RunID)
	var results []entry
	for _, e := range es {
		if e.Kind == "tool_result" {
			results = append(results, e)
		}
	}
	if len(results) != 1 || strings.TrimSpace(results[0].Text) != "fed-after-restart" || results[0].IsError {
		t.Fatalf("read_file after the kill: %+v", results)
	}
}

func TestFreshSandboxHasNoSessionDatabase(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "fresh")
	mustGet(t, user, tok, "/health")
	mustGet(t, user, tok, "/status")
	r := request(t, "POST", "/u/"+user+"/ingest?name=doc.txt", bearer(tok))
	_ = r
	out := mustInAgentAs(t, user, tok, "agent", "ls", "-a", "/data")
	if strings.Contains(out, "session.db") {
		t.Fatalf("/status and /health created the session database: %s", out)
	}
	prompt(t, user, tok, map[string]any{"text": "now open it"})
	if out := mustInAgentAs(t, user, tok, "agent", "ls", "/data"); !strings.Contains(out, "session.db") {
		t.Fatalf("a prompt did not open the database: %s", out)
	}
}

// From the sandbox's own network namespace nothing outside its user network
// answers; the gateway listener is the only way to a model.
func TestSandboxEgressOnlyToGateway(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "egress")
	keepAwake(t, user, tok) // the probes share the sandbox's network namespace
	name := stack + "-" + user + "-agent"
	gw := ipOn(t, caddyName(), stack+"-"+user+"-net")
	targets := map[string]bool{
		gw + ":8088":       true,
		"10.212.0.10:8080": false, // the dev stack's Caddy
		ipOn(t, managerName(), stack+"_control") + ":9090": false,
	}
	args := []string{"run", "--rm", "--network", "container:" + name, "affido/probe:test"}
	for a := range targets {
		args = append(args, a)
	}
	for _, line := range strings.Split(strings.TrimSpace(docker(t, args...)), "\n") {
		addr, result, _ := strings.Cut(line, " ")
		if (result == "open") != targets[addr] {
			t.Errorf("from the sandbox, %s: %s", addr, result)
		}
	}
	// The host is not reachable either, not even a service listening on
	// 0.0.0.0 behind the user network's bridge address (dev.sh drops it).
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	bridge := strings.TrimSpace(docker(t, "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", stack+"-"+user+"-net"))
	out := docker(t, "run", "--rm", "--network", "container:"+name, "affido/probe:test", fmt.Sprintf("%s:%d", bridge, port))
	if !strings.Contains(out, "closed") {
		t.Errorf("a host service on 0.0.0.0 answers the sandbox: %s", out)
	}
	// And the model answers only through it, with the sandbox's token.
	if r := prompt(t, user, tok, map[string]any{"text": "ping through the gateway"}); r.Reply != "echo: ping through the gateway" {
		t.Fatalf("reply %+v", r)
	}
}

// The agent image cannot install anything: no package manager or download
// tool exists, even as a hidden busybox applet, and / is read-only.
func TestAgentImageHasNoPowers(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "nopowers")
	mustGet(t, user, tok, "/health")
	for _, tool := range []string{"apt", "apt-get", "dpkg", "npm", "npx", "corepack", "pip", "pip3", "apk", "wget", "curl", "nc", "ftpget", "tftp", "telnet", "httpd", "ssh"} {
		out, err := inAgent(t, user, tok, "sh", "-c", "command -v "+tool+" || "+tool+" --help; busybox "+tool+" --help")
		if err == nil || !(strings.Contains(out, "not found")) {
			t.Errorf("%s is available in the sandbox: %s", tool, out)
		}
	}
	if out, err := inAgent(t, user, tok, "sh", "-c", "echo x > /pwned"); err == nil || !strings.Contains(out, "Read-only") {
		t.Errorf("writing to / worked: %v %s", err, out)
	}
	grant(t, user, tok, "shell")
	r := prompt(t, user, tok, map[string]any{"text": "run: apt-get install -y curl; pip install requests; wget http://example.com/x; npm i left-pad"})
	for _, tool := range []string{"apt-get", "pip", "wget", "npm"} {
		if !strings.Contains(r.Reply, tool+": not found") {
			t.Errorf("the model's shell trying %s: %q", tool, r.Reply)
		}
	}
}

// A sandbox whose agent dies with work in flight is started again by the
// manager itself, once, after a backoff, with the event recorded; nobody
// has to send a request for the work to finish.
func TestDiedWithWorkInFlightIsRestarted(t *testing.T) {
	user, tok := newUser(t, "died")
	grant(t, user, tok, "shell")
	run := prompt(t, user, tok, map[string]any{"text": "run: sleep 3; echo slept", "wait": false})
	waitIntent(t, user, tok, run.RunID)
	waitUntil(t, 20*time.Second, "the agent reported work due", func() bool {
		return psql(t, "SELECT reported_wake_at IS NOT NULL AND reported_wake_at <= reported_at + interval '1 second' FROM sandboxes WHERE user_id = '"+user+"'") == "t"
	})
	docker(t, "kill", "-s", "KILL", stack+"-"+user+"-agent")
	// No request from here until the manager has restarted it.
	waitUntil(t, 60*time.Second, "the manager restarted the sandbox", func() bool {
		return psql(t, "SELECT count(*) FROM audit_events WHERE user_id = '"+user+"' AND kind = 'sandbox.restarted'") == "1"
	})
	if s := containerStatus(user); s != "running" {
		t.Fatalf("after the restart: %s", s)
	}
	es := waitRunDone(t, user, tok, run.RunID)
	found := false
	for _, e := range es {
		found = found || (e.Kind == "tool_result" && strings.Contains(e.Text, "interrupted"))
	}
	if !found {
		t.Fatalf("the interrupted shell call was not reported: %+v", es)
	}
}
