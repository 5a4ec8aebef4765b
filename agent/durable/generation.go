package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

const (
	phasePlace   = "place"
	phaseRequest = "request"
	phaseTools   = "tools"
)

// maxRejections bounds how often the gate may reject replies in one run.
const maxRejections = 3

// genCheckpoint is the generation task's checkpoint.
type genCheckpoint struct {
	Phase      string     `json:"phase"`
	Attempt    int        `json:"attempt,omitempty"` // model retries so far
	Turn       int        `json:"turn,omitempty"`    // model calls so far
	Calls      []ToolCall `json:"calls,omitempty"`
	Next       int        `json:"next,omitempty"`      // index of the next call
	Executing  bool       `json:"executing,omitempty"` // intent of Calls[Next] is committed
	Rejections []string   `json:"rejections,omitempty"`
	Waiting    int64      `json:"waiting,omitempty"` // the approval Calls[Next] waits on
	Decided    *decided   `json:"decided,omitempty"` // the owner's decision on Calls[Next]
	// Outside is the outside text entry that was in the context when the
	// model wrote Calls: each of them is judged with it, even if the
	// context is reset before it runs.
	Outside int64 `json:"outside,omitempty"`
}

// GateInput is a model reply for the Gate to check.
type GateInput struct {
	ConversationID int64
	RunID          int64
	Options        map[string]string // the submission's options
	Settings       map[string]string // the conversation's settings
	Reply          ModelResponse
	// EntryID is the ID the assistant entry will get if the reply passes.
	EntryID int64
	Mint    func() (int64, error)
	Store   *Store
}

// generation is the built-in task that answers one submission: it places
// the owner message, calls the model, runs the tools it asks for, and loops
// until the model answers without tools.
type generation struct{}

func (generation) Step(ctx context.Context, sc *StepContext, t Task) (StepResult, error) {
	h := sc.h
	var cp genCheckpoint
	if err := json.Unmarshal(t.Checkpoint, &cp); err != nil {
		return StepResult{}, fmt.Errorf("decode checkpoint: %w", err)
	}
	sub, err := h.store.Submission(ctx, t.SubmissionID)
	if err != nil {
		return StepResult{}, fmt.Errorf("submission %d: %w", t.SubmissionID, err)
	}
	switch cp.Phase {
	case phasePlace:
		id, err := h.store.MintID()
		if err != nil {
			return StepResult{}, err
		}
		entries := []Entry{placed(id, t, sub)}
		if sub.Input.Hint != "" {
			hid, err := h.store.MintID()
			if err != nil {
				return StepResult{}, err
			}
			entries = append(entries, Entry{ID: hid, ConversationID: t.ConversationID, Kind: HintEntry, Text: sub.Input.Hint, At: sub.CreatedAt, RunID: t.ID})
		}
		sub.Status = Placed
		t.Checkpoint = mustRaw(genCheckpoint{Phase: phaseRequest})
		return StepResult{Task: t, Entries: entries, Submissions: []Submission{sub}}, nil
	case phaseRequest:
		return h.request(ctx, t, cp, sub)
	case phaseTools:
		return h.runCall(ctx, sc, t, cp)
	}
	return StepResult{}, fmt.Errorf("unknown phase %q", cp.Phase)
}

// placed is the entry a submission's text becomes: the owner's message, or
// outside text when another agent sent it.
func placed(id int64, t Task, sub Submission) Entry {
	e := Entry{ID: id, ConversationID: t.ConversationID, Kind: OwnerMessage, Text: sub.Input.Text, At: sub.CreatedAt, RunID: t.ID}
	if sub.Input.From != "" {
		e.Kind = OutsideText
		e.Data = mustRaw(map[string]any{"source": "agent " + sub.Input.From, "from_agent": sub.Input.From, "hops": sub.Input.Hops})
	}
	return e
}

// fail ends the run: an error entry, the task failed, the submission unanswered.
func (h *Harness) fail(t Task, sub Submission, reason, detail string) (StepResult, error) {
	id, err := h.store.MintID()
	if err != nil {
		return StepResult{}, err
	}
	entry := Entry{ID: id, ConversationID: t.ConversationID, Kind: ErrorEntry, Text: detail, At: h.Now(), RunID: t.ID, IsError: true,
		Data: mustRaw(map[string]string{"reason": reason})}
	sub.Status, sub.Reason = Unanswered, reason
	return StepResult{Task: t.end(h.Now(), Failed, reason+": "+detail), Entries: []Entry{entry}, Submissions: []Submission{sub}}, nil
}

func (h *Harness) modelFor(ctx context.Context, conv int64, sub Submission) (string, map[string]string, error) {
	c, err := h.store.Conversation(ctx, conv)
	if err != nil {
		return "", nil, err
	}
	switch {
	case sub.Input.Model != "":
		return sub.Input.Model, c.Settings, nil
	case c.Settings["model"] != "":
		return c.Settings["model"], c.Settings, nil
	}
	return h.opts.DefaultModel, c.Settings, nil
}

func (h *Harness) toolSpecs(ctx context.Context) []ToolSpec {
	specs := make([]ToolSpec, 0, len(h.opts.Tools))
	for _, t := range h.opts.Tools {
		specs = append(specs, ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	for _, t := range h.moreTools(ctx) {
		if _, builtin := h.tools[t.Name]; !builtin {
			specs = append(specs, ToolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		}
	}
	return specs
}

// moreTools lists Options.MoreTools now; a failure is logged and offers none.
func (h *Harness) moreTools(ctx context.Context) []Tool {
	if h.opts.MoreTools == nil {
		return nil
	}
	more, err := h.opts.MoreTools(ctx)
	if err != nil {
		h.opts.Log.Warn("more tools not listed; offering the built-in ones", "err", err)
		return nil
	}
	return more
}

// tool finds the tool a call names: one of Tools, else of MoreTools now.
func (h *Harness) tool(ctx context.Context, name string) (Tool, bool) {
	if t, ok := h.tools[name]; ok {
		return t, true
	}
	for _, t := range h.moreTools(ctx) {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}

func (h *Harness) request(ctx context.Context, t Task, cp genCheckpoint, sub Submission) (StepResult, error) {
	if cp.Turn >= h.opts.MaxTurns {
		return h.fail(t, sub, "too_many_turns", fmt.Sprintf("the run stopped after %d model calls", cp.Turn))
	}
	model, settings, err := h.modelFor(ctx, t.ConversationID, sub)
	if err != nil {
		return StepResult{}, err
	}
	c, err := h.BuildContext(ctx, t.ConversationID)
	if err != nil {
		return StepResult{}, err
	}
	if h.opts.SystemSuffix != nil {
		suffix, err := h.opts.SystemSuffix(ctx, sub.Input)
		if err != nil {
			if ctx.Err() != nil {
				return StepResult{}, ctx.Err()
			}
			return StepResult{}, fmt.Errorf("system prompt: %w", err)
		}
		c.addSystem(suffix)
	}
	for _, r := range cp.Rejections {
		c.Messages = append(c.Messages, Message{Role: "user", Content: "[harness] Your previous reply was rejected and not stored: " + r + " Answer again."})
	}
	if h.opts.Compaction.HardCap > 0 && c.Tokens > h.opts.Compaction.HardCap {
		return h.fail(t, sub, "context_too_large", fmt.Sprintf("the context is about %d tokens, over the cap of %d; reset the conversation or wait for its summary", c.Tokens, h.opts.Compaction.HardCap))
	}
	var outside *Entry
	if h.opts.Policy != nil {
		if outside, err = h.outsideInContext(ctx, t.ConversationID); err != nil {
			return StepResult{}, err
		}
	}
	var onDelta func(string)
	if h.opts.OnDelta != nil && (h.opts.Streams == nil || h.opts.Streams(sub.Input.Options, settings)) {
		onDelta = func(text string) {
			if text != "" {
				h.opts.OnDelta(t.ConversationID, t.ID, text)
			}
		}
		h.opts.OnDelta(t.ConversationID, t.ID, "") // a new attempt: what an earlier one streamed is void
	}
	started := h.Now()
	resp, err := h.opts.Model.Stream(ctx, ModelRequest{Model: model, Messages: c.Messages, Tools: h.toolSpecs(ctx)}, onDelta)
	if err != nil {
		if ctx.Err() != nil {
			return StepResult{}, ctx.Err()
		}
		if IsTransient(err) && cp.Attempt < h.opts.Retry.Max {
			cp.Attempt++
			next := h.sleepForRetry(t, cp.Attempt, cp)
			// Said in the conversation (and the trace): the run goes on.
			id, merr := h.store.MintID()
			if merr != nil {
				return StepResult{}, merr
			}
			note := Entry{ID: id, ConversationID: t.ConversationID, Kind: RetryEntry, At: h.Now(), RunID: t.ID,
				Text: fmt.Sprintf("the model call failed (%v); trying again in %s, attempt %d of %d",
					err, next.Deadline.Sub(h.Now()).Round(time.Second), cp.Attempt+1, h.opts.Retry.Max+1)}
			return StepResult{Task: next, Entries: []Entry{note}}, nil
		}
		var stop *StopError
		if errors.As(err, &stop) {
			return h.fail(t, sub, stop.Reason, stop.Err.Error())
		}
		return h.fail(t, sub, "model_error", err.Error())
	}
	if resp.Model == "" {
		resp.Model = model
	}
	entryID, err := h.store.MintID()
	if err != nil {
		return StepResult{}, err
	}
	var extra []Entry
	if h.opts.Gate != nil && len(resp.ToolCalls) == 0 {
		reason, more, err := h.opts.Gate(ctx, GateInput{ConversationID: t.ConversationID, RunID: t.ID, Options: sub.Input.Options,
			Settings: settings, Reply: resp, EntryID: entryID, Mint: h.store.MintID, Store: h.store})
		if err != nil {
			return StepResult{}, err
		}
		if reason != "" {
			cp.Rejections = append(cp.Rejections, reason)
			cp.Turn++
			// The refusal is said in the conversation and kept in the trace.
			note := Entry{ID: entryID, ConversationID: t.ConversationID, Kind: GateEntry, Text: reason, At: h.Now(), RunID: t.ID,
				Data: mustRaw(map[string]int{"refusal": len(cp.Rejections), "of": maxRejections + 1})}
			if len(cp.Rejections) > maxRejections {
				sub.Status, sub.Reason = Unanswered, "attribution_failed"
				note.Kind, note.IsError = ErrorEntry, true
				note.Text = fmt.Sprintf("no reply: the citation gate refused %d replies (%s)", len(cp.Rejections), strings.Join(cp.Rejections, "; "))
				note.Data = mustRaw(map[string]string{"reason": "attribution_failed"})
				return StepResult{Task: t.end(h.Now(), Failed, "attribution_failed: "+strings.Join(cp.Rejections, "; ")),
					Entries: []Entry{note}, Submissions: []Submission{sub}, Usage: modelUsage(t.ConversationID, resp)}, nil
			}
			t.Checkpoint = mustRaw(cp)
			return StepResult{Task: t, Entries: []Entry{note}, Usage: modelUsage(t.ConversationID, resp)}, nil
		}
		extra = more
	}
	// The call's tokens and duration, for the trace.
	entry := Entry{ID: entryID, ConversationID: t.ConversationID, Kind: AssistantMessage, Text: resp.Text, At: h.Now(),
		RunID: t.ID, Model: resp.Model, ToolCalls: resp.ToolCalls,
		Data: mustRaw(map[string]int64{"input_tokens": resp.Usage.InputTokens, "output_tokens": resp.Usage.OutputTokens,
			"duration_ms": h.Now().Sub(started).Milliseconds()})}
	res := StepResult{Entries: append([]Entry{entry}, extra...), Usage: modelUsage(t.ConversationID, resp)}
	cp.Turn++
	cp.Attempt, cp.Rejections = 0, nil
	if len(resp.ToolCalls) > 0 {
		cp.Phase, cp.Calls, cp.Next, cp.Executing = phaseTools, resp.ToolCalls, 0, false
		if outside != nil {
			cp.Outside = outside.ID
		}
		t.Checkpoint, t.Deadline = mustRaw(cp), nil
		t.State = Running
		res.Task = t
		return res, nil
	}
	sub.Status, sub.AnswerEntryID = Done, entryID
	res.Task = t.end(h.Now(), Completed, "")
	res.Submissions = []Submission{sub}
	if h.opts.OnAnswer != nil {
		tasks, err := h.mintTasks(t, h.opts.OnAnswer(sub.Input, entry))
		if err != nil {
			return StepResult{}, err
		}
		res.NewTasks = append(res.NewTasks, tasks...)
	}
	if th := h.opts.Compaction.Threshold; th > 0 && c.Tokens+(len(resp.Text)+3)/4 > th {
		if st, err := h.summaryTask(ctx, t.ConversationID); err == nil && st != nil {
			res.NewTasks = append(res.NewTasks, *st)
		}
	}
	return res, nil
}

// sleepForRetry stores the wait before retry attempt as a sleeping deadline
// with checkpoint cp, so the wait survives a crash or a paused sandbox.
func (h *Harness) sleepForRetry(t Task, attempt int, cp any) Task {
	due := h.Now().Add(h.opts.Retry.Delay(attempt))
	t.State, t.Deadline, t.Checkpoint = Sleeping, &due, mustRaw(cp)
	return t
}

func modelUsage(conv int64, resp ModelResponse) []UsageDelta {
	return []UsageDelta{{ConversationID: conv, Kind: "model", Name: resp.Model, InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens, Calls: 1}}
}

// runCall runs Calls[Next]: commit the intent, execute, commit the result.
// Reached with Executing already set only after a crash: a safe tool runs
// again, any other is reported to the model as interrupted.
func (h *Harness) runCall(ctx context.Context, sc *StepContext, t Task, cp genCheckpoint) (StepResult, error) {
	if cp.Next >= len(cp.Calls) {
		return StepResult{}, errors.New("tool phase without a pending call")
	}
	call := cp.Calls[cp.Next]
	tool, known := h.tool(ctx, call.Name)
	replay := cp.Executing
	if cp.Waiting != 0 { // run while it waited: its approval expired (Decide clears Waiting)
		return h.expire(ctx, t, cp, call)
	}
	if !cp.Executing {
		if res, err := h.authorize(ctx, t, cp, call, tool); err != nil || res != nil {
			if err != nil {
				return StepResult{}, err
			}
			return *res, nil
		}
		cp.Decided = nil // used once: the intent below consumes it
		id, err := h.store.MintID()
		if err != nil {
			return StepResult{}, err
		}
		intent := Entry{ID: id, ConversationID: t.ConversationID, Kind: ToolCallEntry, At: h.Now(), RunID: t.ID,
			ToolCallID: call.ID, ToolName: call.Name, Arguments: call.Arguments}
		cp.Executing = true
		t.Checkpoint = mustRaw(cp)
		if err := sc.Commit(ctx, t, intent); err != nil {
			return StepResult{}, err
		}
	}
	var res ToolResult
	switch {
	case !known:
		res = ToolResult{Output: fmt.Sprintf("unknown tool %q", call.Name), IsError: true}
	case replay && !tool.Safe:
		res = ToolResult{Output: InterruptedOutput(call.Name), IsError: true}
	default:
		res = runTool(ctx, tool, ToolCallContext{ConversationID: t.ConversationID, RunID: t.ID, CallID: call.ID, Now: h.Now(), Store: h.store, Replay: replay}, call.Arguments)
		if ctx.Err() != nil {
			return StepResult{}, ctx.Err() // closing: the intent stays; reopen decides by the replay policy
		}
	}
	id, err := h.store.MintID()
	if err != nil {
		return StepResult{}, err
	}
	out := res.Output
	if h.opts.Redact != nil {
		out = h.opts.Redact(out)
	}
	result := Entry{ID: id, ConversationID: t.ConversationID, Kind: ToolResultEntry, Text: out, At: h.Now(), RunID: t.ID,
		ToolCallID: call.ID, ToolName: call.Name, IsError: res.IsError, Data: res.Data}
	written := []Entry{result}
	if res.Outside != nil {
		oid, err := h.store.MintID()
		if err != nil {
			return StepResult{}, err
		}
		text := res.Outside.Text
		if h.opts.Redact != nil {
			text = h.opts.Redact(text)
		}
		written = append(written, Entry{ID: oid, ConversationID: t.ConversationID, Kind: OutsideText, Text: text, At: h.Now(), RunID: t.ID,
			ToolCallID: call.ID, ToolName: call.Name, Data: res.Outside.Data})
	}
	newTasks, err := h.mintTasks(t, res.Tasks)
	if err != nil {
		return StepResult{}, err
	}
	cp.Executing = false
	cp.Next++
	if cp.Next == len(cp.Calls) {
		cp = genCheckpoint{Phase: phaseRequest, Turn: cp.Turn}
	}
	t.Checkpoint = mustRaw(cp)
	return StepResult{Task: t, Entries: written, NewTasks: newTasks, Updates: res.Updates,
		Usage: []UsageDelta{{ConversationID: t.ConversationID, Kind: "tool", Name: call.Name, Calls: 1}}}, nil
}

// mintTasks gives new tasks a step made their IDs, version and creation
// time; a task without a conversation belongs to t's.
func (h *Harness) mintTasks(t Task, tasks []Task) ([]Task, error) {
	var out []Task
	for _, nt := range tasks {
		id, err := h.store.MintID()
		if err != nil {
			return nil, err
		}
		nt.ID = id
		if nt.ConversationID == 0 {
			nt.ConversationID = t.ConversationID
		}
		if nt.Version == 0 {
			nt.Version = 1
		}
		nt.CreatedAt = h.Now()
		out = append(out, nt)
	}
	return out, nil
}

// summaryTask returns a new background summary task for conv, or nil when
// one is already live that has yet to read the context (pending, or
// sleeping before a retry): it reads it when it runs, after the caller's
// context was read, so it sees at least what the caller saw. A running one
// may have read the context before the caller's run added to it, and would
// find nothing to summarize in what it read, or summarize less: it does not
// stand in for this one. Summaries of a conversation run one at a time (see
// dispatch), so the new one runs after it, on the context it left.
func (h *Harness) summaryTask(ctx context.Context, conv int64) (*Task, error) {
	live, err := h.store.LiveTasks(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range live {
		if t.Kind == KindSummary && t.ConversationID == conv && (t.State == Pending || t.State == Sleeping) {
			return nil, nil
		}
	}
	id, err := h.store.MintID()
	if err != nil {
		return nil, err
	}
	return &Task{ID: id, ConversationID: conv, Kind: KindSummary, Version: 1, State: Pending, Background: true,
		Checkpoint: mustRaw(summaryCheckpoint{}), CreatedAt: h.Now()}, nil
}

// summaryData is a summary entry's record: which entries it replaced in the
// model's context (they stay in the store and the trace) and whether it was
// written from outside text.
type summaryData struct {
	OutsideText   bool  `json:"outside_text,omitempty"`
	Replaced      int   `json:"replaced"`       // entries the summary stands in for
	FirstReplaced int64 `json:"first_replaced"` // the first of them
	LastReplaced  int64 `json:"last_replaced"`  // the last; the context resumes at Head
	TokensBefore  int   `json:"tokens_before"`  // the context's estimated size when summarized
}

type summaryCheckpoint struct {
	Attempt int `json:"attempt,omitempty"`
}

// summary is the background compaction task: it summarizes everything but
// the most recent entries into a summary entry whose Head is the first
// entry kept verbatim.
type summary struct{}

func (summary) Step(ctx context.Context, sc *StepContext, t Task) (StepResult, error) {
	h := sc.h
	var cp summaryCheckpoint
	_ = json.Unmarshal(t.Checkpoint, &cp)
	headBefore, _ := h.store.LatestHead(ctx, t.ConversationID)
	c, err := h.BuildContext(ctx, t.ConversationID)
	if err != nil {
		return StepResult{}, err
	}
	// Cut at an owner message so no tool call is split from its result.
	cut := len(c.Entries) - h.opts.Compaction.KeepRecent
	for cut > 0 && cut < len(c.Entries) && c.Entries[cut].Kind != OwnerMessage {
		cut++
	}
	if cut <= 0 || cut >= len(c.Entries) {
		return StepResult{Task: t.end(h.Now(), Completed, "nothing to summarize")}, nil
	}
	msgs := []Message{{Role: "system", Content: "You write concise summaries of conversations for your own later use."}}
	if head, err := h.store.LatestHead(ctx, t.ConversationID); err == nil && head.Kind == SummaryEntry {
		msgs = append(msgs, Message{Role: "user", Content: "[summary of the earlier conversation]\n" + head.Text})
	}
	msgs = append(msgs, Messages(c.Entries[:cut])...)
	msgs = append(msgs, Message{Role: "user", Content: "[harness] Summarize the conversation so far: facts, decisions, open tasks, file names. Plain text."})
	resp, err := h.opts.Model.Stream(ctx, ModelRequest{Model: h.opts.DefaultModel, Messages: msgs}, nil)
	if err != nil {
		if ctx.Err() != nil {
			return StepResult{}, ctx.Err()
		}
		if IsTransient(err) && cp.Attempt < h.opts.Retry.Max {
			cp.Attempt++
			return StepResult{Task: h.sleepForRetry(t, cp.Attempt, cp)}, nil
		}
		return StepResult{Task: t.end(h.Now(), Failed, err.Error())}, nil
	}
	if resp.Model == "" {
		resp.Model = h.opts.DefaultModel
	}
	id, err := h.store.MintID()
	if err != nil {
		return StepResult{}, err
	}
	entry := Entry{ID: id, ConversationID: t.ConversationID, Kind: SummaryEntry, Text: resp.Text, At: h.Now(), RunID: t.ID, Head: c.Entries[cut].ID}
	// A reset (or another summary) while the model wrote this one: it
	// summarizes a context that is gone, so it is dropped.
	if headNow, _ := h.store.LatestHead(ctx, t.ConversationID); headNow.ID != headBefore.ID {
		return StepResult{Task: t.end(h.Now(), Completed, "the context changed while summarizing"), Usage: modelUsage(t.ConversationID, resp)}, nil
	}
	// A summary written while reading outside text may carry it on, so it
	// counts as outside text itself (see outsideInContext).
	tainted := headBefore.Kind == SummaryEntry && summaryHasOutside(headBefore)
	for _, e := range c.Entries[:cut] {
		tainted = tainted || e.Kind == OutsideText
	}
	// The trace shows where the summary stands in for older entries.
	entry.Data = mustRaw(summaryData{OutsideText: tainted, Replaced: cut, FirstReplaced: c.Entries[0].ID,
		LastReplaced: c.Entries[cut-1].ID, TokensBefore: c.Tokens})
	return StepResult{Task: t.end(h.Now(), Completed, ""), Entries: []Entry{entry}, Usage: modelUsage(t.ConversationID, resp)}, nil
}
