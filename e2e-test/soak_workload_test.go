//go:build e2e

package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// The workload: for every user, one loop of operations chosen at random
// (prompts, reminders, shell calls that wait for an approval, messages
// from one agent to another, uploads, reads), a little apart, plus an event
// stream of main's conversation that connects, holds and drops like a web
// client tab. Every operation is written down as the client saw it, for the
// invariants to hold against the stores.
//
// Each user's sandbox has these agents: main (prompts and reminders, in
// one conversation, and a job in its own), appr (shell calls, which ask
// the owner by default), ann (sends each message to bob from a fresh
// conversation: bob's reply is outside text, after which ann's next
// send_message would ask) and bob (answers them).

// Prompt kinds, as the workload sent them.
const (
	kindPrompt   = "prompt"
	kindReminder = "reminder"
	kindApproval = "approval"
	kindMessage  = "message"
)

// promptRecord is one prompt the client sent.
type promptRecord struct {
	Agent     string // "" for main
	Conv      int64
	Kind      string
	Text      string // as sent: unique in the soak
	Token     string // the unique part the stores are searched for
	RequestID string
	Accepted  bool // 200 or 202
	Code      int  // the final answer's status (0: unanswered)
	Sent      time.Time
}

// approvalRecord is one shell call the client asked for and decided.
type approvalRecord struct {
	Prompt   *promptRecord
	Token    string
	ID       int64  // the approval's id, once the client saw it
	Decision string // allow_once or deny
	Decided  bool   // 200, or 409 after an earlier try that got no answer
	Note     string // what went wrong on the client's side, if anything
}

// uploadRecord is one upload.
type uploadRecord struct {
	Path   string // under the workspace, e.g. uploads/soak/3.bin
	SHA256 string
	Size   int
	Code   int // 201, 507 (disk full), …
}

// streamRecord is what the user's event stream of main's conversation saw.
type streamRecord struct {
	Seen        []int64  // entry ids, in the order they came
	OutOfOrder  []string // an id not above the one before it
	Connections int
	Cuts        int
}

// soakUser is one user of the soak and the client's record of them.
type soakUser struct {
	ID, Token string
	Sandbox   string // what its Docker objects are named after
	MainConv  int64
	ApprConv  int64
	JobID     int64
	JobConv   int64
	JobFirst  time.Time  // the job's first time
	rng       *rand.Rand // the workload's choices
	streamRng *rand.Rand // the event stream's
	n         int        // operations so far (names them)

	mu        sync.Mutex
	prompts   []*promptRecord
	approvals []*approvalRecord
	uploads   []*uploadRecord
	stream    streamRecord
}

func (u *soakUser) container() string { return stack + "-" + u.Sandbox + "-agent" }

// path is a route of agent's ("" for main) under u's prefix.
func (u *soakUser) path(agent, route string) string {
	if agent == "" {
		return "/u/" + u.ID + route
	}
	return "/u/" + u.ID + "/agents/" + agent + route
}

func (u *soakUser) next() int { u.n++; return u.n }

// token makes a unique word for the stores to be searched for.
func (u *soakUser) token(kind string, n int) string {
	return fmt.Sprintf("soak-%s-%s-%d-%04x", kind, u.ID, n, u.rng.Uint32()&0xffff)
}

// workload runs u's operations until ctx ends; the one in progress then
// is finished first.
func (s *soak) workload(ctx context.Context, u *soakUser) {
	type op struct {
		weight int
		run    func()
	}
	ops := []op{
		{30, func() { s.opPrompt(u) }},
		{10, func() { s.opReminder(u) }},
		{10, func() { s.opApproval(u) }},
		{8, func() { s.opMessage(u) }},
		{10, func() { s.opUpload(u) }},
		{10, func() { s.opRead(u) }},
	}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	for ctx.Err() == nil {
		pick := u.rng.IntN(total)
		for _, o := range ops {
			if pick < o.weight {
				o.run()
				break
			}
			pick -= o.weight
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(500+u.rng.IntN(2500)) * time.Millisecond):
		}
	}
}

// promptResult is what the client reads from a prompt's answer.
type promptResult struct {
	Status     string        `json:"status"`
	WaitingFor *approvalView `json:"waiting_for"`
}

// sendPrompt sends text to agent's conversation conv with a requestId (so
// a try after a lost answer cannot start a second run) and records it.
func (s *soak) sendPrompt(u *soakUser, agent string, conv int64, kind, token, text string, wait bool) (*promptRecord, promptResult) {
	n := u.next()
	rec := &promptRecord{Agent: agent, Conv: conv, Kind: kind, Text: text, Token: token,
		RequestID: fmt.Sprintf("soak-%s-%d", u.ID, n), Sent: time.Now()}
	body, _ := json.Marshal(map[string]any{"text": text, "requestId": rec.RequestID, "conversation": conv, "wait": wait})
	timeout := soakAttemptTimeout
	if wait {
		timeout = soakWaitTimeout
	}
	r, _ := s.client.do(soakReq{user: u.ID, token: u.Token, method: "POST", path: u.path(agent, "/prompt"), body: body, timeout: timeout})
	rec.Code = r.Code
	rec.Accepted = r.Code == 200 || r.Code == 202
	var res promptResult
	if rec.Accepted {
		_ = json.Unmarshal([]byte(r.Body), &res)
	} else if r.Code != 0 {
		s.logf("%s: prompt %q refused: %d %.200s", u.ID, text, r.Code, r.Body)
	}
	u.mu.Lock()
	u.prompts = append(u.prompts, rec)
	u.mu.Unlock()
	return rec, res
}

// opPrompt: a prompt to main; one in five is slow (the fake model answers
// after 0.5 to 3 s, so runs are in flight when faults strike); half wait
// for the reply.
func (s *soak) opPrompt(u *soakUser) {
	tok := u.token("p", u.n+1)
	text := tok
	if u.rng.IntN(5) == 0 {
		text = fmt.Sprintf("slow %d: %s", 500+u.rng.IntN(2500), tok)
	}
	s.sendPrompt(u, "", u.MainConv, kindPrompt, tok, text, u.rng.IntN(2) == 0)
}

// soakReminderMax bounds how far ahead a reminder is set: the checks wait
// that long after the load before they judge the reminders.
const soakReminderMax = 75 * time.Second

// opReminder: main sets a reminder 15 to 75 s ahead (a rule allows
// set_reminder).
func (s *soak) opReminder(u *soakUser) {
	tok := u.token("r", u.n+1)
	in := 15 + u.rng.IntN(int(soakReminderMax/time.Second)-15+1)
	s.sendPrompt(u, "", u.MainConv, kindReminder, tok, fmt.Sprintf("remind in %ds: %s", in, tok), u.rng.IntN(2) == 0)
}

// opApproval: appr runs a shell command that appends a unique word to
// approvals.log; the call asks, and the owner allows it once (7 in 10) or
// denies it. Approvals the client could not decide earlier are decided
// first, so appr's conversation never stays blocked.
func (s *soak) opApproval(u *soakUser) {
	s.decideLeftovers(u)
	tok := u.token("a", u.n+1)
	rec, res := s.sendPrompt(u, "appr", u.ApprConv, kindApproval, tok, "run: echo "+tok+" >> approvals.log", true)
	a := &approvalRecord{Prompt: rec, Token: tok, Decision: "allow_once"}
	if u.rng.IntN(10) >= 7 {
		a.Decision = "deny"
	}
	u.mu.Lock()
	u.approvals = append(u.approvals, a)
	u.mu.Unlock()
	if !rec.Accepted {
		a.Note = "prompt not accepted"
		return
	}
	if res.WaitingFor != nil && strings.Contains(string(res.WaitingFor.Arguments), tok) {
		a.ID = res.WaitingFor.ID
	} else {
		a.ID = s.findApproval(u, tok, 90*time.Second)
	}
	if a.ID == 0 {
		a.Note = "the approval did not appear within 90 s"
		return
	}
	s.decide(u, a)
}

// findApproval polls appr's pending approvals for the call carrying tok.
func (s *soak) findApproval(u *soakUser, tok string, within time.Duration) int64 {
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(time.Second) {
		for _, p := range s.pendingApprovals(u) {
			if strings.Contains(string(p.Arguments), tok) {
				return p.ID
			}
		}
	}
	return 0
}

func (s *soak) pendingApprovals(u *soakUser) []approvalView {
	r, err := s.client.do(soakReq{user: u.ID, token: u.Token, method: "GET", path: u.path("appr", "/approvals")})
	if err != nil || r.Code != 200 {
		return nil
	}
	var out struct{ Approvals []approvalView }
	_ = json.Unmarshal([]byte(r.Body), &out)
	return out.Approvals
}

// decide posts the record's decision. A 409 after a try that got no answer
// means that try went through; a 409 on the first try is kept as a note
// (the store shows what happened).
func (s *soak) decide(u *soakUser, a *approvalRecord) {
	body, _ := json.Marshal(map[string]any{"decision": a.Decision, "wait": false})
	r, err := s.client.do(soakReq{user: u.ID, token: u.Token, method: "POST", path: u.path("appr", fmt.Sprintf("/approvals/%d", a.ID)), body: body})
	switch {
	case err != nil:
		a.Note = "decision unanswered"
	case r.Code == 200:
		a.Decided = true
	case r.Code == 409 && r.Tries > 1:
		a.Decided = true
	default:
		a.Note = fmt.Sprintf("decision answered %d on try %d: %.200s", r.Code, r.Tries, r.Body)
	}
}

// decideLeftovers decides the approvals the client recorded but could not
// decide (or find) before, if they are pending now.
func (s *soak) decideLeftovers(u *soakUser) {
	u.mu.Lock()
	var open []*approvalRecord
	for _, a := range u.approvals {
		if !a.Decided && a.Prompt.Accepted {
			open = append(open, a)
		}
	}
	u.mu.Unlock()
	if len(open) == 0 {
		return
	}
	for _, p := range s.pendingApprovals(u) {
		for _, a := range open {
			if !a.Decided && strings.Contains(string(p.Arguments), a.Token) {
				a.ID, a.Note = p.ID, a.Note+"; decided late"
				s.decide(u, a)
			}
		}
	}
}

// opMessage: ann sends bob a message from a fresh conversation (the reply
// is outside text there), without waiting for the run.
func (s *soak) opMessage(u *soakUser) {
	r, err := s.client.do(soakReq{user: u.ID, token: u.Token, method: "POST", path: u.path("ann", "/session/new"), body: []byte(`{}`)})
	var c struct {
		ID int64 `json:"conversation_id"`
	}
	if err != nil || r.Code != 200 || json.Unmarshal([]byte(r.Body), &c) != nil || c.ID == 0 {
		s.logf("%s: ann's new conversation: %d %v %.200s", u.ID, r.Code, err, r.Body)
		return
	}
	tok := u.token("m", u.n+1)
	s.sendPrompt(u, "ann", c.ID, kindMessage, tok, "message bob: "+tok, false)
}

// opUpload puts 1 to 64 KiB of random bytes into uploads/soak/.
func (s *soak) opUpload(u *soakUser) {
	n := u.next()
	data := make([]byte, 1024+u.rng.IntN(63*1024))
	for i := range data {
		data[i] = byte(u.rng.Uint32())
	}
	sum := sha256.Sum256(data)
	rec := &uploadRecord{Path: fmt.Sprintf("uploads/soak/%d.bin", n), SHA256: hex.EncodeToString(sum[:]), Size: len(data)}
	r, _ := s.client.do(soakReq{user: u.ID, token: u.Token, method: "PUT", path: "/u/" + u.ID + "/" + rec.Path, body: data, final: []int{507}})
	rec.Code = r.Code
	u.mu.Lock()
	u.uploads = append(u.uploads, rec)
	u.mu.Unlock()
}

// opRead reads something the web client would: the trace, the reminders,
// the uploads' list.
func (s *soak) opRead(u *soakUser) {
	route := []string{"/inspect?limit=20", "/reminders", "/files?path=uploads", "/session"}[u.rng.IntN(4)]
	s.client.do(soakReq{user: u.ID, token: u.Token, method: "GET", path: u.path("", route)})
}

// follow keeps an event stream of main's conversation the way a tab of the
// web client does: connected for 5 to 40 s, then away for 1 to 15 s (so the
// sandbox may go idle), resuming after the last entry it saw.
func (s *soak) follow(ctx context.Context, u *soakUser) {
	rng := u.streamRng
	for ctx.Err() == nil {
		hold, cancel := context.WithTimeout(ctx, time.Duration(5+rng.IntN(36))*time.Second)
		s.followWith(hold, u, nil)
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(1+rng.IntN(15)) * time.Second):
		}
	}
}

// followWith is one connection of u's event stream; it returns when ctx
// ends or the stream is cut. also, if set, is told every entry id too.
func (s *soak) followWith(ctx context.Context, u *soakUser, also func(id int64)) {
	u.mu.Lock()
	var last int64
	if n := len(u.stream.Seen); n > 0 {
		last = u.stream.Seen[n-1]
	}
	u.stream.Connections++
	u.mu.Unlock()
	path := u.path("", fmt.Sprintf("/events?conversation=%d&after=0", u.MainConv))
	cut := s.client.follow(ctx, u.ID, u.Token, path, last, func(id int64) {
		u.mu.Lock()
		if n := len(u.stream.Seen); n > 0 && id <= u.stream.Seen[n-1] {
			u.stream.OutOfOrder = append(u.stream.OutOfOrder, fmt.Sprintf("entry %d after %d", id, u.stream.Seen[n-1]))
		}
		u.stream.Seen = append(u.stream.Seen, id)
		u.mu.Unlock()
		if also != nil {
			also(id)
		}
	})
	if cut {
		u.mu.Lock()
		u.stream.Cuts++
		u.mu.Unlock()
	}
}
