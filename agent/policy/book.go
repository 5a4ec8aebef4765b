package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/internal/openai"
)

// rulesKey is the store setting that holds the rules.
const rulesKey = "policy.rules"

// Book keeps the owner's rules in the agent's durable store and judges
// tool calls by them. Changes go through one Book at a time (the agent is
// its store's only writer), each committed with its trace entry.
type Book struct {
	// Tools are the tools rules may name (the harness's tools).
	Tools []durable.Tool
	// HoldsNoOwnerData turns the outside-text rule off: an agent that holds
	// none of the owner's data (the worker) has nothing a page could make it
	// leak, and reading pages is its job. Its rules alone decide.
	HoldsNoOwnerData bool

	mu sync.Mutex
}

var _ durable.Policy = (*Book)(nil)

func (b *Book) known(name string) bool {
	_, ok := b.tool(name)
	return ok
}

// Knows reports whether rules may name tool: one of the agent's own tools,
// not a connector's (whose mode the owner sets in the manager).
func (b *Book) Knows(tool string) bool { return b.known(tool) }

func (b *Book) tool(name string) (durable.Tool, bool) {
	for _, t := range b.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return durable.Tool{}, false
}

// alwaysAsks reports whether no rule may allow the tool.
func (b *Book) alwaysAsks(name string) bool {
	t, _ := b.tool(name)
	return t.AlwaysAsk
}

// Proposal is the rule "allow always" would add for a, or ErrNoProposal:
// Proposed, except for tools that always ask.
func (b *Book) Proposal(a durable.Approval) (Rule, error) {
	if b.alwaysAsks(a.Tool) {
		return Rule{}, fmt.Errorf("%w: %s always asks the owner", ErrNoProposal, a.Tool)
	}
	if !b.known(a.Tool) { // a connector's tool: its mode is the owner's setting in the manager
		return Rule{}, fmt.Errorf("%w: %s is a connector's tool; set its mode in the connector's settings", ErrNoProposal, a.Tool)
	}
	return Proposed(a)
}

// Rules returns the rules, oldest first.
func (b *Book) Rules(ctx context.Context, s *durable.Store) ([]Rule, error) {
	v, err := s.Setting(ctx, rulesKey)
	if err != nil {
		return nil, fmt.Errorf("read rules: %w", err)
	}
	rules := []Rule{}
	if v == "" {
		return rules, nil
	}
	if err := json.Unmarshal([]byte(v), &rules); err != nil {
		return nil, fmt.Errorf("decode rules: %w", err)
	}
	return rules, nil
}

// Defaults is each tool's effect when no rule matches.
func (b *Book) Defaults() map[string]durable.Effect {
	out := map[string]durable.Effect{}
	for _, t := range b.Tools {
		out[t.Name] = defaultEffect(t)
	}
	return out
}

func defaultEffect(t durable.Tool) durable.Effect {
	if t.ReadOnly || t.Preapproved || t.ActsOnPage {
		return durable.Allow
	}
	return durable.Ask
}

// change returns the writes that store rules and record why in conv's trace.
func change(h *durable.Harness, conv int64, rules []Rule, text string, data any) (durable.Writes, error) {
	id, err := h.Store().MintID()
	if err != nil {
		return durable.Writes{}, err
	}
	raw, _ := json.Marshal(rules)
	d, _ := json.Marshal(data)
	return durable.Writes{
		Settings: map[string]string{rulesKey: string(raw)},
		Entries: []durable.Entry{{ID: id, ConversationID: conv, Kind: durable.PolicyEntry, Text: text,
			At: h.Now(), Data: d}},
	}, nil
}

// Request is a rule as the owner asks for it. When maps each condition
// given to its value, so an empty value is told apart from no condition.
type Request struct {
	Tool   string            `json:"tool"`
	Effect durable.Effect    `json:"effect"`
	When   map[string]string `json:"when,omitempty"`
	// ConfirmUnconditional must be true for an allow rule with no
	// condition on a tool a condition could narrow (NeedsConfirm).
	ConfirmUnconditional bool `json:"confirm_unconditional,omitempty"`
}

// Add validates the owner's request, gives the rule an ID and stores it,
// with an entry in conv's trace. Errors wrap ErrInvalidRule for a rule
// that cannot be kept, ErrUnconfirmed for an unconfirmed rule that allows
// every call of a tool NeedsConfirm names.
func (b *Book) Add(ctx context.Context, h *durable.Harness, conv int64, req Request) (Rule, error) {
	r, err := b.ruleOf(req)
	if err != nil {
		return r, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	w, r, err := b.addWrites(ctx, h, conv, r)
	if err != nil {
		return r, err
	}
	if err := h.Commit(ctx, w); err != nil {
		return r, err
	}
	return r, nil
}

// ruleOf is the rule req asks for: each condition one the tool takes (by
// name and by its arguments' schema), none of them blank.
func (b *Book) ruleOf(req Request) (Rule, error) {
	r := Rule{Tool: req.Tool, Effect: req.Effect}
	t, ok := b.tool(req.Tool)
	if !ok {
		return r, fmt.Errorf("%w: unknown tool %q", ErrInvalidRule, req.Tool)
	}
	takes := b.Conditions(t.Name)
	for _, name := range slices.Sorted(maps.Keys(req.When)) {
		v := req.When[name]
		switch {
		case len(takes) == 0:
			return r, fmt.Errorf("%w: %s takes no condition, not %q", ErrInvalidRule, t.Name, name)
		case !slices.Contains(takes, name):
			return r, fmt.Errorf("%w: %s takes the conditions %s, not %q", ErrInvalidRule, t.Name, strings.Join(takes, ", "), name)
		case strings.TrimSpace(v) == "":
			return r, fmt.Errorf("%w: the %s condition is empty; give it a value, or leave it out for a rule on every %s call", ErrInvalidRule, name, t.Name)
		}
		switch name {
		case "command_prefix":
			r.When.CommandPrefix = v
		case "command":
			r.When.Command = v
		case "path_prefix":
			r.When.PathPrefix = v
		case "host":
			r.When.Host = v
		}
	}
	if r.Effect == durable.Allow && r.When == (Conditions{}) && b.NeedsConfirm(t.Name) && !req.ConfirmUnconditional {
		return r, fmt.Errorf("%w: this rule allows every %s call without asking you; to mean it, send \"confirm_unconditional\": true, or narrow it with a condition (%s)",
			ErrUnconfirmed, t.Name, strings.Join(takes, ", "))
	}
	return r, nil
}

// NeedsConfirm reports whether an allow rule with no condition on tool
// must be confirmed: a tool that is not read-only and takes conditions,
// so a narrower rule was there to be had (shell, write_file, fetch_url).
func (b *Book) NeedsConfirm(tool string) bool {
	t, ok := b.tool(tool)
	return ok && !t.ReadOnly && len(b.Conditions(tool)) > 0
}

// Conditions are the conditions a rule on tool may carry: those its
// arguments' schema makes readable; none for an unknown tool.
func (b *Book) Conditions(tool string) []string {
	takes := []string{}
	if t, ok := b.tool(tool); ok {
		for _, c := range conditionsOf[t.Name] {
			if hasArgument(t, argumentOf[c]) {
				takes = append(takes, c)
			}
		}
	}
	return takes
}

// hasArgument reports whether t's argument schema names arg.
func hasArgument(t durable.Tool, arg string) bool {
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(t.Parameters, &schema) != nil {
		return false
	}
	_, ok := schema.Properties[arg]
	return ok
}

// addWrites builds the commit that adds r. Caller holds b.mu.
func (b *Book) addWrites(ctx context.Context, h *durable.Harness, conv int64, r Rule) (durable.Writes, Rule, error) {
	r, err := normalize(r, b.known)
	if err != nil {
		return durable.Writes{}, r, err
	}
	if r.Effect == durable.Allow && b.alwaysAsks(r.Tool) {
		return durable.Writes{}, r, fmt.Errorf("%w: %s always asks the owner; no rule can allow it", ErrInvalidRule, r.Tool)
	}
	rules, err := b.Rules(ctx, h.Store())
	if err != nil {
		return durable.Writes{}, r, err
	}
	if r.ID, err = h.Store().MintID(); err != nil {
		return durable.Writes{}, r, err
	}
	r.CreatedAt = h.Now()
	w, err := change(h, conv, append(rules, r), fmt.Sprintf("rule %d added: %s", r.ID, r.Describe()),
		map[string]any{"added": r})
	return w, r, err
}

// Remove deletes a rule (ErrNoRule if there is none), with an entry in
// conv's trace.
func (b *Book) Remove(ctx context.Context, h *durable.Harness, conv, id int64) (Rule, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	rules, err := b.Rules(ctx, h.Store())
	if err != nil {
		return Rule{}, err
	}
	for i, r := range rules {
		if r.ID != id {
			continue
		}
		rest := append(append([]Rule{}, rules[:i]...), rules[i+1:]...)
		w, err := change(h, conv, rest, fmt.Sprintf("rule %d removed: %s", r.ID, r.Describe()), map[string]any{"removed": r})
		if err != nil {
			return r, err
		}
		return r, h.Commit(ctx, w)
	}
	return Rule{}, fmt.Errorf("rule %d: %w", id, ErrNoRule)
}

// Decide records the owner's decision on an approval; "allow always" adds
// the Proposed rule in the same commit, "deny always" the DenyProposal, or
// (edit not nil) the deny rule with the conditions the owner edited, which
// must still cover the call. It returns the approval and the rule added,
// if any (durable.ErrNotFound, durable.ErrDecided as Decide;
// ErrNoProposal for "allow always" on a call no narrow rule fits;
// ErrInvalidRule for an edit that cannot be kept).
func (b *Book) Decide(ctx context.Context, h *durable.Harness, approvalID int64, decision, note string, edit *Conditions) (durable.Approval, *Rule, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	a, err := h.Waiting(ctx, approvalID)
	if err != nil {
		return a, nil, err
	}
	var extra durable.Writes
	var added *Rule
	switch decision {
	case durable.AllowAlways:
		p, err := b.Proposal(a)
		if err != nil {
			return a, nil, err
		}
		w, r, err := b.addWrites(ctx, h, a.ConversationID, p)
		if err != nil {
			return a, nil, err
		}
		extra, added = w, &r
	case durable.DenyAlways:
		// The same narrow rule, refusing: any tool may have one, and the
		// run is told of a plain deny.
		p, err := DenyProposal(a)
		if edit != nil {
			p, err = editedDeny(a, *edit)
		}
		if err != nil {
			return a, nil, err
		}
		w, r, err := b.addWrites(ctx, h, a.ConversationID, p)
		if err != nil {
			return a, nil, err
		}
		extra, added, decision = w, &r, durable.DenyCall
	}
	a, err = h.Decide(ctx, approvalID, decision, note, extra)
	if err != nil {
		return a, nil, err
	}
	return a, added, nil
}

// editedDeny is the deny rule an owner edited on an approval's card: the
// conditions they wrote, none of them blank, still covering the call it
// is made from (the rest of the checks are normalize's).
func editedDeny(a durable.Approval, when Conditions) (Rule, error) {
	r := Rule{Tool: a.Tool, Effect: durable.Deny, When: when, FromApproval: a.ID}
	for _, v := range []string{when.CommandPrefix, when.Command, when.PathPrefix, when.Host} {
		if v != "" && strings.TrimSpace(v) == "" {
			return r, fmt.Errorf("%w: a condition may not be blank", ErrInvalidRule)
		}
	}
	if !r.matches(a.Arguments) {
		return r, fmt.Errorf("%w: the rule as edited (%s) does not cover the call it is made from", ErrInvalidRule, r.Describe())
	}
	return r, nil
}

// Check judges one call (see the package comment).
func (b *Book) Check(ctx context.Context, q durable.PolicyQuery) (durable.Verdict, error) {
	if q.Tool.Name == "" {
		return durable.Verdict{Effect: durable.Allow}, nil // nothing runs: the harness answers "unknown tool"
	}
	// Go's decoder takes the last of two keys that differ only in case; a
	// person reading the arguments may see the first. Such a call is
	// refused, so what the owner approves is what runs.
	if a := bytes.TrimSpace(q.Call.Arguments); len(a) > 0 && (a[0] != '{' || openai.CheckKeys(a) != nil) {
		return durable.Verdict{Effect: durable.Deny, Reason: "The arguments must be one JSON object that names each key once (no duplicates, no keys that differ only in case)."}, nil
	}
	rules, err := b.Rules(ctx, q.Store)
	if err != nil {
		return durable.Verdict{}, err
	}
	var matched []Rule
	for _, r := range rules {
		if r.covers(q.Tool.Name) && r.matches(q.Call.Arguments) {
			matched = append(matched, r)
		}
	}
	rank := map[durable.Effect]int{durable.Deny: 0, durable.Ask: 1, durable.Allow: 2}
	sort.SliceStable(matched, func(i, j int) bool { return rank[matched[i].Effect] < rank[matched[j].Effect] })
	var v durable.Verdict
	if len(matched) > 0 {
		r := matched[0]
		v = durable.Verdict{Effect: r.Effect, Reason: fmt.Sprintf("rule %d: %s", r.ID, r.Describe())}
		if r.Effect == durable.Deny {
			v.Reason = fmt.Sprintf("The owner's rule %d denies this call (%s).", r.ID, r.Describe())
		}
	} else {
		v = durable.Verdict{Effect: defaultEffect(q.Tool), Reason: q.Tool.Name + " asks by default: no rule of the owner's allows this call"}
		if q.Tool.Preapproved {
			v.Reason = q.Tool.Name + " is allowed in its connector's settings"
		}
		if q.Tool.ActsOnPage {
			v.Reason = q.Tool.Name + " acts on a page the agent opened, allowed until a page's text is in the context"
		}
		if q.Tool.AlwaysAsk {
			v.Reason = askReason(q.Tool)
		}
	}
	// The owner let the agent act on this site: a rule of theirs with the
	// page's host allows it, outside text or not.
	sitePermit := v.Effect == durable.Allow && q.Tool.ActsOnPage && len(matched) > 0 && matched[0].When.Host != ""
	if v.Effect == durable.Allow && q.Tool.AlwaysAsk {
		v = durable.Verdict{Effect: durable.Ask, Reason: askReason(q.Tool)}
	}
	// Outside text since the owner last spoke makes such a tool ask, in
	// every agent (the worker's too): what it writes outlives the conversation.
	if v.Effect == durable.Allow && q.Tool.AsksAfterOutside && (q.Outside != nil || q.OutsideSinceOwner != nil) {
		e := q.OutsideSinceOwner
		if e == nil {
			e = q.Outside
		}
		return durable.Verdict{Effect: durable.Ask, Reason: fmt.Sprintf(
			"outside text (entry %d, %s) has entered the conversation since your last message, so %s asks whatever the rules say: what it writes stays after the conversation (%s)",
			e.ID, e.Kind, q.Tool.Name, v.Reason)}, nil
	}
	if v.Effect == durable.Allow && !q.Tool.ReadOnly && q.Outside != nil && !b.HoldsNoOwnerData && !sitePermit {
		v = durable.Verdict{Effect: durable.Ask, Reason: fmt.Sprintf(
			"outside text (entry %d, %s) is in the model's context, so every call of a tool that is not read-only asks until the conversation is reset (%s)",
			q.Outside.ID, q.Outside.Kind, v.Reason)}
	}
	return v, nil
}

// askReason is why an always-asking tool asks.
func askReason(t durable.Tool) string {
	if t.AskReason != "" {
		return t.AskReason
	}
	return t.Name + " always asks the owner: no rule can allow it"
}
