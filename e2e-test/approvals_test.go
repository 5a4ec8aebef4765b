//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// Powers granted one at a time, against the real stack: approvals that
// outlive the agent, its container and the manager; rules with
// conditions; outside text from fetch_url; fetches the guard refuses.

type approvalView struct {
	ID           int64           `json:"id"`
	Tool         string          `json:"tool"`
	Arguments    json.RawMessage `json:"arguments"`
	SHA256       string          `json:"sha256"`
	Reason       string          `json:"reason"`
	RunID        int64           `json:"run_id"`
	ExpiresAt    time.Time       `json:"expires_at"`
	ProposedRule struct {
		Effect string            `json:"effect"`
		When   map[string]string `json:"when"`
	} `json:"proposed_rule"`
}

type settled struct {
	runResult
	WaitingFor *approvalView `json:"waiting_for"`
}

// ask sends a prompt and expects its run to wait for an approval.
func ask(t *testing.T, user, tok, text string) approvalView {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"text": text})
	r := post(t, user, tok, "/prompt", string(b))
	var s settled
	if r.Code != 200 || json.Unmarshal([]byte(r.Body), &s) != nil || s.Status != "waiting" || s.WaitingFor == nil {
		t.Fatalf("prompt %q: want a run waiting for the owner, got %d %s", text, r.Code, r.Body)
	}
	return *s.WaitingFor
}

// decide posts a decision and returns the run as it is afterwards.
func decide(t *testing.T, user, tok string, id int64, body string) settled {
	t.Helper()
	r := post(t, user, tok, fmt.Sprintf("/approvals/%d", id), body)
	var s settled
	if r.Code != 200 || json.Unmarshal([]byte(r.Body), &s) != nil {
		t.Fatalf("decide %d %s: %d %s", id, body, r.Code, r.Body)
	}
	return s
}

func pendingApprovals(t *testing.T, user, tok string) []approvalView {
	t.Helper()
	var out struct{ Approvals []approvalView }
	if err := json.Unmarshal([]byte(mustGet(t, user, tok, "/approvals").Body), &out); err != nil {
		t.Fatal(err)
	}
	return out.Approvals
}

// An approval pending across SIGKILL of the agent, a manager restart and
// the sandbox sleeping through every idle tier to removal (the e2e stack's
// 13 s stand for a day; only its expiry, AFFIDO_APPROVAL_TTL later, would
// wake it) is decided afterwards, and the tool runs exactly once. The
// owner was told.
func TestApprovalOutlivesKillRestartAndRemoval(t *testing.T) {
	startSink(t)
	user, tok := reminderUser(t, "appr-wait", "/approval")
	a := ask(t, user, tok, "run: echo ran >> once.txt")
	if a.Tool != "shell" || a.SHA256 == "" || !strings.Contains(a.Reason, "asks by default") {
		t.Fatalf("approval %+v", a)
	}
	d := waitDelivery(t, "/approval", 30*time.Second)
	if !strings.Contains(d.Body, fmt.Sprintf("approval %d", a.ID)) {
		t.Fatalf("notification %q does not name approval %d", d.Body, a.ID)
	}

	docker(t, "kill", "-s", "KILL", stack+"-"+user+"-agent")
	if got := pendingApprovals(t, user, tok); len(got) != 1 || got[0].ID != a.ID || got[0].SHA256 != a.SHA256 {
		t.Fatalf("after SIGKILL: %+v", got)
	}
	killManager(t)
	docker(t, "start", managerName())
	waitManagerHealthy(t)
	if got := pendingApprovals(t, user, tok); len(got) != 1 || got[0].ID != a.ID {
		t.Fatalf("after a manager restart: %+v", got)
	}
	waitStatus(t, user, "missing", 60*time.Second) // paused, stopped, removed: a day in test-clock terms
	checkWakeIsExpiry(t, user, a)                  // the only wake
	if time.Until(a.ExpiresAt) < 10*time.Second {
		t.Fatalf("the approval is about to expire (%v): raise the stack's AFFIDO_APPROVAL_TTL", a.ExpiresAt)
	}
	if r := request(t, "GET", "/u/"+user+"/file?path=once.txt", bearer(tok)); r.Code != 404 {
		t.Fatalf("the command ran before the decision: %d %s", r.Code, r.Body)
	}

	if r := post(t, user, tok, "/approvals/999999999", `{"decision":"allow_once"}`); r.Code != 404 {
		t.Fatalf("an approval that does not exist: %d %s", r.Code, r.Body)
	}
	s := decide(t, user, tok, a.ID, `{"decision":"allow_once"}`)
	if s.Status != "done" || !strings.Contains(s.Reply, "exit 0") {
		t.Fatalf("after allow once: %+v", s)
	}
	if r := post(t, user, tok, fmt.Sprintf("/approvals/%d", a.ID), `{"decision":"allow_once"}`); r.Code != 409 {
		t.Fatalf("deciding twice: %d %s", r.Code, r.Body)
	}
	if f := mustGet(t, user, tok, "/file?path=once.txt").Body; f != "ran\n" {
		t.Fatalf("once.txt %q: the command must run exactly once", f)
	}
}

// A deny reaches the model; a changed call asks again; a rule with a
// condition allows only the calls it matches.
func TestApprovalDenyChangedArgumentsAndConditions(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "appr-rules")
	a := ask(t, user, tok, "run: touch denied.txt")
	if s := decide(t, user, tok, a.ID, `{"decision":"deny","note":"not in my workspace"}`); !strings.Contains(s.Reply, "[denied]") || !strings.Contains(s.Reply, "not in my workspace") {
		t.Fatalf("the deny did not reach the model: %+v", s)
	}
	b := ask(t, user, tok, "run: touch denied2.txt")
	if b.ID == a.ID || b.SHA256 == a.SHA256 {
		t.Fatalf("changed arguments must ask again: %+v then %+v", a, b)
	}
	decide(t, user, tok, b.ID, `{"decision":"deny"}`)
	if r := request(t, "GET", "/u/"+user+"/file?path=denied.txt", bearer(tok)); r.Code != 404 {
		t.Fatalf("a denied command ran: %d", r.Code)
	}
	if r := post(t, user, tok, "/rules", `{"tool":"shell","effect":"allow","when":{"command_prefix":"ls "}}`); r.Code != 201 {
		t.Fatalf("rule: %d %s", r.Code, r.Body)
	}
	if r := prompt(t, user, tok, map[string]any{"text": "run: ls -a"}); r.Status != "done" || !strings.Contains(r.Reply, "exit 0") {
		t.Fatalf("a matching call: %+v", r)
	}
	c := ask(t, user, tok, "run: ls -a; touch chained.txt")
	decide(t, user, tok, c.ID, `{"decision":"deny"}`)
	// Issue 28: allow always on a harmless find saves that exact command,
	// not the prefix "find ", so find -exec asks.
	c = ask(t, user, tok, "run: find . -maxdepth 0 -name x")
	if c.ProposedRule.When["command"] != "find . -maxdepth 0 -name x" || c.ProposedRule.When["command_prefix"] != "" {
		t.Fatalf("proposed rule %+v", c.ProposedRule)
	}
	if s := decide(t, user, tok, c.ID, `{"decision":"allow_always"}`); s.Status != "done" {
		t.Fatalf("allow always on find: %+v", s)
	}
	c = ask(t, user, tok, "run: find . -maxdepth 0 -exec touch pwned.txt {} +")
	decide(t, user, tok, c.ID, `{"decision":"deny"}`)
	if r := request(t, "GET", "/u/"+user+"/file?path=pwned.txt", bearer(tok)); r.Code != 404 {
		t.Fatalf("find -exec ran: %d", r.Code)
	}
	c = ask(t, user, tok, "write notes/x.txt: hello")
	if c.ProposedRule.When["path_prefix"] != "notes" {
		t.Fatalf("proposed rule %+v", c.ProposedRule)
	}
	if s := decide(t, user, tok, c.ID, `{"decision":"allow_always"}`); s.Status != "done" {
		t.Fatalf("allow always: %+v", s)
	}
	if r := prompt(t, user, tok, map[string]any{"text": "write notes/y.txt: again"}); r.Status != "done" {
		t.Fatalf("a write the new rule allows: %+v", r)
	}
	for _, body := range []string{
		`{"tool":"shell","effect":"allow","when":{"host":"example.org"}}`, // a condition the tool cannot carry
		`{"tool":"shell","effect":"allow","when":{"command_prefix":""}}`,  // an empty value is not "no condition"
		`{"tool":"shell","effect":"allow","when":{"command_prefix":"find "}}`,
		`{"tool":"shell","effect":"allow"}`, // every call, unconfirmed
	} {
		if r := post(t, user, tok, "/rules", body); r.Code != 400 {
			t.Fatalf("POST /rules %s: %d %s", body, r.Code, r.Body)
		}
	}
}

// fetch_url through the gateway, on the worker (the owner's agents have no
// web tools of their own): a new host asks; allow always allows that host;
// the page is outside text with its provenance. Fetches of loopback,
// private, pool and control-network addresses, directly or by redirect,
// are refused. (That outside text makes main's shell ask is
// TestDelegationMakesMainAsk.)
func TestFetchOutsideTextAndGuard(t *testing.T) {
	t.Parallel()
	startSink(t)
	user, tok := newUser(t, "fetch")
	worker := user + "/agents/worker" // the helpers' paths are under /u/<this>
	sink := "http://" + env("AFFIDO_E2E_SINK_IP", "10.212.1.50") + ":9999"
	a := ask(t, worker, tok, "fetch "+sink+"/page/one")
	if a.Tool != "fetch_url" || a.ProposedRule.When["host"] != env("AFFIDO_E2E_SINK_IP", "10.212.1.50") {
		t.Fatalf("approval %+v", a)
	}
	s := decide(t, worker, tok, a.ID, `{"decision":"allow_always"}`)
	if s.Status != "done" || !strings.Contains(s.Reply, "outside text from "+sink+"/page/one") || !strings.Contains(s.Reply, "A test page") || strings.Contains(s.Reply, "steal") {
		t.Fatalf("fetch: %+v", s)
	}
	var outside *entry
	for _, e := range inspectOf(t, worker, tok).Entries.Items {
		if e.Kind == "outside_text" {
			outside = &e
		}
	}
	if outside == nil {
		t.Fatal("no outside_text entry")
	}
	var verbatim struct{ Data map[string]any }
	if err := json.Unmarshal([]byte(mustGet(t, worker, tok, fmt.Sprint("/entry?id=", outside.ID)).Body), &verbatim); err != nil {
		t.Fatal(err)
	}
	prov := verbatim.Data
	if prov["url"] != sink+"/page/one" || prov["final_url"] != sink+"/page/one" || prov["status"] != float64(200) || prov["sha256"] == "" || prov["fetched_at"] == nil {
		t.Fatalf("provenance %v", prov)
	}
	if r := prompt(t, worker, tok, map[string]any{"text": "fetch " + sink + "/page/two"}); r.Status != "done" || !strings.Contains(r.Reply, "/page/two") {
		t.Fatalf("a host allowed always: %+v", r)
	}

	// The guard, called as the agent calls it (with the sandbox's token,
	// from inside the sandbox), for every address a page could point at.
	keepAwake(t, user, tok) // first: the sandbox must stay up for the exec below
	token, base := sandboxGateway(t, user)
	caddy := env("AFFIDO_CADDY_IP", "10.212.1.10")
	manager := ipOn(t, managerName(), stack+"_control")
	pool := strings.Split(psql(t, "SELECT endpoint FROM sandboxes WHERE user_id = '"+user+"'"), ":")[0]
	refused := []string{
		"http://127.0.0.1:8080/health",
		"http://localhost:9090/healthz",
		"http://[::1]:8080/",
		"http://" + caddy + ":8080/",
		"http://" + manager + ":9090/healthz",
		"http://" + pool + ":8080/health",
		"http://192.168.1.1/",
		"http://169.254.169.254/latest/meta-data/",
		sink + "/redirect?to=http://127.0.0.1:9090/healthz",
		sink + "/redirect?to=http://" + manager + ":9090/healthz",
		sink + "/redirect?to=http://" + pool + ":8080/health",
		sink + "/redirect?to=file:///etc/passwd",
	}
	for _, u := range refused {
		out := strings.TrimSpace(docker(t, "run", "--rm", "--network", "container:"+stack+"-"+user+"-agent", "affido/probe:test",
			"-post", base+"fetch", `{"url":"`+u+`"}`, token))
		t.Logf("fetch %s: %s", u, out)
		if !strings.HasPrefix(out, "403") || !strings.Contains(out, "fetch-refused") {
			t.Errorf("fetch %s: %s", u, out)
		}
	}
	for _, u := range []string{"file:///etc/passwd", "gopher://" + caddy + ":8080/"} {
		out := strings.TrimSpace(docker(t, "run", "--rm", "--network", "container:"+stack+"-"+user+"-agent", "affido/probe:test",
			"-post", base+"fetch", `{"url":"`+u+`"}`, token))
		if !strings.HasPrefix(out, "400") {
			t.Errorf("fetch %s: %s", u, out)
		}
	}
	// Through the model too: a page's redirect inward is a tool error.
	r := prompt(t, worker, tok, map[string]any{"text": "fetch " + sink + "/redirect?to=http://" + manager + ":9090/healthz"})
	if r.Status != "done" || !strings.Contains(r.Reply, "refused") {
		t.Fatalf("an inward redirect through the model: %+v", r)
	}
}

// web_search asks by default and answers with outside text from the
// manager's provider (the scripted one here).
func TestWebSearch(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "search")
	worker := user + "/agents/worker"
	a := ask(t, worker, tok, "websearch durable agents")
	s := decide(t, worker, tok, a.ID, `{"decision":"allow_once"}`)
	if !strings.Contains(s.Reply, "outside text from web_search (scripted)") || !strings.Contains(s.Reply, "example.org/affido") {
		t.Fatalf("search: %+v", s)
	}
}
