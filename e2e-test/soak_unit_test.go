//go:build e2e

package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// The soak's invariants held to made-up stores: each must report what is
// wrong in them, so a clean soak means something. Needs no stack.

func soakTestUser() *soakUser {
	return &soakUser{ID: "u1", MainConv: 1, ApprConv: 10, JobID: 7, JobConv: 20}
}

func entriesJSON(t *testing.T, s string) []soakEntry {
	t.Helper()
	var es []soakEntry
	if err := json.Unmarshal([]byte(s), &es); err != nil {
		t.Fatal(err)
	}
	return es
}

func violationsWith(iv invariant, sub string) int {
	n := 0
	for _, v := range iv.Violations {
		if strings.Contains(v, sub) {
			n++
		}
	}
	return n
}

func TestSoakCheckReminders(t *testing.T) {
	u := soakTestUser()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tok := range []string{"soak-r-1", "soak-r-2", "soak-r-3"} {
		u.prompts = append(u.prompts, &promptRecord{Conv: 1, Kind: kindReminder, Token: tok, Text: "remind in 20s: " + tok, Accepted: true})
	}
	v := &userView{Agents: map[string]*agentView{"main": {Convs: map[int64]*convView{1: {ID: 1, Entries: entriesJSON(t, `[
		{"id":1,"kind":"tool_result","tool_name":"set_reminder","text":"Reminder set for 2026-01-01T11:50:00Z: soak-r-1"},
		{"id":2,"kind":"tool_result","tool_name":"set_reminder","text":"Reminder set for 2026-01-01T11:51:00Z: soak-r-2"},
		{"id":3,"kind":"tool_result","tool_name":"set_reminder","text":"Reminder set for 2026-01-01T12:05:00Z: soak-r-3"},
		{"id":4,"kind":"reminder","text":"Reminder: soak-r-1"}]`)}}}},
		Notifications: []notificationRow{{Key: "reminder-a", Status: "delivered", Text: "soak-r-1"}},
		Sink:          []delivery{{Body: "soak-r-1"}, {Body: "soak-r-1"}}}
	iv, lost := checkReminders(u, v, now)
	if len(lost) != 1 || lost[0] != "soak-r-2" {
		t.Fatalf("lost %v, want [soak-r-2]; %+v", lost, iv)
	}
	if len(iv.Pending) != 1 || !strings.Contains(iv.Pending[0], "soak-r-3") {
		t.Fatalf("pending %v, want the one not due yet", iv.Pending)
	}
	if got := countOf(iv, "received twice"); got != 1 {
		t.Fatalf("received twice: %d", got)
	}
}

func countOf(iv invariant, what string) int {
	for _, c := range iv.Counts {
		if c.What == what {
			return c.N
		}
	}
	return -1
}

func TestSoakCheckJobs(t *testing.T) {
	u := soakTestUser()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	u.JobFirst = t0
	run := func(due time.Time, runID int64, missed int) soakEntry {
		d, _ := json.Marshal(map[string]any{"job": 7, "due": due, "missed": missed, "run": runID})
		return soakEntry{Kind: "job_run", Data: d}
	}
	reply := func(runID int64) soakEntry { return soakEntry{Kind: "assistant_message", RunID: runID} }
	c := &convView{ID: 20, Entries: []soakEntry{
		run(t0, 100, 0), reply(100),
		run(t0.Add(time.Minute), 101, 0), reply(101),
		run(t0.Add(time.Minute), 102, 0), reply(102), // the same time twice
		run(t0.Add(3*time.Minute), 103, 1), reply(103), // 12:04 missed
		// 12:02 never ran
	}}
	v := &userView{Agents: map[string]*agentView{"main": {Convs: map[int64]*convView{20: c}}}}
	iv := checkJobs(u, v, t0.Add(4*time.Minute+50*time.Second))
	for what, want := range map[string]int{"times due": 5, "run once": 2, "run twice": 1, "missed": 1, "lost": 1} {
		if got := countOf(iv, what); got != want {
			t.Errorf("%s: %d, want %d (%v)", what, got, want, iv.Violations)
		}
	}
}

func TestSoakCheckPromptsAndStream(t *testing.T) {
	u := soakTestUser()
	u.prompts = []*promptRecord{
		{Conv: 1, Kind: kindPrompt, Text: "soak-p-1", Accepted: true},
		{Conv: 1, Kind: kindPrompt, Text: "soak-p-2", Accepted: true},
		{Conv: 1, Kind: kindPrompt, Text: "soak-p-3", Accepted: true},
	}
	v := &userView{Agents: map[string]*agentView{"main": {Convs: map[int64]*convView{1: {ID: 1, Entries: entriesJSON(t, `[
		{"id":1,"kind":"owner_message","text":"soak-p-1","run_id":50},
		{"id":2,"kind":"assistant_message","text":"echo","run_id":50},
		{"id":3,"kind":"owner_message","text":"soak-p-2","run_id":51},
		{"id":4,"kind":"assistant_message","text":"echo","run_id":51},
		{"id":5,"kind":"assistant_message","text":"again","run_id":51},
		{"id":6,"kind":"assistant_message","run_id":51,"tool_calls":[{"id":"c","name":"shell"}]}]`)}}}}}
	iv := checkPrompts(u, v)
	if countOf(iv, "answered once") != 1 || countOf(iv, "answered twice") != 1 || countOf(iv, "unanswered") != 1 {
		t.Fatalf("prompts: %+v", iv)
	}
	u.stream = streamRecord{Seen: []int64{1, 2, 4, 5, 6, 4}, OutOfOrder: []string{"entry 4 after 6"}}
	st := checkStream(u, v)
	if countOf(st, "missed") != 1 || countOf(st, "seen twice") != 1 || len(st.Violations) != 3 {
		t.Fatalf("stream: %+v", st)
	}
}

func TestSoakCheckApprovals(t *testing.T) {
	u := soakTestUser()
	ok := &approvalRecord{Prompt: &promptRecord{Accepted: true}, Token: "soak-a-1", Decision: "allow_once", Decided: true}
	twice := &approvalRecord{Prompt: &promptRecord{Accepted: true}, Token: "soak-a-2", Decision: "deny", Decided: true}
	lost := &approvalRecord{Prompt: &promptRecord{Accepted: true}, Token: "soak-a-3", Decision: "deny", Decided: true}
	u.approvals = []*approvalRecord{ok, twice, lost}
	v := &userView{ApprovalsLog: "soak-a-1\n", Agents: map[string]*agentView{"appr": {Convs: map[int64]*convView{10: {ID: 10, Entries: entriesJSON(t, `[
		{"id":1,"kind":"approval","tool_call_id":"c1","arguments":{"command":"echo soak-a-1 >> approvals.log"}},
		{"id":2,"kind":"approval_decision","data":{"approval_id":1,"decision":"allow_once"}},
		{"id":3,"kind":"tool_result","tool_call_id":"c1","text":"exit 0"},
		{"id":4,"kind":"approval","tool_call_id":"c2","arguments":{"command":"echo soak-a-2 >> approvals.log"}},
		{"id":5,"kind":"approval_decision","data":{"approval_id":4,"decision":"deny"}},
		{"id":6,"kind":"approval_decision","data":{"approval_id":4,"decision":"deny"}},
		{"id":7,"kind":"approval","tool_call_id":"c3","arguments":{"command":"echo soak-a-3 >> approvals.log"}}]`)}}}}}
	iv := checkApprovals(u, v)
	if countOf(iv, "decided once") != 1 || countOf(iv, "decided twice") != 1 || countOf(iv, "lost") != 1 || countOf(iv, "ran once") != 1 {
		t.Fatalf("approvals: %+v", iv)
	}
}

func TestSoakCheckRequestsAndOrphans(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	faults := []fault{
		{Kind: faultCaddyRestart, Start: t0, End: t0.Add(3 * time.Second)},
		{Kind: faultDiskFill, User: "a", Start: t0.Add(time.Minute), End: t0.Add(2 * time.Minute)},
		{Kind: faultCPUBusy, Start: t0.Add(5 * time.Minute), End: t0.Add(6 * time.Minute)},
	}
	failures := []failure{
		{User: "a", Start: t0.Add(time.Second), End: t0.Add(2 * time.Second), What: "transport: EOF"},                 // Caddy restarting
		{User: "b", Start: t0.Add(5 * time.Minute), End: t0.Add(5*time.Minute + time.Second), Code: 502, What: "502"}, // a busy CPU explains nothing
	}
	answers := []finalAnswer{
		{User: "a", Route: "PUT /uploads/x", Start: t0.Add(90 * time.Second), End: t0.Add(91 * time.Second), Code: 507},
		{User: "b", Route: "PUT /uploads/y", Start: t0.Add(90 * time.Second), End: t0.Add(91 * time.Second), Code: 507},
		{User: "b", Route: "POST /prompt", Start: t0, End: t0.Add(soakRequestBudget)},
	}
	iv := checkRequests(answers, failures, map[int]int{503: 2}, faults)
	if countOf(iv, "failed with no fault") != 1 || countOf(iv, "507 while the disk was full") != 1 || countOf(iv, "unanswered") != 1 || len(iv.Violations) != 3 {
		t.Fatalf("requests: %+v", iv)
	}
	reg := []registrySandbox{{Name: "s1", User: "a", State: "running"}}
	objs := []dockerObject{
		{Kind: "container", Name: stack + "-s1-agent", Sandbox: "s1"},
		{Kind: "network", Name: stack + "-s1-net", Sandbox: "s1"},
		{Kind: "volume", Name: stack + "-s1-session", Sandbox: "s1"},
		{Kind: "volume", Name: stack + "-s1-workspace", Sandbox: "s1"},
		{Kind: "volume", Name: stack + "-gone-session", Sandbox: "gone"},
	}
	or := checkOrphans(objs, reg)
	if countOf(or, "orphan volumes") != 1 || len(or.Violations) != 1 {
		t.Fatalf("orphans: %+v", or)
	}
	or = checkOrphans(objs[:3], reg)
	if countOf(or, "missing") != 1 {
		t.Fatalf("a missing workspace volume: %+v", or)
	}
}
