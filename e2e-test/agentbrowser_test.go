//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The agent's browser through the whole stack: the scripted model calls
// the browser tools, the agent asks the gateway, the manager drives the
// user's browser sandbox (Debian's Chromium on no network) and is its only
// way out. The test site is the sink (e2e-test/probe/site.go), on the one
// private address the stack's guard allows.

// browserPrompt sends a browser tool call ("browser NAME {json}") and
// returns the settled run.
func browserPrompt(t *testing.T, user, tok, tool string, args map[string]any) settled {
	t.Helper()
	text := "browser " + tool
	if args != nil {
		a, _ := json.Marshal(args)
		text += " " + string(a)
	}
	b, _ := json.Marshal(map[string]any{"text": text})
	r := post(t, user, tok, "/prompt", string(b))
	var s settled
	if r.Code != 200 || json.Unmarshal([]byte(r.Body), &s) != nil {
		t.Fatalf("%s: %d %s", text, r.Code, r.Body)
	}
	return s
}

// browse opens a page of a site the owner allowed; with a page's text in
// the context the open asks again (it is not read-only: a URL can carry
// data out), and the owner allows it once.
func browse(t *testing.T, user, tok, u string) settled {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"text": "browse " + u})
	r := post(t, user, tok, "/prompt", string(b))
	var s settled
	if r.Code != 200 || json.Unmarshal([]byte(r.Body), &s) != nil {
		t.Fatalf("browse %s: %d %s", u, r.Code, r.Body)
	}
	if s.Status == "waiting" && s.WaitingFor != nil && s.WaitingFor.Tool == "browser_open" && strings.Contains(s.WaitingFor.Reason, "outside text") {
		s = decide(t, user, tok, s.WaitingFor.ID, `{"decision":"allow_once"}`)
	}
	if s.Status != "done" {
		t.Fatalf("browse %s: %+v", u, s)
	}
	return s
}

func TestAgentBrowserAsksAndIsFenced(t *testing.T) {
	t.Parallel()
	startSink(t)
	user, tok := newUser(t, "browser")
	sinkIP := env("AFFIDO_E2E_SINK_IP", "10.212.1.50")
	site := "http://" + sinkIP + ":9999/site"
	defer func() {
		if t.Failed() {
			out, _ := dockerTry("logs", "--tail", "60", managerName())
			t.Logf("manager log:\n%s", tailMatching(out, "browser", 40))
		}
	}()

	// 1. Opening a page asks for a host no rule names; "allow always"
	// adds a rule for the site, and the next page there opens at once.
	a := ask(t, user, tok, "browse "+site+"/")
	if a.Tool != "browser_open" || a.ProposedRule.When["host"] != sinkIP {
		t.Fatalf("the first open: %+v", a)
	}
	if s := decide(t, user, tok, a.ID, `{"decision":"allow_always"}`); s.Status != "done" || !strings.Contains(s.Reply, "status 200") {
		t.Fatalf("after allow always: %+v", s)
	}
	if r := prompt(t, user, tok, map[string]any{"text": "browse " + site + "/account"}); r.Status != "done" || !strings.Contains(r.Reply, "status 200") {
		t.Fatalf("a second page of the allowed site: %+v", r)
	}
	browserBox := stack + "-" + user + "-browser"
	if mode := strings.TrimSpace(docker(t, "inspect", "-f", "{{.HostConfig.NetworkMode}} {{.HostConfig.ReadonlyRootfs}} {{.Config.User}}", browserBox)); mode != "none true 10001:10001" {
		t.Fatalf("the browser sandbox: %s, want no network, a read-only root and its own uid", mode)
	}

	// 2. The attack: a page of the allowed site whose images, frames,
	// scripts and redirects point at the control network (Caddy's gateway
	// and the manager), the user's own agent sandbox, a private address
	// and the cloud metadata address. None of them loads: the proxy
	// refuses each, and says so in the manager's log and the tool's result.
	agentIP := ipOn(t, stack+"-"+user+"-agent", stack+"-"+user+"-net")
	caddyIP := env("AFFIDO_CADDY_IP", "10.212.1.10")
	inward := map[string]string{
		"the gateway":           "http://" + caddyIP + ":8088/v1/gateway/whoami",
		"the manager":           "http://" + managerName() + ":9090/healthz",
		"the agent's sandbox":   "http://" + agentIP + ":8080/status",
		"a private address":     "http://192.168.99.1/",
		"the metadata address":  "http://169.254.169.254/latest/meta-data/",
		"a redirect to private": site[:strings.Index(site, "/site")] + "/redirect?to=" + url.QueryEscape("http://10.99.0.1/inner"),
	}
	q := url.Values{}
	for _, u := range inward {
		q.Add("to", u)
	}
	r := prompt(t, user, tok, map[string]any{"text": "browse " + site + "/hostile?" + q.Encode()})
	if r.Status != "done" || !strings.Contains(r.Reply, "refused") {
		t.Fatalf("the hostile page: %+v", r)
	}
	for what, u := range inward {
		host := strings.Split(strings.TrimPrefix(u, "http://"), "/")[0]
		if what == "a redirect to private" {
			host = "10.99.0.1"
		}
		waitUntil(t, 30*time.Second, "the proxy's refusal of "+what, func() bool {
			out, _ := dockerTry("logs", managerName())
			for _, line := range strings.Split(out, "\n") {
				if strings.Contains(line, "browser proxy refused") && strings.Contains(line, `"user":"`+user+`"`) && strings.Contains(line, `"target":"`+host) {
					return true
				}
			}
			return false
		})
	}

	// 3. Injected text: reading a page puts it in the context, and the
	// click it asks for then waits for the owner; a rule letting the agent
	// act on this site lets the next one through.
	if r := prompt(t, user, tok, map[string]any{"text": "browse " + site + "/inject"}); r.Status != "done" {
		t.Fatalf("open the offers page: %+v", r)
	}
	if r := browserPrompt(t, user, tok, "read", nil); r.Status != "done" || !strings.Contains(r.Reply, "outside text") {
		t.Fatalf("read: %+v", r)
	}
	click := map[string]any{"url": site + "/inject", "selector": "#buy"}
	s := browserPrompt(t, user, tok, "click", click)
	if s.Status != "waiting" || s.WaitingFor == nil || s.WaitingFor.Tool != "browser_click" || !strings.Contains(s.WaitingFor.Reason, "outside text") {
		t.Fatalf("a click after reading a page: %+v", s)
	}
	if d := decide(t, user, tok, s.WaitingFor.ID, `{"decision":"deny"}`); d.Status != "done" {
		t.Fatalf("deny: %+v", d)
	}
	mustPost(t, user, tok, "/rules", fmt.Sprintf(`{"tool":"browser_click","effect":"allow","when":{"host":%q}}`, sinkIP), 201)
	if s := browserPrompt(t, user, tok, "click", click); s.Status != "done" || !strings.Contains(s.Reply, "clicked") {
		t.Fatalf("a click on the site the owner let the agent act on: %+v", s)
	}
	browserPrompt(t, user, tok, "read", nil)
	var bought bool
	for _, e := range inspectOf(t, user, tok).Entries.Items {
		bought = bought || (e.Kind == "outside_text" && strings.Contains(e.Text, "You bought it"))
	}
	if !bought {
		t.Fatal("the click did not reach /site/bought")
	}

	// 4. Typing into a password field is refused whatever the rules say.
	mustPost(t, user, tok, "/rules", fmt.Sprintf(`{"tool":"browser_type","effect":"allow","when":{"host":%q}}`, sinkIP), 201)
	browse(t, user, tok, site+"/login")
	if s := browserPrompt(t, user, tok, "type", map[string]any{"url": site + "/login", "selector": "#password", "text": "hunter2"}); s.Status != "done" || !strings.Contains(s.Reply, "password field") {
		t.Fatalf("typing a password: %+v", s)
	}

	// 5. An upload asks even with rules for the site, and no rule can be
	// made to allow it; allowed once, the page gets the file.
	if r := post(t, user, tok, "/rules", fmt.Sprintf(`{"tool":"browser_upload","effect":"allow","confirm_unconditional":true}`)); r.Code != 400 {
		t.Fatalf("a rule allowing uploads: %d %s", r.Code, r.Body)
	}
	grant(t, user, tok, "write_file")
	if r := prompt(t, user, tok, map[string]any{"text": "write up.txt: hello upload"}); r.Status != "waiting" && r.Status != "done" {
		t.Fatalf("write the file: %+v", r)
	}
	for _, a := range pendingApprovals(t, user, tok) { // write_file asks while a page's text is in the context
		decide(t, user, tok, a.ID, `{"decision":"allow_once"}`)
	}
	browse(t, user, tok, site+"/upload")
	s = browserPrompt(t, user, tok, "upload", map[string]any{"url": site + "/upload", "selector": "#file", "path": "up.txt"})
	if s.Status != "waiting" || s.WaitingFor == nil || s.WaitingFor.Tool != "browser_upload" || !strings.Contains(s.WaitingFor.Reason, "always asks") {
		t.Fatalf("an upload with rules for the site: %+v", s)
	}
	if d := decide(t, user, tok, s.WaitingFor.ID, `{"decision":"allow_once"}`); d.Status != "done" || !strings.Contains(d.Reply, "gave up.txt") {
		t.Fatalf("the upload allowed once: %+v", d)
	}
	if s := browserPrompt(t, user, tok, "click", map[string]any{"url": site + "/upload", "selector": "#send"}); s.Status != "done" {
		t.Fatalf("send the form: %+v", s)
	}
	if r := browserPrompt(t, user, tok, "read", nil); !strings.Contains(r.Reply, "outside text") {
		t.Fatalf("read the answer: %+v", r)
	}
	var got bool
	for _, e := range inspectOf(t, user, tok).Entries.Items {
		got = got || (e.Kind == "outside_text" && strings.Contains(e.Text, "Got hello upload"))
	}
	if !got {
		t.Fatal("the site did not get the uploaded file")
	}
}
