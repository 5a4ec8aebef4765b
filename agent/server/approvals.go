package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/policy"
	"github.com/affido/affido/internal/problem"
)

// The owner's powers over the agent: rules and approvals. These routes
// are reached only through Caddy, after the manager checked the owner's
// credentials; nothing inside the sandbox can call them (onlyFromCaller).

// approvalView is an approval as the owner sees it: with the rule that
// "allow always" would add, shown before it is saved.
type approvalView struct {
	durable.Approval
	Status string `json:"status"`
	// ProposedRule is absent when no narrow rule fits the call: then
	// "allow always" is refused and the owner allows it once.
	ProposedRule *ruleJSON `json:"proposed_rule,omitempty"`
	// ProposedDenyRule is the rule "deny_always" saves (absent when no
	// narrow rule fits the call).
	ProposedDenyRule *ruleJSON `json:"proposed_deny_rule,omitempty"`
}

func viewOf(book *policy.Book, a durable.Approval, status string) approvalView {
	v := approvalView{Approval: a, Status: status}
	if r, err := book.Proposal(a); err == nil {
		p := ruleView(r)
		v.ProposedRule = &p
	}
	if r, err := policy.DenyProposal(a); err == nil && book.Knows(a.Tool) {
		p := ruleView(r)
		v.ProposedDenyRule = &p
	}
	return v
}

func (s *Server) approvals(w http.ResponseWriter, r *http.Request) error {
	rt, err := s.runtime(r)
	if err != nil {
		return err
	}
	list, err := rt.Harness.PendingApprovals(r.Context())
	if err != nil {
		return err
	}
	out := []approvalView{}
	for _, a := range list {
		out = append(out, viewOf(rt.Book, a, "pending"))
	}
	writeJSON(w, http.StatusOK, map[string]any{"approvals": out})
	return nil
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return problem.New(http.StatusBadRequest, "bad-id", "an approval id is a positive integer")
	}
	var body struct {
		Decision string `json:"decision"`
		Note     string `json:"note"`
		Wait     *bool  `json:"wait"`
		// Rule is the deny rule as the owner edited it (deny_always only).
		Rule *struct {
			When policy.Conditions `json:"when"`
		} `json:"rule"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	switch {
	case body.Decision != durable.AllowOnce && body.Decision != durable.AllowAlways && body.Decision != durable.DenyCall && body.Decision != durable.DenyAlways:
		return problem.New(http.StatusBadRequest, "bad-decision", `decision is "allow_once", "allow_always", "deny" or "deny_always"`)
	case body.Note != "" && body.Decision != durable.DenyCall && body.Decision != durable.DenyAlways:
		return problem.New(http.StatusBadRequest, "bad-note", "a note goes with a deny (the model reads it)")
	case len(body.Note) > 4096:
		return problem.New(http.StatusBadRequest, "bad-note", "a note is at most 4096 bytes")
	case body.Rule != nil && body.Decision != durable.DenyAlways:
		return problem.New(http.StatusBadRequest, "bad-rule", "an edited rule goes with deny_always")
	}
	var edit *policy.Conditions
	if body.Rule != nil {
		edit = &body.Rule.When
	}
	rt, err := s.runtime(r)
	if err != nil {
		return err
	}
	h := rt.Harness
	a, added, err := rt.Book.Decide(r.Context(), h, id, body.Decision, body.Note, edit)
	switch {
	case errors.Is(err, durable.ErrNotFound):
		return problem.New(http.StatusNotFound, "unknown-approval", fmt.Sprintf("no approval %d", id))
	case errors.Is(err, durable.ErrDecided):
		return problem.New(http.StatusConflict, "already-decided", fmt.Sprintf("approval %d is not waiting: it was decided already, or it expired", id))
	case edit != nil && errors.Is(err, policy.ErrInvalidRule):
		return problem.New(http.StatusBadRequest, "bad-rule", err.Error())
	case errors.Is(err, policy.ErrNoProposal), errors.Is(err, policy.ErrInvalidRule):
		return problem.New(http.StatusBadRequest, "no-rule", "allow always and deny always need a rule narrower than the whole tool, and none fits this call; decide it once, or add a rule with POST /rules: "+err.Error())
	case err != nil:
		return err
	}
	decided := map[string]any{"approval": viewOf(rt.Book, a, body.Decision), "decision": body.Decision}
	if added != nil {
		decided["rule"] = ruleView(*added)
	}
	t, err := h.Store().Task(r.Context(), a.RunID)
	if err != nil || t.SubmissionID == 0 || (body.Wait != nil && !*body.Wait) {
		writeJSON(w, http.StatusOK, decided)
		return nil
	}
	// Like POST /prompt: answer with the run once it is done, or waits again.
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Minute)
	defer cancel()
	sub, err := h.WaitSettled(ctx, t.SubmissionID)
	if err != nil {
		return problem.New(http.StatusGatewayTimeout, "still-running", fmt.Sprintf("run %d is still going; see GET /inspect", a.RunID))
	}
	return s.writeRun(w, r, rt, sub, decided)
}

// ruleJSON is a rule as the owner's API shows it: with its words.
type ruleJSON struct {
	policy.Rule
	Words string `json:"words"`
}

func ruleView(r policy.Rule) ruleJSON { return ruleJSON{Rule: r, Words: r.Describe()} }

func (s *Server) rules(w http.ResponseWriter, r *http.Request) error {
	rt, err := s.runtime(r)
	if err != nil {
		return err
	}
	rules, err := rt.Book.Rules(r.Context(), rt.Harness.Store())
	if err != nil {
		return err
	}
	views := []ruleJSON{}
	for _, rule := range rules {
		views = append(views, ruleView(rule))
	}
	conditions, confirm := map[string][]string{}, []string{}
	for _, name := range toolNames(rt.Book) {
		conditions[name] = rt.Book.Conditions(name)
		if rt.Book.NeedsConfirm(name) {
			confirm = append(confirm, name)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"rules": views, "defaults": rt.Book.Defaults(),
		"conditions": conditions, "needs_confirm": confirm})
	return nil
}

func (s *Server) ruleAdd(w http.ResponseWriter, r *http.Request) error {
	var body policy.Request
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	rt, err := s.runtime(r)
	if err != nil {
		return err
	}
	h, conv, err := s.current(r)
	if err != nil {
		return err
	}
	rule, err := rt.Book.Add(r.Context(), h, conv, body)
	switch {
	case errors.Is(err, policy.ErrInvalidRule):
		return problem.New(http.StatusBadRequest, "bad-rule", err.Error()+"; tools: "+strings.Join(toolNames(rt.Book), ", "))
	case err != nil:
		return err
	default:
		writeJSON(w, http.StatusCreated, ruleView(rule))
	}
	return nil
}

func (s *Server) ruleRemove(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return problem.New(http.StatusBadRequest, "bad-id", "a rule id is a positive integer")
	}
	rt, err := s.runtime(r)
	if err != nil {
		return err
	}
	h, conv, err := s.current(r)
	if err != nil {
		return err
	}
	rule, err := rt.Book.Remove(r.Context(), h, conv, id)
	switch {
	case errors.Is(err, policy.ErrNoRule):
		return problem.New(http.StatusNotFound, "unknown-rule", fmt.Sprintf("no rule %d", id))
	case err != nil:
		return err
	default:
		writeJSON(w, http.StatusOK, map[string]any{"removed": ruleView(rule)})
	}
	return nil
}

func toolNames(book *policy.Book) []string {
	var names []string
	for _, t := range book.Tools {
		names = append(names, t.Name)
	}
	return names
}
