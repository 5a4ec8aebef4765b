//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Named agents, messages between them, delegation to the worker, scheduled
// jobs that wake a sleeping sandbox, and compaction, against the real stack.
// The helpers' paths are under /u/<user>; an agent's routes are under
// /u/<user>/agents/<name>, so user+"/agents/<name>" addresses that agent.

type storedEntry struct {
	ID        int64           `json:"id"`
	Kind      string          `json:"kind"`
	Text      string          `json:"text"`
	ToolName  string          `json:"tool_name"`
	IsError   bool            `json:"is_error"`
	ToolCalls json.RawMessage `json:"tool_calls"`
	Data      json.RawMessage `json:"data"`
}

// entriesOf reads conversation conv (0: the current one) of the agent at path.
func entriesOf(t *testing.T, path, tok string, conv int64) []storedEntry {
	t.Helper()
	q := "/inspect?limit=1000"
	if conv != 0 {
		q += fmt.Sprint("&conversation=", conv)
	}
	var in struct {
		Entries struct{ Items []storedEntry }
	}
	r := mustGet(t, path, tok, q)
	if err := json.Unmarshal([]byte(r.Body), &in); err != nil {
		t.Fatalf("inspect %s: %v %s", path, err, r.Body)
	}
	return in.Entries.Items
}

func mustPost(t *testing.T, path, tok, route, body string, want int) map[string]any {
	t.Helper()
	r := post(t, path, tok, route, body)
	var m map[string]any
	_ = json.Unmarshal([]byte(r.Body), &m)
	if r.Code != want {
		t.Fatalf("POST %s%s %s: %d %s, want %d", path, route, body, r.Code, r.Body, want)
	}
	return m
}

func TestNamedAgentsKeepSeparateConversationsAndReminders(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "agents")
	bob := user + "/agents/bob"
	mustPost(t, user, tok, "/agents", `{"name":"bob"}`, 201)
	prompt(t, user, tok, map[string]any{"text": "hello from main"})
	prompt(t, bob, tok, map[string]any{"text": "hello from bob"})
	grant(t, bob, tok, "set_reminder")
	prompt(t, bob, tok, map[string]any{"text": "remind in 2h: bob's errand"})
	for _, e := range entriesOf(t, user, tok, 0) {
		if strings.Contains(e.Text, "bob") && e.Kind != "agent" {
			t.Fatalf("main's conversation holds %+v", e)
		}
	}
	var bobSaw []string
	for _, e := range entriesOf(t, bob, tok, 0) {
		bobSaw = append(bobSaw, e.Kind+":"+e.Text)
	}
	if !strings.Contains(strings.Join(bobSaw, "|"), "owner_message:hello from bob") || strings.Contains(strings.Join(bobSaw, "|"), "hello from main") {
		t.Fatalf("bob's conversation: %v", bobSaw)
	}
	var rem struct{ Reminders []any }
	json.Unmarshal([]byte(mustGet(t, bob, tok, "/reminders").Body), &rem)
	if len(rem.Reminders) != 1 {
		t.Fatalf("bob's reminders: %v", rem.Reminders)
	}
	json.Unmarshal([]byte(mustGet(t, user, tok, "/reminders").Body), &rem)
	if len(rem.Reminders) != 0 {
		t.Fatalf("main's reminders: %v", rem.Reminders)
	}
	// A request for an agent that does not exist is a problem, not a new agent.
	if r := post(t, user+"/agents/nobody", tok, "/prompt", `{"text":"hi"}`); r.Code != 404 || !strings.Contains(r.Body, "unknown-agent") {
		t.Fatalf("prompt to no agent: %d %s", r.Code, r.Body)
	}
}

// waitApproval returns the first pending approval of the agent at path.
func waitApproval(t *testing.T, path, tok string) approvalView {
	t.Helper()
	var a []approvalView
	waitUntil(t, 60*time.Second, "an approval on "+path, func() bool {
		a = pendingApprovals(t, path, tok)
		return len(a) > 0
	})
	return a[0]
}

// main → bob → main → bob, each forward asked of the owner because the
// message it forwards is outside text; bob's fourth hop is refused.
func TestAgentMessagesAndTheHopLimit(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "msgs")
	bob := user + "/agents/bob"
	mustPost(t, user, tok, "/agents", `{"name":"bob","may_message":["main"]}`, 201)
	patch(t, user, tok, "/agents/main", `{"may_message":["bob"]}`)
	grant(t, user, tok, "send_message")
	grant(t, bob, tok, "send_message")
	sent := mustPost(t, user, tok, "/prompt", `{"text":"message bob: message main: message bob: message main: hi","wait":false}`, 202)
	for _, at := range []string{bob, user, bob} {
		a := waitApproval(t, at, tok)
		if a.Tool != "send_message" || !strings.Contains(a.Reason, "outside text") {
			t.Fatalf("approval on %s: %+v", at, a)
		}
		mustPost(t, at, tok, fmt.Sprintf("/approvals/%d", a.ID), `{"decision":"allow_once","wait":false}`, 200)
	}
	conv := int64(sent["conversation_id"].(float64))
	var mainSide []storedEntry
	waitUntil(t, 60*time.Second, "main's run to end", func() bool {
		mainSide = entriesOf(t, user, tok, conv)
		last := mainSide[len(mainSide)-1]
		return last.Kind == "assistant_message" && (len(last.ToolCalls) == 0 || string(last.ToolCalls) == "null")
	})
	var fromBob bool
	for _, e := range mainSide {
		fromBob = fromBob || (e.Kind == "outside_text" && e.ToolName == "send_message" && strings.Contains(string(e.Data), `"from_agent":"bob"`))
	}
	if !fromBob {
		t.Fatalf("main's side has no reply from bob as outside text")
	}
	var sessions struct {
		Conversations []struct {
			ID    int64
			Title string
		}
	}
	json.Unmarshal([]byte(mustGet(t, bob, tok, "/sessions").Body), &sessions)
	var hops int
	var refused bool
	for _, c := range sessions.Conversations {
		if !strings.HasPrefix(c.Title, "message from main") {
			continue
		}
		hops++
		es := entriesOf(t, bob, tok, c.ID)
		if es[0].Kind != "outside_text" || !strings.Contains(string(es[0].Data), `"from_agent":"main"`) {
			t.Fatalf("bob's %q starts with %+v", c.Title, es[0])
		}
		for _, e := range es {
			refused = refused || (e.Kind == "tool_result" && e.IsError && strings.Contains(e.Text, "hop limit"))
		}
	}
	if hops != 2 || !refused {
		t.Fatalf("bob received %d messages from main (want 2); fourth hop refused: %v", hops, refused)
	}
}

func patch(t *testing.T, user, tok, route, body string) {
	t.Helper()
	req, _ := http.NewRequest("PATCH", baseURL+"/u/"+user+route, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("PATCH %s: %v", route, err)
	}
	defer resp.Body.Close()
	if b := readAll(resp); resp.StatusCode != 200 {
		t.Fatalf("PATCH %s %s: %d %s", route, body, resp.StatusCode, b)
	}
}

// The worker fetches a page the sink serves; its answer comes back to main
// as outside text with the page's sha256; main's next shell call asks,
// although a rule allows the shell, until the conversation is reset.
func TestDelegationMakesMainAsk(t *testing.T) {
	t.Parallel()
	startSink(t)
	user, tok := newUser(t, "delegate")
	worker := user + "/agents/worker"
	sink := "http://" + env("AFFIDO_E2E_SINK_IP", "10.212.1.50") + ":9999"
	grant(t, user, tok, "delegate")
	mustPost(t, user, tok, "/rules", `{"tool":"shell","effect":"allow","when":{"command_prefix":"ls "}}`, 201)
	mustPost(t, worker, tok, "/rules", `{"tool":"fetch_url","effect":"allow","confirm_unconditional":true}`, 201)
	r := prompt(t, user, tok, map[string]any{"text": "delegate: fetch " + sink + "/page/one"})
	if r.Status != "done" || !strings.Contains(r.Reply, "A test page") || !strings.Contains(r.Reply, "sha256") {
		t.Fatalf("delegate: %+v", r)
	}
	var outside *storedEntry
	for _, e := range entriesOf(t, user, tok, 0) {
		if e.Kind == "outside_text" && e.ToolName == "delegate" {
			outside = &e
		}
	}
	if outside == nil || !strings.Contains(string(outside.Data), sink+"/page/one") || !strings.Contains(string(outside.Data), `"sha256":"`) {
		t.Fatalf("main's record of the worker's answer: %+v", outside)
	}
	// The worker's trace is the owner's to read: the task has a conversation there.
	if r := mustGet(t, worker, tok, "/sessions"); !strings.Contains(r.Body, `"task from main"`) {
		t.Fatalf("the worker's conversations: %s", r.Body)
	}
	b := ask(t, user, tok, "run: ls -a")
	if !strings.Contains(b.Reason, "outside text") {
		t.Fatalf("main's shell after the worker's answer: %+v", b)
	}
	decide(t, user, tok, b.ID, `{"decision":"deny"}`)
	mustPost(t, user, tok, "/reset", "", 200)
	if r := prompt(t, user, tok, map[string]any{"text": "run: ls -a"}); r.Status != "done" {
		t.Fatalf("after reset the rule allows again: %+v", r)
	}
}

// jobRuns returns the job_run records of conversation conv of the agent at path.
func jobRuns(t *testing.T, path, tok string, conv int64) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, e := range entriesOf(t, path, tok, conv) {
		if e.Kind == "job_run" {
			var d map[string]any
			json.Unmarshal(e.Data, &d)
			out = append(out, d)
		}
	}
	return out
}

// newJob schedules a job for user and deletes it when the test ends: a
// job left behind wakes its sandbox for the rest of the run, load that the
// later tests did not ask for (and a slot TestCapacityFullIs429 counts on).
func newJob(t *testing.T, user, tok, cron string) (id, conv int64) {
	t.Helper()
	j := mustPost(t, user, tok, "/jobs", fmt.Sprintf(`{"cron":%q,"prompt":"tick for %s"}`, cron, user), 201)
	id, conv = int64(j["id"].(float64)), int64(j["conversation_id"].(float64))
	t.Cleanup(func() {
		req, _ := http.NewRequest("DELETE", fmt.Sprintf("%s/u/%s/jobs/%d", baseURL, user, id), nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		if resp, err := client.Do(req); err != nil {
			t.Logf("delete job %d of %s: %v", id, user, err)
		} else {
			resp.Body.Close()
		}
	})
	return id, conv
}

// waitJobRun waits, without touching the sandbox (docker inspect only),
// until the manager has woken it, then returns the first run of the job due
// after since, once its prompt is answered.
func waitJobRun(t *testing.T, user, tok string, conv int64, since time.Time) map[string]any {
	t.Helper()
	waitUntil(t, 100*time.Second, "the manager to wake "+user+" for its job", func() bool {
		// The manager's audit trail, read in Postgres: nothing touches the sandbox.
		n := psql(t, fmt.Sprintf("SELECT count(*) FROM audit_events WHERE user_id = '%s' AND kind = 'sandbox.woken' AND at > '%s'",
			user, since.UTC().Format(time.RFC3339Nano)))
		return n != "0"
	})
	var run map[string]any
	waitUntil(t, 60*time.Second, "the job's run to be answered", func() bool {
		for _, d := range jobRuns(t, user, tok, conv) {
			due, _ := time.Parse(time.RFC3339Nano, d["due"].(string))
			if due.After(since) {
				run = d
			}
		}
		if run == nil {
			return false
		}
		es := entriesOf(t, user, tok, conv)
		return es[len(es)-1].Kind == "assistant_message" && strings.Contains(es[len(es)-1].Text, "tick for")
	})
	return run
}

func checkLate(t *testing.T, what string, run map[string]any) {
	t.Helper()
	late := time.Duration(run["late_ms"].(float64)) * time.Millisecond
	t.Logf("job run %s: %v after its time (goal ≤ 1 s)", what, late)
	// How late is the bench's business; here: fired by its own stored time,
	// well before anyone's next request would have.
	if late < 0 || late > 10*time.Second {
		t.Errorf("job run %s: %v after its time, want within 10 s", what, late)
	}
}

// A one-minute job fires on time while its sandbox is paused, stopped and
// removed: the manager wakes it at the job's stored next time.
func TestJobsFireInSleepingSandboxes(t *testing.T) {
	for _, state := range []string{"paused", "stopped", "removed"} {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			user, tok := newUser(t, "job-"+state)
			_, conv := newJob(t, user, tok, "* * * * *")
			waitStatus(t, user, map[string]string{"paused": "paused", "stopped": "exited", "removed": "missing"}[state], 30*time.Second)
			checkLate(t, "while "+state, waitJobRun(t, user, tok, conv, time.Now()))
		})
	}
}

func TestJobSurvivesManagerRestart(t *testing.T) {
	user, tok := newUser(t, "job-restart")
	_, conv := newJob(t, user, tok, "@every 20s") // not a minute: the next time comes sooner
	waitStatus(t, user, "paused", 30*time.Second)
	killManager(t)
	docker(t, "start", managerName())
	waitManagerHealthy(t)
	checkLate(t, "after a manager restart", waitJobRun(t, user, tok, conv, time.Now()))
}

// A job whose times pass while everything that could run it is down (the
// manager and the sandbox's container) runs once on return, not once per
// missed time, and is armed after now. "@every 20s" keeps the test short.
func TestMissedJobRunsOnce(t *testing.T) {
	user, tok := newUser(t, "job-missed")
	id, conv := newJob(t, user, tok, "@every 20s")
	waitUntil(t, 60*time.Second, "the first run", func() bool { return len(jobRuns(t, user, tok, conv)) >= 1 })
	docker(t, "stop", managerName())
	// A frozen container must be thawed before it can be stopped (a stop
	// under the freezer can wedge the engine on cgroup v1).
	dockerTry("unpause", stack+"-"+user+"-agent")
	docker(t, "stop", stack+"-"+user+"-agent")
	down := time.Now()
	waitUntil(t, 90*time.Second, "two of the job's times to pass while down", func() bool {
		return time.Since(down) > 45*time.Second
	})
	docker(t, "start", managerName())
	waitManagerHealthy(t)
	var missedRun map[string]any
	waitUntil(t, 60*time.Second, "the missed run", func() bool {
		for _, d := range jobRuns(t, user, tok, conv) {
			fired, _ := time.Parse(time.RFC3339Nano, d["fired"].(string))
			if fired.After(down) {
				if missedRun != nil {
					t.Fatalf("the missed job ran twice: %v and %v", missedRun, d)
				}
				missedRun = d
			}
		}
		return missedRun != nil
	})
	if missedRun["missed"].(float64) < 1 {
		t.Fatalf("the run after the downtime: %v, want missed times counted", missedRun)
	}
	var j map[string]any
	var list struct{ Jobs []map[string]any }
	json.Unmarshal([]byte(mustGet(t, user, tok, "/jobs").Body), &list)
	for _, x := range list.Jobs {
		if int64(x["id"].(float64)) == id {
			j = x
		}
	}
	next, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(j["next"]))
	fired, _ := time.Parse(time.RFC3339Nano, missedRun["fired"].(string))
	if !next.After(fired) {
		t.Fatalf("after the run the job's next time is %v, not after the run at %v", j["next"], fired)
	}
}

// A long scripted conversation with a low threshold is summarized; the
// trace shows the summary and which entries it stands in for.
func TestCompactionOnALongConversation(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "compact")
	long := user + "/agents/long"
	mustPost(t, user, tok, "/agents", `{"name":"long","compact_tokens":1500}`, 201)
	filler := strings.Repeat("words to make the context grow ", 10)
	for i := 0; i < 14; i++ {
		prompt(t, long, tok, map[string]any{"text": fmt.Sprintf("turn %d: %s", i, filler)})
	}
	var summary *storedEntry
	waitUntil(t, 60*time.Second, "a summary entry", func() bool {
		for _, e := range entriesOf(t, long, tok, 0) {
			if e.Kind == "summary" {
				summary = &e
			}
		}
		return summary != nil
	})
	var d struct {
		Replaced      int   `json:"replaced"`
		FirstReplaced int64 `json:"first_replaced"`
		LastReplaced  int64 `json:"last_replaced"`
		TokensBefore  int   `json:"tokens_before"`
	}
	if err := json.Unmarshal(summary.Data, &d); err != nil || d.Replaced < 2 || d.LastReplaced <= d.FirstReplaced || d.TokensBefore <= 1500 {
		t.Fatalf("summary record %s: %+v %v", summary.Data, d, err)
	}
	if !strings.HasPrefix(summary.Text, "Summary:") {
		t.Fatalf("summary text %q", summary.Text)
	}
	// The conversation goes on after it.
	if r := prompt(t, long, tok, map[string]any{"text": "still there?"}); r.Reply != "echo: still there?" {
		t.Fatalf("after the summary: %+v", r)
	}
}

// A message sent just before the agent is SIGKILLed (while bob's answer is
// still being written) is delivered once after the restart, and main gets
// bob's one reply.
func TestMessageDeliveredOnceAcrossSIGKILL(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "msgkill")
	bob := user + "/agents/bob"
	mustPost(t, user, tok, "/agents", `{"name":"bob"}`, 201)
	patch(t, user, tok, "/agents/main", `{"may_message":["bob"]}`)
	grant(t, user, tok, "send_message")
	sent := mustPost(t, user, tok, "/prompt", `{"text":"message bob: slow 3000: ping","wait":false}`, 202)
	inbox := func() []int64 {
		var sessions struct {
			Conversations []struct {
				ID    int64
				Title string
			}
		}
		json.Unmarshal([]byte(mustGet(t, bob, tok, "/sessions").Body), &sessions)
		var ids []int64
		for _, c := range sessions.Conversations {
			if strings.HasPrefix(c.Title, "message from main") {
				ids = append(ids, c.ID)
			}
		}
		return ids
	}
	waitUntil(t, 30*time.Second, "bob to receive the message", func() bool { return len(inbox()) == 1 })
	docker(t, "kill", "-s", "KILL", stack+"-"+user+"-agent")
	conv := int64(sent["conversation_id"].(float64))
	var mainSide []storedEntry
	waitUntil(t, 90*time.Second, "main's run to end after the kill", func() bool {
		mainSide = entriesOf(t, user, tok, conv)
		last := mainSide[len(mainSide)-1]
		return last.Kind == "assistant_message" && (len(last.ToolCalls) == 0 || string(last.ToolCalls) == "null")
	})
	ids := inbox()
	if len(ids) != 1 {
		t.Fatalf("bob has %d conversations for one message", len(ids))
	}
	received := 0
	for _, e := range entriesOf(t, bob, tok, ids[0]) {
		if e.Kind == "outside_text" {
			received++
		}
	}
	replies := 0
	for _, e := range mainSide {
		if e.Kind == "outside_text" && strings.Contains(string(e.Data), `"from_agent":"bob"`) {
			replies++
		}
	}
	if received != 1 || replies != 1 {
		t.Fatalf("bob received the message %d times; main holds %d replies", received, replies)
	}
}
