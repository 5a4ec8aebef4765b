//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// approvalTTL is AFFIDO_APPROVAL_TTL as run.sh sets it for the stack.
func approvalTTL(t *testing.T) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(env("AFFIDO_APPROVAL_TTL", "2m"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkWakeIsExpiry checks that the wake time the agent reported (stored
// by the manager) is approval a's expiry, to the second.
func checkWakeIsExpiry(t *testing.T, user string, a approvalView) {
	t.Helper()
	reported := psql(t, "SELECT coalesce(extract(epoch FROM reported_wake_at)::bigint::text, 'none') FROM sandboxes WHERE user_id = '"+user+"'")
	if at, err := strconv.ParseInt(reported, 10, 64); err != nil || at < a.ExpiresAt.Unix()-1 || at > a.ExpiresAt.Unix()+1 {
		t.Fatalf("the agent's reported wake time is %q, want the approval's expiry %v", reported, a.ExpiresAt.Unix())
	}
}

// An approval nobody decides expires on its own, across a manager restart
// (SIGKILL) and with the sandbox gone through every idle tier to removal:
// the expiry is the agent's reported wake time, the manager brings the
// sandbox back for it, and the run records "expired" (once), tells the
// model the call was refused because it expired, and answers. The approval
// is no longer pending, a late decision is 409, and the command never ran.
func TestApprovalExpiresAcrossManagerRestart(t *testing.T) {
	user, tok := newUser(t, "appr-expiry")
	reportOnFailure(t, user)
	ttl := approvalTTL(t)
	before := time.Now()
	a := ask(t, user, tok, "run: echo ran >> expired.txt")
	after := time.Now() // the ask includes the sandbox's bring-up: seconds on a loaded machine
	if a.ExpiresAt.Before(before.Add(ttl-time.Second)) || a.ExpiresAt.After(after.Add(ttl+time.Second)) {
		t.Fatalf("approval %d expires at %v, want %v after it was asked (between %v and %v)", a.ID, a.ExpiresAt, ttl,
			before.Add(ttl).Format(time.TimeOnly), after.Add(ttl).Format(time.TimeOnly))
	}
	killManager(t)
	docker(t, "start", managerName())
	waitManagerHealthy(t)
	if got := pendingApprovals(t, user, tok); len(got) != 1 || got[0].ID != a.ID || !got[0].ExpiresAt.Equal(a.ExpiresAt) {
		t.Fatalf("after a manager restart: %+v", got)
	}
	waitStatus(t, user, "missing", 60*time.Second) // paused, stopped, removed
	gone := time.Now()
	checkWakeIsExpiry(t, user, a)
	if time.Now().After(a.ExpiresAt) {
		t.Fatalf("the approval expired before the sandbox was removed: raise AFFIDO_APPROVAL_TTL (%v)", ttl)
	}
	// No request until the manager has woken the sandbox for the expiry
	// (its audit trail, read in Postgres): whatever runs then, the
	// manager's wake did.
	waitUntil(t, time.Until(a.ExpiresAt)+100*time.Second, "the manager to wake "+user+" for the approval's expiry", func() bool {
		return psql(t, fmt.Sprintf("SELECT count(*) FROM audit_events WHERE user_id = '%s' AND kind = 'sandbox.woken' AND at > '%s'",
			user, gone.UTC().Format(time.RFC3339Nano))) != "0"
	})

	type traced struct {
		entry
		At   time.Time       `json:"at"`
		Data json.RawMessage `json:"data"`
	}
	var items []traced
	waitUntil(t, 60*time.Second, "the expired run's answer", func() bool {
		var in struct {
			Entries struct {
				Items []traced `json:"items"`
			} `json:"entries"`
		}
		if err := json.Unmarshal([]byte(mustGet(t, user, tok, "/inspect?limit=1000").Body), &in); err != nil {
			t.Fatal(err)
		}
		items = in.Entries.Items
		decided := false // the model's reply to the refusal comes after the expiry's record
		for _, e := range items {
			if e.RunID != a.RunID {
				continue
			}
			if e.Kind == "approval_decision" {
				decided = true
			} else if decided && e.Kind == "assistant_message" {
				return true
			}
		}
		return false
	})
	var expiries, refusals int
	var reply string
	for _, e := range items {
		if e.RunID != a.RunID {
			continue
		}
		switch e.Kind {
		case "approval_decision":
			var d struct {
				ApprovalID int64  `json:"approval_id"`
				Decision   string `json:"decision"`
			}
			if json.Unmarshal(e.Data, &d) != nil || d.ApprovalID != a.ID || d.Decision != "expired" {
				t.Fatalf("a decision entry that is not the expiry: %s %s", e.Text, e.Data)
			}
			if e.At.Before(a.ExpiresAt) || e.At.After(a.ExpiresAt.Add(10*time.Second)) {
				t.Fatalf("expired at %v: want it at the expiry %v, on the manager's wake", e.At, a.ExpiresAt)
			}
			expiries++
		case "tool_result":
			if !strings.Contains(e.Text, "[expired]") || !e.IsError {
				t.Fatalf("the model read %q", e.Text)
			}
			refusals++
		case "tool_call":
			t.Fatalf("the expired call ran: %+v", e.entry)
		case "assistant_message":
			reply = e.Text
		}
	}
	if expiries != 1 || refusals != 1 || !strings.Contains(reply, "[expired]") {
		t.Fatalf("%d expiry records, %d refusals, reply %q; want one each, the reply reading the refusal", expiries, refusals, reply)
	}
	if got := pendingApprovals(t, user, tok); len(got) != 0 {
		t.Fatalf("still pending after the expiry: %+v", got)
	}
	if r := post(t, user, tok, fmt.Sprintf("/approvals/%d", a.ID), `{"decision":"allow_once"}`); r.Code != 409 {
		t.Fatalf("a decision after the expiry: %d %s", r.Code, r.Body)
	}
	if r := request(t, "GET", "/u/"+user+"/file?path=expired.txt", bearer(tok)); r.Code != 404 {
		t.Fatalf("the expired command ran: %d %s", r.Code, r.Body)
	}
	// Once: another manager restart and the sandbox going down and up again
	// write nothing more.
	count := len(items)
	killManager(t)
	docker(t, "start", managerName())
	waitManagerHealthy(t)
	if n := inspectOf(t, user, tok).EntryCount; n != int64(count) {
		t.Fatalf("%d entries after another restart, were %d", n, count)
	}
}
