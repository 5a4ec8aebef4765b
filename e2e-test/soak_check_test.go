//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
)

// The invariants, each a function from what the client recorded and what
// the stores hold (read after the load: the agents' conversations through
// their API, the registry and ledgers in Postgres, Docker's listings) to
// counts and violations. Pending lists what is still in flight (a run
// going, a reminder not yet due, a notification being retried): the checks
// are read again until nothing is, or the settle time runs out, when what
// is still pending becomes a violation. Fetching lives in soak_view_test.go;
// these functions only compare, so soak_unit_test.go can hold them to
// made-up stores.

// invariant is one invariant's outcome.
type invariant struct {
	Name       string
	Counts     []tally
	Violations []string
	Pending    []string
}

type tally struct {
	What string
	N    int
}

func (iv *invariant) add(what string, n int) { iv.Counts = append(iv.Counts, tally{what, n}) }

func (iv *invariant) violate(format string, args ...any) {
	iv.Violations = append(iv.Violations, fmt.Sprintf(format, args...))
}

func (iv *invariant) pending(format string, args ...any) {
	iv.Pending = append(iv.Pending, fmt.Sprintf(format, args...))
}

// merge adds o's counts (by name) and findings to iv: the per-user results
// of one invariant become the soak's.
func (iv *invariant) merge(o invariant) {
	for _, c := range o.Counts {
		found := false
		for i := range iv.Counts {
			if iv.Counts[i].What == c.What {
				iv.Counts[i].N += c.N
				found = true
			}
		}
		if !found {
			iv.Counts = append(iv.Counts, c)
		}
	}
	iv.Violations = append(iv.Violations, o.Violations...)
	iv.Pending = append(iv.Pending, o.Pending...)
}

// checkPrompts: every accepted prompt is in its conversation exactly once
// and its run has exactly one reply that ends it. Prompts are told apart by
// their text, unique in the soak (every prompt also carries a requestId, so
// a try after a lost answer is the same submission).
func checkPrompts(u *soakUser, v *userView) invariant {
	iv := invariant{Name: "prompts"}
	var sent, accepted, once, unanswered, twice, storedTwice, quiet int
	for _, p := range u.prompts {
		sent++
		if p.Accepted {
			accepted++
		}
		c := v.conv(p.Agent, p.Conv)
		if c == nil {
			if p.Accepted {
				iv.violate("%s: conversation %d of %s is gone (prompt %q)", u.ID, p.Conv, agentName(p.Agent), p.Text)
			}
			continue
		}
		var owners []soakEntry
		for _, e := range c.Entries {
			if e.Kind == "owner_message" && e.Text == p.Text {
				owners = append(owners, e)
			}
		}
		switch {
		case len(owners) > 1:
			storedTwice++
			iv.violate("%s: prompt %q is in %s's conversation %d %d times", u.ID, p.Text, agentName(p.Agent), p.Conv, len(owners))
			continue
		case len(owners) == 0 && p.Accepted:
			if c.busy(time.Now()) {
				iv.pending("%s: prompt %q not placed yet", u.ID, p.Text)
			} else {
				unanswered++
				iv.violate("%s: accepted prompt %q (%s) is not in the conversation", u.ID, p.Text, p.RequestID)
			}
			continue
		case len(owners) == 0:
			continue
		case !p.Accepted:
			quiet++ // it reached the agent; the client never heard: judged like the others
		}
		run := owners[0].RunID
		finals, errs := 0, []string{}
		for _, e := range c.Entries {
			if e.RunID != run {
				continue
			}
			if e.final() {
				finals++
			}
			if e.Kind == "error" {
				errs = append(errs, e.Text)
			}
		}
		switch {
		case finals == 1:
			once++
		case finals > 1:
			twice++
			iv.violate("%s: prompt %q (run %d) answered %d times", u.ID, p.Text, run, finals)
		case c.live(run):
			iv.pending("%s: run %d of prompt %q still going", u.ID, run, p.Text)
		default:
			unanswered++
			iv.violate("%s: prompt %q (run %d) ended without a reply: %s", u.ID, p.Text, run, strings.Join(errs, "; "))
		}
	}
	iv.add("sent", sent)
	iv.add("accepted", accepted)
	iv.add("answered once", once)
	iv.add("unanswered", unanswered)
	iv.add("answered twice", twice)
	iv.add("stored twice", storedTwice)
	iv.add("stored though the client heard nothing", quiet)
	return iv
}

func agentName(a string) string {
	if a == "" {
		return "main"
	}
	return a
}

// checkReminders: every reminder that was set fired (a reminder entry in
// its conversation) at least once, its notification was delivered, and the
// notification URL received it; second firings and deliveries are counted.
// A reminder whose set_reminder call was interrupted by a crash was never
// set (the call is not replayed; the model is told) and is not expected.
func checkReminders(u *soakUser, v *userView, now time.Time) (invariant, []string) {
	iv := invariant{Name: "reminders"}
	var lost []string
	var asked, set, notSet, fired, late, twice, notified, heldBack, received, receivedTwice int
	main := v.conv("", u.MainConv)
	for _, p := range u.prompts {
		if p.Kind != kindReminder || !p.Accepted {
			continue
		}
		asked++
		if main == nil {
			continue // checkPrompts reports it
		}
		var results []soakEntry
		firings, lateMs := 0, int64(0)
		for _, e := range main.Entries {
			switch {
			case e.Kind == "tool_result" && e.ToolName == "set_reminder" && strings.Contains(e.Text, p.Token):
				results = append(results, e)
			case e.Kind == "reminder" && strings.Contains(e.Text, p.Token):
				firings++
				var d struct {
					LateMs int64 `json:"late_ms"`
				}
				_ = json.Unmarshal(e.Data, &d)
				lateMs = max(lateMs, d.LateMs)
			}
		}
		var due time.Time
		ok := false
		for _, r := range results {
			if at, found := strings.CutPrefix(r.Text, "Reminder set for "); found && len(at) >= 20 {
				if d, err := time.Parse(time.RFC3339, at[:20]); err == nil {
					due, ok = d, true
				}
			}
		}
		switch {
		case len(results) > 1:
			iv.violate("%s: set_reminder for %s has %d results", u.ID, p.Token, len(results))
		case len(results) == 0:
			// checkPrompts judges the run; nothing was set.
			notSet++
			continue
		case !ok:
			notSet++ // interrupted by a crash, or refused: never set
			continue
		}
		set++
		switch {
		case firings == 0 && (due.After(now.Add(-30*time.Second)) || containsText(v.PendingReminders, p.Token)):
			iv.pending("%s: reminder %s (due %s) not fired yet", u.ID, p.Token, due.Format(time.TimeOnly))
			continue
		case firings == 0:
			lost = append(lost, p.Token)
			iv.violate("%s: reminder %s due %s never fired (lost)", u.ID, p.Token, due.Format(time.RFC3339))
			continue
		case firings > 1:
			twice++
		}
		fired++
		if lateMs > 30000 {
			late++
		}
		status := ""
		for _, n := range v.Notifications {
			if strings.Contains(n.Text, p.Token) {
				status = n.Status
			}
		}
		sinkSaw := 0
		for _, d := range v.Sink {
			if strings.Contains(d.Body, p.Token) {
				sinkSaw++
			}
		}
		switch {
		case status == "delivered":
			notified++
		case status == "pending":
			iv.pending("%s: reminder %s fired, its notification is being delivered", u.ID, p.Token)
			continue
		case status == "" && liveTaskWith(main, "reminder", p.Token):
			// Handed over again with backoff: the manager refuses a user's
			// notifications past a rate (30 at once, then one every 30 s).
			heldBack++
			continue
		case status == "":
			iv.violate("%s: reminder %s fired, and its notification was never handed to the manager", u.ID, p.Token)
			continue
		default:
			iv.violate("%s: reminder %s fired, but its notification is %q", u.ID, p.Token, status)
			continue
		}
		switch {
		case sinkSaw == 0:
			iv.violate("%s: reminder %s: notification delivered, but the notification URL received nothing", u.ID, p.Token)
		case sinkSaw > 1:
			receivedTwice++
			received++
		default:
			received++
		}
	}
	iv.add("asked", asked)
	iv.add("set", set)
	iv.add("not set (call interrupted)", notSet)
	iv.add("fired", fired)
	iv.add("fired over 30 s late", late)
	iv.add("lost", len(lost))
	iv.add("fired twice", twice)
	iv.add("notified", notified)
	iv.add("notification still being handed over", heldBack)
	iv.add("received", received)
	iv.add("received twice", receivedTwice)
	return iv, lost
}

// liveTaskWith reports whether a live task of kind in c has sub in its
// checkpoint (a reminder's text, say).
func liveTaskWith(c *convView, kind, sub string) bool {
	for _, t := range c.Tasks {
		if t.Kind == kind && strings.Contains(string(t.Checkpoint), sub) {
			return true
		}
	}
	return false
}

func containsText(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// jobRun is a job_run entry's data.
type jobRun struct {
	Job     int64     `json:"job"`
	Due     time.Time `json:"due"`
	LateMs  int64     `json:"late_ms"`
	Missed  int       `json:"missed"`
	Skipped bool      `json:"skipped"`
	Run     int64     `json:"run"`
}

// checkJobs: the job ("* * * * *", made before the load) ran every minute
// from its first time to 40 s before now exactly once, and every run was
// answered. A time counted as missed by a later run (the agent was down
// the whole minute), or skipped because the last run had not ended, was
// not run: both are violations here, where nothing is down for a minute.
func checkJobs(u *soakUser, v *userView, now time.Time) invariant {
	iv := invariant{Name: "jobs"}
	c := v.conv("", u.JobConv)
	if c == nil {
		iv.violate("%s: the job's conversation %d is gone", u.ID, u.JobConv)
		return iv
	}
	var runs []jobRun
	for _, e := range c.Entries {
		var r jobRun
		if e.Kind == "job_run" && json.Unmarshal(e.Data, &r) == nil && r.Job == u.JobID {
			runs = append(runs, r)
		}
	}
	horizon := now.Add(-40 * time.Second)
	var due, once, late, answered, twice, missed, skipped, lost int
	for t := u.JobFirst; !t.After(horizon); t = t.Add(time.Minute) {
		due++
		var ran []jobRun
		wasSkipped, wasMissed := false, false
		for _, r := range runs {
			switch {
			case r.Due.Equal(t) && r.Skipped:
				wasSkipped = true
			case r.Due.Equal(t):
				ran = append(ran, r)
			case r.Due.Before(t) && !r.Skipped && !t.After(r.Due.Add(time.Duration(r.Missed)*time.Minute)):
				wasMissed = true
			}
		}
		switch {
		case len(ran) > 1:
			twice++
			iv.violate("%s: job time %s ran %d times", u.ID, t.Format(time.TimeOnly), len(ran))
		case len(ran) == 1:
			once++
			if ran[0].LateMs > 30000 {
				late++
			}
			finals := 0
			for _, e := range c.Entries {
				if e.RunID == ran[0].Run && e.final() {
					finals++
				}
			}
			switch {
			case finals == 1:
				answered++
			case finals > 1:
				iv.violate("%s: job time %s (run %d) answered %d times", u.ID, t.Format(time.TimeOnly), ran[0].Run, finals)
			case c.live(ran[0].Run):
				iv.pending("%s: job run %d still going", u.ID, ran[0].Run)
			default:
				iv.violate("%s: job time %s (run %d) ended without a reply", u.ID, t.Format(time.TimeOnly), ran[0].Run)
			}
		case wasSkipped:
			skipped++
			iv.violate("%s: job time %s skipped (its last run had not ended)", u.ID, t.Format(time.TimeOnly))
		case wasMissed:
			missed++
			iv.violate("%s: job time %s missed (counted by a later run)", u.ID, t.Format(time.TimeOnly))
		case t.After(now.Add(-90 * time.Second)):
			iv.pending("%s: job time %s not run yet", u.ID, t.Format(time.TimeOnly))
		default:
			lost++
			iv.violate("%s: job time %s never ran", u.ID, t.Format(time.TimeOnly))
		}
	}
	iv.add("times due", due)
	iv.add("run once", once)
	iv.add("run over 30 s late", late)
	iv.add("answered", answered)
	iv.add("run twice", twice)
	iv.add("missed", missed)
	iv.add("skipped", skipped)
	iv.add("lost", lost)
	return iv
}

// approvalEntry is an approval entry's data.
type approvalEntry struct {
	ID        int64
	CallID    string
	Arguments string
}

type decisionData struct {
	ApprovalID int64  `json:"approval_id"`
	Decision   string `json:"decision"`
}

// checkApprovals: every approval the store holds was decided exactly once,
// as the owner decided it (not lost, not expired, not decided twice), and
// its call has exactly one result; the command ran exactly once when
// allowed (at most once when a crash interrupted it: the shell is not
// replayed) and never when denied.
func checkApprovals(u *soakUser, v *userView) invariant {
	iv := invariant{Name: "approvals"}
	c := v.conv("appr", u.ApprConv)
	if c == nil {
		iv.violate("%s: appr's conversation %d is gone", u.ID, u.ApprConv)
		return iv
	}
	var asked []approvalEntry
	decisions := map[int64][]string{}
	results := map[string][]soakEntry{}
	for _, e := range c.Entries {
		switch e.Kind {
		case "approval":
			asked = append(asked, approvalEntry{ID: e.ID, CallID: e.ToolCallID, Arguments: string(e.Arguments)})
		case "approval_decision":
			var d decisionData
			if json.Unmarshal(e.Data, &d) == nil {
				decisions[d.ApprovalID] = append(decisions[d.ApprovalID], d.Decision)
			}
		case "tool_result":
			results[e.ToolCallID] = append(results[e.ToolCallID], e)
		}
	}
	byToken := map[string]*approvalRecord{}
	for _, a := range u.approvals {
		byToken[a.Token] = a
	}
	seen := map[string]bool{}
	var once, allowed, denied, ranOnce, lost, twice, ranTwice, expired int
	for _, a := range asked {
		var rec *approvalRecord
		for tok, r := range byToken {
			if strings.Contains(a.Arguments, tok) {
				rec = r
				seen[tok] = true
			}
		}
		if rec == nil {
			iv.violate("%s: approval %d (%s) is nobody's call", u.ID, a.ID, a.Arguments)
			continue
		}
		ds := decisions[a.ID]
		switch {
		case len(ds) > 1:
			twice++
			iv.violate("%s: approval %d (%s) decided %d times: %v", u.ID, a.ID, rec.Token, len(ds), ds)
			continue
		case len(ds) == 0:
			lost++
			iv.violate("%s: approval %d (%s) never decided; the owner decided %s: %v (%s)", u.ID, a.ID, rec.Token, rec.Decision, rec.Decided, rec.Note)
			continue
		case ds[0] == "expired":
			expired++
			iv.violate("%s: approval %d (%s) expired; the owner decided %s: %v (%s)", u.ID, a.ID, rec.Token, rec.Decision, rec.Decided, rec.Note)
			continue
		case ds[0] != rec.Decision:
			iv.violate("%s: approval %d (%s) stored %s, the owner decided %s", u.ID, a.ID, rec.Token, ds[0], rec.Decision)
			continue
		}
		once++
		if ds[0] == "deny" {
			denied++
		} else {
			allowed++
		}
		res := results[a.CallID]
		ran := strings.Count(v.ApprovalsLog, rec.Token)
		interrupted := len(res) == 1 && strings.Contains(res[0].Text, "interrupted")
		switch {
		case len(res) > 1:
			iv.violate("%s: approval %d (%s): the call has %d results", u.ID, a.ID, rec.Token, len(res))
		case len(res) == 0 && c.busy(time.Now()):
			iv.pending("%s: approval %d (%s): the call has no result yet", u.ID, a.ID, rec.Token)
			continue
		case len(res) == 0:
			iv.violate("%s: approval %d (%s): the call has no result", u.ID, a.ID, rec.Token)
		}
		switch {
		case ran > 1:
			ranTwice++
			iv.violate("%s: approval %d (%s): the command ran %d times", u.ID, a.ID, rec.Token, ran)
		case ds[0] == "deny" && ran != 0:
			iv.violate("%s: approval %d (%s) was denied, and the command ran", u.ID, a.ID, rec.Token)
		case ds[0] == "allow_once" && ran == 0 && !interrupted && len(res) == 1:
			iv.violate("%s: approval %d (%s) was allowed, and the command did not run: %q", u.ID, a.ID, rec.Token, res[0].Text)
		case ds[0] == "allow_once" && ran == 1:
			ranOnce++
		}
	}
	for _, a := range u.approvals {
		if a.Prompt.Accepted && !seen[a.Token] {
			if c.busy(time.Now()) {
				iv.pending("%s: the call %s has not asked yet", u.ID, a.Token)
			} else {
				lost++
				iv.violate("%s: the call %s was accepted, and no approval was stored (%s)", u.ID, a.Token, a.Note)
			}
		}
	}
	iv.add("asked", len(asked))
	iv.add("decided once", once)
	iv.add("allowed", allowed)
	iv.add("denied", denied)
	iv.add("ran once", ranOnce)
	iv.add("lost", lost)
	iv.add("expired", expired)
	iv.add("decided twice", twice)
	iv.add("ran twice", ranTwice)
	return iv
}

// checkMessages: every message ann sent reached bob exactly once (outside
// text in a conversation of bob's), and ann got bob's reply exactly once.
func checkMessages(u *soakUser, v *userView) invariant {
	iv := invariant{Name: "messages"}
	bob := v.Agents["bob"]
	var sent, once, lost, twice, replies int
	for _, p := range u.prompts {
		if p.Kind != kindMessage || !p.Accepted {
			continue
		}
		sent++
		got := 0
		if bob != nil {
			for _, c := range bob.Convs {
				if !strings.HasPrefix(c.Title, "message from ann") {
					continue
				}
				for _, e := range c.Entries {
					if e.Kind == "outside_text" && strings.Contains(e.Text, p.Token) {
						got++
					}
				}
			}
		}
		ann := v.conv("ann", p.Conv)
		reply := 0
		if ann != nil {
			for _, e := range ann.Entries {
				if e.Kind == "outside_text" && strings.Contains(string(e.Data), `"from_agent":"bob"`) {
					reply++
				}
			}
		}
		inFlight := ann != nil && ann.busy(time.Now())
		switch {
		case got > 1:
			twice++
			iv.violate("%s: message %s delivered to bob %d times", u.ID, p.Token, got)
		case got == 0 && inFlight:
			iv.pending("%s: message %s not delivered yet", u.ID, p.Token)
			continue
		case got == 0:
			lost++
			iv.violate("%s: message %s never reached bob", u.ID, p.Token)
			continue
		default:
			once++
		}
		switch {
		case reply == 1:
			replies++
		case reply > 1:
			iv.violate("%s: message %s: bob's reply reached ann %d times", u.ID, p.Token, reply)
		case inFlight:
			iv.pending("%s: message %s: bob's reply not back yet", u.ID, p.Token)
		default:
			iv.violate("%s: message %s: bob's reply never reached ann", u.ID, p.Token)
		}
	}
	iv.add("sent", sent)
	iv.add("delivered once", once)
	iv.add("lost", lost)
	iv.add("delivered twice", twice)
	iv.add("replies back once", replies)
	return iv
}

// checkUploads: every upload answered 201 reads back byte for byte; a 507
// (the disk was full) stored nothing the client relies on.
func checkUploads(u *soakUser, v *userView) invariant {
	iv := invariant{Name: "uploads"}
	var accepted, readBack, full, other int
	for _, up := range u.uploads {
		switch up.Code {
		case 201:
			accepted++
			if got := v.Uploads[up.Path]; got == up.SHA256 {
				readBack++
			} else {
				iv.violate("%s: upload %s (%d bytes) reads back as %q", u.ID, up.Path, up.Size, got)
			}
		case 507:
			full++
		default:
			other++
		}
	}
	iv.add("accepted", accepted)
	iv.add("read back", readBack)
	iv.add("refused, disk full (507)", full)
	iv.add("unanswered or refused otherwise", other)
	return iv
}

// checkStream: the event stream of main's conversation, across all its
// reconnections (each resuming after the last entry it saw), delivered
// every stored entry exactly once, in order.
func checkStream(u *soakUser, v *userView) invariant {
	iv := invariant{Name: "event streams"}
	c := v.conv("", u.MainConv)
	seen := map[int64]int{}
	for _, id := range u.stream.Seen {
		seen[id]++
	}
	twice := 0
	for id, n := range seen {
		if n > 1 {
			twice++
			iv.violate("%s: the stream sent entry %d %d times", u.ID, id, n)
		}
	}
	for _, o := range u.stream.OutOfOrder {
		iv.violate("%s: the stream sent %s", u.ID, o)
	}
	var missed []int64
	if c != nil {
		for _, e := range c.Entries {
			if seen[e.ID] == 0 {
				missed = append(missed, e.ID)
			}
		}
	}
	if len(missed) > 0 {
		iv.violate("%s: the stream never sent entries %v of conversation %d (%d stored)", u.ID, firstN(missed, 20), u.MainConv, len(c.Entries))
	}
	iv.add("connections", u.stream.Connections)
	iv.add("cut short", u.stream.Cuts)
	iv.add("entries seen", len(seen))
	iv.add("missed", len(missed))
	iv.add("seen twice", twice)
	iv.add("out of order", len(u.stream.OutOfOrder))
	return iv
}

func firstN[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// checkSpend: the gateway's ledger (Postgres: one row a model call,
// reserved at its worst case before the call, settled to its usage after)
// equals the calls made. The calls made are counted twice over: by the
// gateway's usage table (every call that reported usage) and by the agents
// (each reply they kept, in every conversation's usage). So: rows settled
// at usage = the gateway's calls, and their cost = the cost of the
// gateway's tokens; no agent kept a call the ledger lacks; and a row left
// open or settled at its worst case (no usage: the call was cut) happened
// just before a fault that can cut a call. Calls charged whose reply no
// agent kept (the agent died before committing it, and asked again) are
// counted, not judged.
func checkSpend(u *soakUser, v *userView, faults []fault, now time.Time) invariant {
	iv := invariant{Name: "spend"}
	cutBy := func(r spendRow) bool {
		for _, f := range faults {
			if f.explains(u.ID, r.At, r.At.Add(2*time.Minute), 0) {
				return true
			}
		}
		return false
	}
	var usageRows, worstRows, openRows int
	var ledgerCost int64
	for _, r := range v.Spend {
		switch {
		case !r.Settled && now.Sub(r.At) < 30*time.Second:
			iv.pending("%s: spend row %d open (%s)", u.ID, r.ID, r.At.Format(time.TimeOnly))
		case !r.Settled:
			openRows++
			if !cutBy(r) {
				iv.violate("%s: spend row %d (%s, %s) was never settled, and no fault explains it", u.ID, r.ID, r.Model, r.At.Format(time.TimeOnly))
			}
		case r.Cost != nil && *r.Cost == r.Reserved:
			worstRows++
			if !cutBy(r) {
				iv.violate("%s: spend row %d (%s, %s) settled at its worst case (no usage), and no fault explains it", u.ID, r.ID, r.Model, r.At.Format(time.TimeOnly))
			}
		default:
			usageRows++
			if r.Cost != nil {
				ledgerCost += *r.Cost
			}
		}
	}
	var gwCalls int64
	var gwCost float64
	for _, g := range v.GatewayUsage {
		gwCalls += g.Calls
		p, ok := v.Prices[g.Model]
		if !ok {
			iv.violate("%s: the gateway served %s, which has no price", u.ID, g.Model)
		}
		gwCost += float64(g.InputTokens)*p.Input + float64(g.OutputTokens)*p.Output
	}
	var agentCalls int64
	for _, a := range v.Agents {
		for _, c := range a.Convs {
			for _, m := range c.Usage {
				agentCalls += m.Calls
			}
		}
	}
	if int64(usageRows) != gwCalls {
		iv.violate("%s: %d ledger rows settled at their usage, the gateway counted %d calls", u.ID, usageRows, gwCalls)
	}
	// Each row's cost is rounded up to a micro-dollar on its own.
	if d := float64(ledgerCost) - gwCost; d < -0.5 || d > float64(usageRows)+0.5 {
		iv.violate("%s: the ledger charged %d µ$ for calls whose tokens cost %.1f µ$", u.ID, ledgerCost, gwCost)
	}
	// A call an agent kept has a row: at its usage, or (settle or the
	// usage record cut by a fault) open or at its worst case.
	if agentCalls > int64(usageRows+worstRows+openRows) {
		iv.violate("%s: the agents kept %d calls, the ledger has %d rows", u.ID, agentCalls, len(v.Spend))
	}
	iv.add("ledger rows", len(v.Spend))
	iv.add("settled at usage", usageRows)
	iv.add("settled at worst case (call cut)", worstRows)
	iv.add("left open (call cut)", openRows)
	iv.add("gateway calls", int(gwCalls))
	iv.add("calls the agents kept", int(agentCalls))
	iv.add("rows whose reply no agent kept (cut, asked again)", max(len(v.Spend)-int(agentCalls), 0))
	iv.add("ledger µ$", int(ledgerCost))
	return iv
}

// checkOrphans: every labelled Docker object of the stack belongs to a
// sandbox the registry knows, under the name it gives (one container
// <stack>-<name>-agent, one network -net, volumes -session and
// -workspace), and the registry's sandboxes have their network and volumes.
func checkOrphans(objects []dockerObject, registry []registrySandbox) invariant {
	iv := invariant{Name: "orphans"}
	known := map[string]registrySandbox{}
	for _, r := range registry {
		known[r.Name] = r
	}
	want := func(kind, sandbox string) []string {
		switch kind {
		case "container":
			return []string{stack + "-" + sandbox + "-agent"}
		case "network":
			return []string{stack + "-" + sandbox + "-net"}
		}
		return []string{stack + "-" + sandbox + "-session", stack + "-" + sandbox + "-workspace"}
	}
	orphans := map[string]int{}
	stale := 0
	have := map[string]map[string]bool{} // sandbox -> object names
	for _, o := range objects {
		r, ok := known[o.Sandbox]
		switch {
		case !ok:
			orphans[o.Kind]++
			iv.violate("orphan %s %s: sandbox %q is not in the registry", o.Kind, o.Name, o.Sandbox)
			continue
		case !containsString(want(o.Kind, o.Sandbox), o.Name):
			orphans[o.Kind]++
			iv.violate("orphan %s %s: not a name of sandbox %s", o.Kind, o.Name, o.Sandbox)
			continue
		case o.Kind == "container" && r.Container != "" && !strings.HasPrefix(o.ID, r.Container):
			stale++ // the sandbox's own container under its name; the registry's id lags
		}
		if have[o.Sandbox] == nil {
			have[o.Sandbox] = map[string]bool{}
		}
		have[o.Sandbox][o.Name] = true
	}
	missing := 0
	for _, r := range registry {
		if r.User == "" || r.State == "provisioning" || r.State == "failed" {
			continue
		}
		for _, kind := range []string{"network", "volume"} {
			for _, name := range want(kind, r.Name) {
				if !have[r.Name][name] {
					missing++
					iv.violate("sandbox %s of %s (%s) has no %s %s", r.Name, r.User, r.State, kind, name)
				}
			}
		}
	}
	iv.add("sandboxes", len(registry))
	iv.add("objects", len(objects))
	iv.add("orphan containers", orphans["container"])
	iv.add("orphan networks", orphans["network"])
	iv.add("orphan volumes", orphans["volume"])
	iv.add("missing", missing)
	iv.add("containers whose id the registry has not caught up with", stale)
	return iv
}

func containsString(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// checkRequests: every request got an answer that is not a 5xx, after
// waiting out any 503 or 429 with Retry-After (documented); a try that
// failed otherwise (a transport error, a timeout, a 502, a stream cut) is
// explained only by a fault that could cause it (the whole stack's, or
// one of that user's sandbox) around that time; a 507 only by that user's
// disk being filled.
func checkRequests(answers []finalAnswer, failures []failure, retryAfter map[int]int, faults []fault) invariant {
	iv := invariant{Name: "requests"}
	explained := func(user string, start, end time.Time, code int) bool {
		for _, f := range faults {
			if f.explains(user, start, end, code) {
				return true
			}
		}
		return false
	}
	var answered, unanswered, full int
	refused := map[int]int{}
	for _, a := range answers {
		if a.Code >= 400 && a.Code < 500 {
			refused[a.Code]++
		}
		switch {
		case a.Code == 0:
			unanswered++
			iv.violate("%s %s (from %s, %d tries) got no answer within %v", a.User, a.Route, a.Start.Format(time.TimeOnly), a.Tries, a.End.Sub(a.Start).Round(time.Second))
		case a.Code == 507 && explained(a.User, a.Start, a.End, 507):
			answered++
			full++
		case a.Code >= 500:
			iv.violate("%s %s answered %d at %s, with no disk fill to explain it", a.User, a.Route, a.Code, a.End.Format(time.TimeOnly))
		default:
			answered++
		}
	}
	byWhat := map[string]int{}
	var unexplained []string
	for _, f := range failures {
		what := f.What
		if f.Code != 0 {
			what = fmt.Sprint(f.Code)
		} else if strings.HasPrefix(what, "transport") {
			what = "transport"
		} else if strings.HasPrefix(what, "stream cut") {
			what = "stream cut"
		}
		if explained(f.User, f.Start, f.End, f.Code) {
			byWhat[what]++
			continue
		}
		unexplained = append(unexplained, fmt.Sprintf("%s %s at %s: %s", f.User, f.Route, f.End.Format("15:04:05.000"), f.What))
	}
	for _, s := range firstN(unexplained, 30) {
		iv.violate("a try failed with no fault to explain it: %s", s)
	}
	if len(unexplained) > 30 {
		iv.violate("… and %d more unexplained failures", len(unexplained)-30)
	}
	iv.add("requests", len(answers))
	iv.add("answered", answered)
	iv.add("507 while the disk was full", full)
	codes := make([]int, 0, len(refused))
	for c := range refused {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	for _, c := range codes {
		iv.add(fmt.Sprintf("answered %d", c), refused[c])
	}
	iv.add("503 with Retry-After (waited out)", retryAfter[503])
	iv.add("429 with Retry-After (waited out)", retryAfter[429])
	kinds := make([]string, 0, len(byWhat))
	for k := range byWhat {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		iv.add("failed during a fault: "+k, byWhat[k])
	}
	iv.add("failed with no fault", len(unexplained))
	iv.add("unanswered", unanswered)
	return iv
}
