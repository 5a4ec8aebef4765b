package durable

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Effect is what a policy says of one tool call.
type Effect string

// Effects.
const (
	Allow Effect = "allow" // the call runs
	Ask   Effect = "ask"   // the call waits for the owner's decision
	Deny  Effect = "deny"  // the call is refused; the model is told
)

// PolicyQuery is one tool call for a Policy to judge.
type PolicyQuery struct {
	ConversationID int64
	Tool           Tool // zero for a tool the harness does not know
	Call           ToolCall
	// Outside is the first outside text in the model's context, or nil.
	// While it is there, the model may be steered by it.
	Outside *Entry
	// OutsideSinceOwner is the first outside text that entered the
	// conversation after the owner's last message (in the context or not),
	// or nil; it is looked for only for tools that ask after outside text
	// (Tool.AsksAfterOutside).
	OutsideSinceOwner *Entry
	Store             *Store
}

// Verdict is a Policy's answer. Reason says why, in words the owner (for
// Ask) or the model (for Deny) reads.
type Verdict struct {
	Effect Effect
	Reason string
}

// Policy decides whether a tool call runs, waits for the owner, or is
// refused. It is asked before every call's intent is committed; an error
// fails the step (the call is asked again when the task resumes).
type Policy interface {
	Check(ctx context.Context, q PolicyQuery) (Verdict, error)
}

// Decisions an owner can take on an approval.
const (
	AllowOnce   = "allow_once"
	AllowAlways = "allow_always" // allow once and add a rule built from the call
	DenyCall    = "deny"
	DenyAlways  = "deny_always" // deny and add a rule refusing such calls (the run is told "deny")
	// Expired is no owner's decision: the approval's time ran out, and the
	// call is refused as if denied (the harness records it, never Decide).
	Expired = "expired"
)

// DefaultApprovalTTL is how long an approval waits for the owner when
// Options.ApprovalTTL is zero.
const DefaultApprovalTTL = 7 * 24 * time.Hour

// Approval is a tool call waiting for the owner. Its ID is the ID of its
// approval entry; it survives restarts with the task that waits on it.
type Approval struct {
	ID             int64           `json:"id"`
	ConversationID int64           `json:"conversation_id"`
	RunID          int64           `json:"run_id"`
	CallID         string          `json:"call_id"`
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments"`
	SHA256         string          `json:"sha256"` // of Arguments, byte for byte as recorded (and as the tool gets them)
	Reason         string          `json:"reason"`
	AskedAt        time.Time       `json:"asked_at"`
	// ExpiresAt is when the call is refused if the owner has not decided:
	// the waiting task's deadline.
	ExpiresAt time.Time `json:"expires_at"`
}

// Decision is the owner's answer to an approval.
type Decision struct {
	ApprovalID int64     `json:"approval_id"`
	Decision   string    `json:"decision"`       // AllowOnce, AllowAlways, DenyCall, or Expired
	Note       string    `json:"note,omitempty"` // for the model, with a deny
	SHA256     string    `json:"sha256"`         // the arguments it is bound to
	At         time.Time `json:"at"`
}

// ErrDecided is returned by Decide for an approval that is not waiting
// any more (decided already, expired, or its run ended).
var ErrDecided = errors.New("approval already decided")

// ArgumentsHash is the hex sha256 of a call's arguments, byte for byte.
func ArgumentsHash(args json.RawMessage) string {
	sum := sha256.Sum256(args)
	return hex.EncodeToString(sum[:])
}

// ask stores call as an approval: the approval entry, the task waiting on
// it until the approval expires (its deadline, so the host wakes the
// sandbox then to refuse the call) and whatever the host wants committed
// with it (the owner's notification).
func (h *Harness) ask(t Task, cp genCheckpoint, call ToolCall, reason string) (StepResult, error) {
	id, err := h.store.MintID()
	if err != nil {
		return StepResult{}, err
	}
	now := h.Now()
	expires := now.Add(h.opts.ApprovalTTL)
	a := Approval{ID: id, ConversationID: t.ConversationID, RunID: t.ID, CallID: call.ID, Tool: call.Name,
		Arguments: call.Arguments, SHA256: ArgumentsHash(call.Arguments), Reason: reason, AskedAt: now, ExpiresAt: expires}
	entry := Entry{ID: id, ConversationID: t.ConversationID, Kind: ApprovalEntry, At: now, RunID: t.ID,
		Text: fmt.Sprintf("%s waits for the owner: %s", call.Name, reason), ToolCallID: call.ID, ToolName: call.Name,
		Arguments: call.Arguments, Data: mustRaw(a)}
	var tasks []Task
	if h.opts.OnApproval != nil {
		if tasks, err = h.mintTasks(t, h.opts.OnApproval(a)); err != nil {
			return StepResult{}, err
		}
	}
	cp.Waiting, cp.Decided = id, nil
	t.State, t.Deadline, t.Checkpoint = Waiting, &expires, mustRaw(cp)
	return StepResult{Task: t, Entries: []Entry{entry}, NewTasks: tasks}, nil
}

// expire refuses Calls[Next], whose approval (cp.Waiting) the owner did not
// decide before it expired: the task's deadline passed while it waited, so
// the scheduler ran it. One step writes the expiry record (a decision
// entry, "expired") and the refusal the model reads; a Decide that comes
// later finds the task no longer waiting (ErrDecided).
func (h *Harness) expire(ctx context.Context, t Task, cp genCheckpoint, call ToolCall) (StepResult, error) {
	a, err := h.Approval(ctx, cp.Waiting)
	if err != nil {
		return StepResult{}, err
	}
	id, err := h.store.MintID()
	if err != nil {
		return StepResult{}, err
	}
	now := h.Now()
	expiry := a.ExpiresAt
	if t.Deadline != nil { // the stored deadline; also for an approval asked before ExpiresAt was recorded
		expiry = *t.Deadline
	}
	waited := expiry.Sub(a.AskedAt).Round(time.Second)
	d := Decision{ApprovalID: a.ID, Decision: Expired, SHA256: a.SHA256, At: now,
		Note: fmt.Sprintf("no decision within %s", waited)}
	record := Entry{ID: id, ConversationID: a.ConversationID, Kind: DecisionEntry, At: now, RunID: a.RunID,
		Text:       fmt.Sprintf("approval %d (%s) expired: the owner did not decide within %s", a.ID, a.Tool, waited),
		ToolCallID: a.CallID, ToolName: a.Tool, Data: mustRaw(d)}
	cp.Waiting = 0
	t.Deadline = nil
	res, err := h.deniedResult(t, cp, call, fmt.Sprintf("[expired] The approval for this call of %s expired: the owner did not decide within %s, so it did not run.", call.Name, waited), a.ID)
	if err != nil {
		return res, err
	}
	res.Entries = append([]Entry{record}, res.Entries...)
	return res, nil
}

// deniedResult answers call without running it.
func (h *Harness) deniedResult(t Task, cp genCheckpoint, call ToolCall, text string, approval int64) (StepResult, error) {
	id, err := h.store.MintID()
	if err != nil {
		return StepResult{}, err
	}
	data := map[string]any{"denied": true}
	if approval != 0 {
		data["approval_id"] = approval
	}
	result := Entry{ID: id, ConversationID: t.ConversationID, Kind: ToolResultEntry, Text: text, At: h.Now(), RunID: t.ID,
		ToolCallID: call.ID, ToolName: call.Name, IsError: true, Data: mustRaw(data)}
	cp.Decided = nil
	cp.Next++
	if cp.Next == len(cp.Calls) {
		cp = genCheckpoint{Phase: phaseRequest, Turn: cp.Turn}
	}
	t.Checkpoint = mustRaw(cp)
	return StepResult{Task: t, Entries: []Entry{result}}, nil
}

// authorize asks the policy about Calls[Next] (unless the owner's decision
// on exactly these arguments is in the checkpoint). It returns a step
// result when the call does not run now: waiting for the owner, or refused.
func (h *Harness) authorize(ctx context.Context, t Task, cp genCheckpoint, call ToolCall, tool Tool) (*StepResult, error) {
	if h.opts.Policy == nil {
		return nil, nil
	}
	if d := cp.Decided; d != nil && d.SHA256 == ArgumentsHash(call.Arguments) && d.CallID == call.ID {
		if d.Decision == DenyCall {
			text := fmt.Sprintf("[denied] The owner denied this call of %s.", call.Name)
			if d.Note != "" {
				text += " The owner's note: " + d.Note
			}
			res, err := h.deniedResult(t, cp, call, text, d.Approval)
			return &res, err
		}
		return nil, nil
	}
	outside, err := h.outsideInContext(ctx, t.ConversationID)
	if err != nil {
		return nil, err
	}
	if outside == nil && cp.Outside != 0 { // the reply was written while it was in the context
		e, err := h.store.Entry(ctx, cp.Outside)
		if err != nil {
			return nil, fmt.Errorf("outside text %d: %w", cp.Outside, err)
		}
		outside = &e
	}
	q := PolicyQuery{ConversationID: t.ConversationID, Tool: tool, Call: call, Outside: outside, Store: h.store}
	if q.Tool.AsksAfterOutside {
		if q.OutsideSinceOwner, err = h.outsideSinceOwner(ctx, t.ConversationID); err != nil {
			return nil, err
		}
	}
	v, err := h.opts.Policy.Check(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	switch v.Effect {
	case Allow:
		return nil, nil
	case Deny:
		res, err := h.deniedResult(t, cp, call, fmt.Sprintf("[denied] %s", v.Reason), 0)
		return &res, err
	}
	res, err := h.ask(t, cp, call, v.Reason)
	return &res, err
}

// outsideInContext returns the first outside text in conv's model context:
// an outside text entry after the newest reset marker or summary, or a
// summary made from outside text. Nil when there is none.
func (h *Harness) outsideInContext(ctx context.Context, conv int64) (*Entry, error) {
	from := int64(1)
	head, err := h.store.LatestHead(ctx, conv)
	switch {
	case err == nil && head.Kind == ResetMarker:
		from = head.ID + 1
	case err == nil && head.Kind == SummaryEntry:
		if summaryHasOutside(head) {
			return &head, nil
		}
		from = head.Head
	case err != nil && !errors.Is(err, ErrNotFound):
		return nil, err
	}
	return h.firstOutside(ctx, conv, from)
}

// firstOutside returns conv's first outside text entry from ID from on,
// or nil when there is none.
func (h *Harness) firstOutside(ctx context.Context, conv, from int64) (*Entry, error) {
	e, err := h.store.FirstEntryOf(ctx, conv, OutsideText, from)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &e, nil
}

// outsideSinceOwner returns the first outside text entry of conv after the
// owner's last message (after the start when the owner wrote none, as in a
// conversation of messages from another agent), reset or not. Nil when
// there is none.
func (h *Harness) outsideSinceOwner(ctx context.Context, conv int64) (*Entry, error) {
	from := int64(1)
	switch last, err := h.store.LastEntryOf(ctx, conv, OwnerMessage); {
	case err == nil:
		from = last.ID + 1
	case !errors.Is(err, ErrNotFound):
		return nil, err
	}
	return h.firstOutside(ctx, conv, from)
}

// summaryHasOutside reports whether a summary was written from outside
// text: the model wrote it while reading that text, so it may carry it on.
func summaryHasOutside(e Entry) bool {
	var d struct {
		OutsideText bool `json:"outside_text"`
	}
	return json.Unmarshal(e.Data, &d) == nil && d.OutsideText
}

// Decide records the owner's decision on a waiting approval, together with
// extra (a rule an "allow always" adds), and lets the run go on: the call
// runs (once) or the model reads the denial. ErrNotFound for no such
// approval, ErrDecided for one not waiting any more.
func (h *Harness) Decide(ctx context.Context, approvalID int64, decision, note string, extra Writes) (Approval, error) {
	h.decideMu.Lock()
	defer h.decideMu.Unlock()
	a, t, cp, err := h.waitingOn(ctx, approvalID)
	if err != nil {
		return a, err
	}
	read := t // the task as it waited: the commit is refused if it changed since (a Stop)
	if beforeDecideCommit != nil {
		beforeDecideCommit()
	}
	id, err := h.store.MintID()
	if err != nil {
		return a, err
	}
	now := h.Now()
	d := Decision{ApprovalID: a.ID, Decision: decision, Note: note, SHA256: a.SHA256, At: now}
	text := fmt.Sprintf("the owner decided %s on approval %d (%s)", decision, a.ID, a.Tool)
	entry := Entry{ID: id, ConversationID: a.ConversationID, Kind: DecisionEntry, Text: text, At: now, RunID: a.RunID,
		ToolCallID: a.CallID, ToolName: a.Tool, Data: mustRaw(d)}
	cp.Waiting = 0
	cp.Decided = &decided{Approval: a.ID, CallID: a.CallID, SHA256: a.SHA256, Decision: decision, Note: note}
	t.State, t.Deadline, t.Checkpoint = Pending, nil, mustRaw(cp)
	w := extra
	w.Entries = append(append([]Entry(nil), extra.Entries...), entry)
	w.Tasks = append(append([]Task(nil), extra.Tasks...), t)
	if err := h.commit(ctx, 0, w, read); errors.Is(err, errStale) {
		return a, fmt.Errorf("approval %d: %w", approvalID, ErrDecided) // stopped (or decided) meanwhile
	} else if err != nil {
		return a, err
	}
	h.poke()
	h.notify()
	return a, nil
}

// beforeDecideCommit, set by tests only, runs between Decide's read of the
// waiting task and its commit: where a Stop can come between.
var beforeDecideCommit func()

// Waiting returns the approval if it still waits for the owner:
// ErrNotFound for no such approval, ErrDecided for one decided already.
func (h *Harness) Waiting(ctx context.Context, approvalID int64) (Approval, error) {
	a, _, _, err := h.waitingOn(ctx, approvalID)
	return a, err
}

// waitingOn loads an approval and the task waiting on it.
func (h *Harness) waitingOn(ctx context.Context, approvalID int64) (Approval, Task, genCheckpoint, error) {
	a, err := h.Approval(ctx, approvalID)
	if err != nil {
		return a, Task{}, genCheckpoint{}, err
	}
	t, err := h.store.Task(ctx, a.RunID)
	if err != nil {
		return a, t, genCheckpoint{}, err
	}
	var cp genCheckpoint
	if err := json.Unmarshal(t.Checkpoint, &cp); err != nil {
		return a, t, cp, fmt.Errorf("decode checkpoint of task %d: %w", t.ID, err)
	}
	if t.State != Waiting || cp.Waiting != approvalID {
		return a, t, cp, fmt.Errorf("approval %d: %w", approvalID, ErrDecided)
	}
	if expired(t, h.Now()) { // the harness records the expiry at its next look
		return a, t, cp, fmt.Errorf("approval %d expired at %s: %w", approvalID, t.Deadline.Format(time.RFC3339), ErrDecided)
	}
	return a, t, cp, nil
}

// Approval returns one approval by ID (ErrNotFound if there is none).
func (h *Harness) Approval(ctx context.Context, id int64) (Approval, error) {
	var a Approval
	e, err := h.store.Entry(ctx, id)
	if err != nil {
		return a, err
	}
	if e.Kind != ApprovalEntry {
		return a, fmt.Errorf("approval %d: %w", id, ErrNotFound)
	}
	if err := json.Unmarshal(e.Data, &a); err != nil {
		return a, fmt.Errorf("decode approval %d: %w", id, err)
	}
	return a, nil
}

// PendingApprovals returns the approvals the owner has not decided, oldest first.
func (h *Harness) PendingApprovals(ctx context.Context) ([]Approval, error) {
	tasks, err := h.store.Tasks(ctx, []TaskState{Waiting}, Scan{Limit: 1000})
	if err != nil {
		return nil, err
	}
	out := []Approval{}
	now := h.Now()
	for _, t := range tasks.Items {
		var cp genCheckpoint
		if t.Kind != KindGeneration || json.Unmarshal(t.Checkpoint, &cp) != nil || cp.Waiting == 0 || expired(t, now) {
			continue
		}
		a, err := h.Approval(ctx, cp.Waiting)
		if err != nil {
			h.opts.Log.Error("durable: a waiting task's approval cannot be read", "task", t.ID, "approval", cp.Waiting, "err", err)
			continue
		}
		if t.Deadline != nil {
			a.ExpiresAt = *t.Deadline // the stored deadline is the one that counts
		}
		out = append(out, a)
	}
	return out, nil
}

// expired reports whether waiting task t's approval is past its expiry.
func expired(t Task, now time.Time) bool {
	return t.State == Waiting && t.Deadline != nil && !t.Deadline.After(now)
}

// waitsOnApproval reports whether t is a run waiting on an approval (a
// paused job waits too, on nothing, with no deadline).
func waitsOnApproval(t Task) bool {
	var cp genCheckpoint
	return t.State == Waiting && t.Kind == KindGeneration && json.Unmarshal(t.Checkpoint, &cp) == nil && cp.Waiting != 0
}

// decided is the owner's decision as the waiting task's checkpoint keeps
// it until the call it is bound to runs or is refused.
type decided struct {
	Approval int64  `json:"approval"`
	CallID   string `json:"call_id"`
	SHA256   string `json:"sha256"`
	Decision string `json:"decision"`
	Note     string `json:"note,omitempty"`
}

// WaitingFor returns the approval that holds sub up: the one its own run
// waits on, or the one an earlier run of its conversation waits on (runs
// of a conversation go one at a time, oldest first, so a waiting one is
// the oldest that is live). Nil when nothing waits. It reads only the
// waiting tasks, usually none.
func (h *Harness) WaitingFor(ctx context.Context, sub Submission) (*Approval, error) {
	if sub.Status == Done || sub.Status == Unanswered {
		return nil, nil
	}
	waiting, err := h.store.Tasks(ctx, []TaskState{Waiting}, Scan{Limit: 1000})
	if err != nil {
		return nil, err
	}
	now := h.Now()
	for _, t := range waiting.Items { // oldest first
		var cp genCheckpoint
		if t.Kind != KindGeneration || t.ConversationID != sub.ConversationID || t.ID > sub.TaskID ||
			json.Unmarshal(t.Checkpoint, &cp) != nil || cp.Waiting == 0 || expired(t, now) { // an expired one runs on at once
			continue
		}
		a, err := h.Approval(ctx, cp.Waiting)
		if err != nil {
			return nil, err
		}
		return &a, nil
	}
	return nil, nil
}
