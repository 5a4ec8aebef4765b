//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/internal/openai"
	"github.com/affido/affido/manager/spend"
)

// The gateway's spend control against the real ledger in Postgres: 20
// concurrent calls against a daily limit that fits the worst case of 3 are
// 3 served and 17 refused; a prompt past the limit stops with the reason
// spend_limit and the owner is told; the owner can allow another day once;
// a model without a price is refused.
func TestSpendLimits(t *testing.T) {
	user, tok := newUser(t, "spend")
	keepAwake(t, user, tok)
	token, base := sandboxGateway(t, user)
	const text, maxTokens = "slow 3000: race", 1000
	mt := int64(maxTokens)
	in, out := spend.Estimate(openai.ChatRequest{Model: "fake/echo", MaxTokens: &mt,
		Messages: []openai.ChatMessage{{Role: "user", Content: text}}})
	worst := spend.Cost(spend.Price{Input: 1, Output: 2}, in, out) // the e2e stack's price of fake/echo
	daily := 3*worst + worst/2
	docker(t, "exec", managerName(), "/bin/affido", "admin", "spend", user, "--daily", fmt.Sprintf("%.6f", float64(daily)/1e6))

	codes := strings.Fields(docker(t, "run", "--rm", "--network", "container:"+stack+"-"+user+"-agent", "affido/probe:test",
		"-chatn", "20", base, token, "fake/echo", text, fmt.Sprint(maxTokens)))
	served, refused := 0, 0
	for _, c := range codes {
		switch c {
		case "200":
			served++
		case "402":
			refused++
		}
	}
	if served != 3 || refused != 17 {
		t.Fatalf("20 concurrent calls against a limit of 3: %d served, %d refused (%v)", served, refused, codes)
	}
	ledger := psql(t, "SELECT count(*) || ' ' || coalesce(sum(cost_micros), 0) || ' ' || bool_and(settled) FROM spend WHERE user_id = '"+user+"'")
	var n, cost int64
	var settled bool
	fmt.Sscan(ledger, &n, &cost, &settled)
	if n != 3 || !settled || cost > daily {
		t.Fatalf("ledger %q: want 3 settled calls costing at most %d", ledger, daily)
	}

	// The limit is reached (the remaining room is under a call's worst case):
	// a prompt stops with the reason in the trace, and the owner is told.
	r := prompt(t, user, tok, map[string]any{"text": "one more please"})
	if r.Status != "unanswered" || r.Reason != "spend_limit" {
		t.Fatalf("prompt past the limit: %+v", r)
	}
	found := false
	for _, e := range runEntries(inspectOf(t, user, tok), r.RunID) {
		found = found || (e.Kind == "error" && strings.Contains(e.Text, "spend limit"))
	}
	if !found {
		t.Error("no error entry about the spend limit in the run")
	}
	day := time.Now().UTC().Format("2006-01-02")
	if n := psql(t, "SELECT count(*) FROM notifications WHERE user_id = '"+user+"' AND key = 'spend-limit-"+day+"'"); n != "1" {
		t.Errorf("spend-limit notifications: %s, want 1", n)
	}

	// The owner allows another day, once.
	another := func() int {
		return request(t, "POST", "/api/spend/another-day", bearer(tok)).Code
	}
	if c := another(); c != 200 {
		t.Fatalf("another day: %d", c)
	}
	if c := another(); c != 409 {
		t.Fatalf("another day twice: %d, want 409", c)
	}
	if r := prompt(t, user, tok, map[string]any{"text": "now it fits"}); r.Status != "done" {
		t.Fatalf("prompt after another day: %+v", r)
	}
	rep := request(t, "GET", "/api/spend", bearer(tok))
	if rep.Code != 200 || !strings.Contains(rep.Body, `"fake/echo"`) || !strings.Contains(rep.Body, `"another_day_allowed_today":true`) {
		t.Fatalf("GET /api/spend: %d %s", rep.Code, rep.Body)
	}

	// A model without a price is refused before anything is charged.
	out2, _ := dockerTry("run", "--rm", "--network", "container:"+stack+"-"+user+"-agent", "affido/probe:test", "-post", base+"chat/completions",
		`{"model":"fake/unpriced","messages":[{"role":"user","content":"x"}]}`, token)
	if !strings.HasPrefix(out2, "400") || !strings.Contains(out2, "unpriced_model") {
		t.Fatalf("unpriced model: %s", out2)
	}
}

// A sandbox looping fetch_url straight at the gateway (with its own token,
// from inside it, past its agent's rules) against the real ledger: it is
// stopped by the spend limit (402 spend-limit) and then by the rate (429
// web-rate-limit, shared with web_search); every call that went out is
// charged at AFFIDO_PRICE_FETCH and settled, next to the model calls.
func TestWebCallsChargedAndLimited(t *testing.T) {
	t.Parallel()
	startSink(t)
	user, tok := newUser(t, "webspend")
	keepAwake(t, user, tok)
	token, base := sandboxGateway(t, user)
	page := `{"url":"http://` + env("AFFIDO_E2E_SINK_IP", "10.212.1.50") + `:9999/page/one"}`
	loop := func(n int, path, body string) (answers []string) {
		out := docker(t, "run", "--rm", "--network", "container:"+stack+"-"+user+"-agent", "affido/probe:test",
			"-postn", strconv.Itoa(n), base+path, body, token)
		return strings.Split(strings.TrimSpace(out), "\n")
	}
	count := func(answers []string, prefix, suffix string) (n int) {
		for _, a := range answers {
			if strings.HasPrefix(a, prefix) && strings.HasSuffix(a, suffix) {
				n++
			}
		}
		return n
	}

	// $0.0035 a day fits three fetches at $0.001.
	docker(t, "exec", managerName(), "/bin/affido", "admin", "spend", user, "--daily", "0.0035")
	got := loop(5, "fetch", page)
	if len(got) != 5 || count(got[:3], "200", "") != 3 || count(got[3:], "402 ", "/spend-limit") != 2 {
		t.Fatalf("5 fetches against a limit that fits 3: %q", got)
	}
	day := time.Now().UTC().Format("2006-01-02")
	if n := psql(t, "SELECT count(*) FROM notifications WHERE user_id = '"+user+"' AND key = 'spend-limit-"+day+"'"); n != "1" {
		t.Errorf("spend-limit notifications: %s, want 1", n)
	}

	// Room again: the rate stops the loop. The five calls above counted
	// (they passed the rate), so 25 of the next 40 go and 15 are refused.
	docker(t, "exec", managerName(), "/bin/affido", "admin", "spend", user, "--daily", "5")
	got = loop(40, "fetch", page)
	if len(got) != 40 || count(got[:25], "200", "") != 25 || count(got[25:], "429 ", "/web-rate-limit") != 15 {
		t.Fatalf("40 fetches with 25 left in the minute: %q", got)
	}
	if got := loop(1, "search", `{"query":"q"}`); count(got, "429 ", "/web-rate-limit") != 1 {
		t.Fatalf("a search in the same minute: %q", got)
	}

	ledger := psql(t, "SELECT count(*) || ' ' || coalesce(sum(cost_micros), 0) || ' ' || bool_and(settled) FROM spend WHERE user_id = '"+user+"' AND model = 'fetch_url'")
	if ledger != "28 28000 true" {
		t.Fatalf("ledger %q: want 28 fetches settled at $0.001 each", ledger)
	}
	if rep := request(t, "GET", "/api/spend", bearer(tok)); rep.Code != 200 || !strings.Contains(rep.Body, `"fetch_url"`) {
		t.Fatalf("GET /api/spend: %d %s", rep.Code, rep.Body)
	}
}
