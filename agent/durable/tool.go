package durable

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Tool is something the model may call.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // JSON schema of the arguments
	// Safe tools may run again after a crash interrupted them; any other
	// tool is reported to the model as interrupted instead. Default: not safe.
	Safe bool
	// ReadOnly tools change nothing and reach nothing outside the agent
	// (reading the workspace, searching the corpus): a policy may let them
	// run while outside text is in the context.
	ReadOnly bool
	// AlwaysAsk tools ask the owner on every call: no rule can allow them
	// (creating a scheduled job from a tool, for example). AskReason, if
	// set, is what such a call says to the owner instead of the default.
	AlwaysAsk bool
	AskReason string
	// AsksAfterOutside tools ask the owner whenever outside text has
	// entered the conversation since the owner's last message, even if a
	// reset or a summary took it out of the context since, and whatever the
	// rules say: their effect outlives the conversation (a note every later
	// run reads), so what the model read must not steer them.
	AsksAfterOutside bool
	// Preapproved tools were allowed by the owner outside the agent (a
	// connector's tool set to allow in the manager): a policy runs them
	// without a rule, but outside text in the context still makes them ask.
	Preapproved bool
	// ActsOnPage tools act on a web page the agent opened (browser_click,
	// browser_type): a policy runs them without a rule until outside text
	// is in the context; then they ask, unless the owner's rule allows
	// acting on that site.
	ActsOnPage bool
	Execute    func(ctx context.Context, call ToolCallContext, args json.RawMessage) (ToolResult, error)
}

// ToolCallContext tells a tool where it runs.
type ToolCallContext struct {
	ConversationID int64
	RunID          int64
	CallID         string
	Now            time.Time
	Store          *Store
	// Replay is true when the tool runs again after a crash interrupted it.
	Replay bool
}

// ToolResult is a tool's answer. Output is what the model reads.
type ToolResult struct {
	Output  string
	IsError bool
	Data    json.RawMessage
	// Tasks are created in the same commit as the result (a reminder's
	// sleeping task, for example); IDs are assigned by the harness.
	Tasks []Task
	// Updates replace existing tasks in the same commit (cancelling a reminder).
	Updates []TaskUpdate
	// Outside is text the tool brought in from elsewhere (a fetched page,
	// search results). It is stored as its own OutsideText entry, with its
	// provenance, and reaches the model marked as outside text.
	Outside *Outside
}

// TaskUpdate replaces an existing task: Write as the tool wants it stored,
// Read as the tool read it. If the task was written since (it fired, or
// ran), nothing of the call is committed and the step runs again, so a
// Safe tool runs again on what is stored now; it never writes over a task
// that moved on.
type TaskUpdate struct {
	Read, Write Task
}

// Outside is text from a source that is not the owner.
type Outside struct {
	Text string
	// Data is the provenance, a JSON object whose "source" names where the
	// text came from (a URL, a search engine) for the marker the model sees.
	Data json.RawMessage
}

// runTool executes a tool, turning errors and panics into error results the
// model can read.
func runTool(ctx context.Context, tool Tool, call ToolCallContext, args json.RawMessage) (res ToolResult) {
	defer func() {
		if p := recover(); p != nil {
			res = ToolResult{Output: fmt.Sprintf("tool %s failed: panic: %v", tool.Name, p), IsError: true}
		}
	}()
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	if !json.Valid(args) {
		return ToolResult{Output: fmt.Sprintf("invalid arguments for %s: not JSON", tool.Name), IsError: true}
	}
	out, err := tool.Execute(ctx, call, args)
	if err != nil {
		return ToolResult{Output: fmt.Sprintf("tool %s failed: %v", tool.Name, err), IsError: true}
	}
	return out
}

// InterruptedOutput is what the model is told about an unsafe tool a crash
// interrupted.
func InterruptedOutput(name string) string {
	return fmt.Sprintf("[error] Tool %s was interrupted and may have partially run. Check its effects before running it again.", name)
}

// Schema is the JSON schema of a tool's arguments: an object with props
// (JSON text of the properties) of which required must be given.
func Schema(props string, required ...string) json.RawMessage {
	req, _ := json.Marshal(required)
	return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `}`)
}

// IDArgument reads a tool call's "id" argument, which models give as a
// number or a string; what names the id in the error is "a reminder id
// from list_reminders", say.
func IDArgument(args json.RawMessage, what string) (int64, error) {
	var a struct {
		ID json.RawMessage `json:"id"`
	}
	if err := json.Unmarshal(args, &a); err != nil {
		return 0, fmt.Errorf("invalid arguments: %w", err)
	}
	id, err := strconv.ParseInt(strings.Trim(string(a.ID), `"`), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("id must be %s", what)
	}
	return id, nil
}
