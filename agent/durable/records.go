package durable

import (
	"encoding/json"
	"time"
)

// RootConversation is the ID of the conversation every store starts with.
const RootConversation int64 = 1

// Conversation is one topic of the owner's: its entries form the context.
type Conversation struct {
	ID        int64             `json:"id"`
	Title     string            `json:"title,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	Settings  map[string]string `json:"settings,omitempty"` // e.g. "model", "citations"
	Archived  bool              `json:"archived,omitempty"` // put away by the owner: not listed unless asked for
}

// EntryKind says what an entry is.
type EntryKind string

// Entry kinds. Entries are append-only; nothing rewrites one.
const (
	OwnerMessage     EntryKind = "owner_message"     // what the owner typed
	OutsideText      EntryKind = "outside_text"      // text from elsewhere (a fetched page, search results), never an instruction
	AssistantMessage EntryKind = "assistant_message" // a model reply, with its tool calls
	ToolCallEntry    EntryKind = "tool_call"         // a tool's intent, committed before it runs
	ToolResultEntry  EntryKind = "tool_result"       // a tool's result, verbatim after redaction
	ResetMarker      EntryKind = "reset"             // cuts the context; the conversation stays
	SummaryEntry     EntryKind = "summary"           // compaction: replaces the entries before Head
	ErrorEntry       EntryKind = "error"             // a run that ended in an error
	ReminderEntry    EntryKind = "reminder"          // a reminder that fired
	HintEntry        EntryKind = "hint"              // a server-built note for the model (a /skill invocation)
	CitationEntry    EntryKind = "citation"          // room for the citations gate
	ApprovalEntry    EntryKind = "approval"          // a tool call waiting for the owner (Data: the Approval)
	DecisionEntry    EntryKind = "approval_decision" // the owner's decision on an approval (Data: the Decision)
	PolicyEntry      EntryKind = "policy"            // a change of the owner's rules, for the trace
	JobRunEntry      EntryKind = "job_run"           // a scheduled job ran (Data: due, fired, lateness, missed times)
	AgentEntry       EntryKind = "agent"             // a named agent was created, changed or deleted, for the trace
	StoppedEntry     EntryKind = "stopped"           // the owner stopped a run (Text: why); not part of the context
	GateEntry        EntryKind = "gate"              // the citation gate refused a reply (Text: why; the run tries again); not part of the context
	RetryEntry       EntryKind = "retry"             // a model call failed for now and is tried again (Text: why and when); not part of the context
	NoteEntry        EntryKind = "note"              // notes were written (Data: which, by whom, the version, size and text), for the trace; not part of the context
)

// ToolCall is one call the model asked for.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// Entry is one record of a conversation.
type Entry struct {
	ID             int64           `json:"id"`
	ConversationID int64           `json:"conversation_id"`
	Kind           EntryKind       `json:"kind"`
	Text           string          `json:"text,omitempty"`
	At             time.Time       `json:"at"`
	RunID          int64           `json:"run_id,omitempty"` // the task that wrote it
	Model          string          `json:"model,omitempty"`  // assistant messages
	ToolCalls      []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID     string          `json:"tool_call_id,omitempty"` // tool call and result
	ToolName       string          `json:"tool_name,omitempty"`
	Arguments      json.RawMessage `json:"arguments,omitempty"`
	IsError        bool            `json:"is_error,omitempty"`
	Head           int64           `json:"head,omitempty"` // summary: first kept entry; reset: itself
	Data           json.RawMessage `json:"data,omitempty"`
	CommitSeq      int64           `json:"commit_seq,omitempty"` // set by the store
}

// TaskState is where a task is in its life.
type TaskState string

// Task states.
const (
	Pending    TaskState = "pending"    // ready to run its next step
	Running    TaskState = "running"    // a step is executing (pending again after a crash)
	Sleeping   TaskState = "sleeping"   // waiting for Deadline; the checkpoint holds the next step
	Waiting    TaskState = "waiting"    // waiting for the owner (an approval) until Deadline, when it expires
	Completing TaskState = "completing" // outcome decided, owned work draining
	Terminal   TaskState = "terminal"   // done; Outcome says how
)

// Outcomes of terminal tasks.
const (
	Completed = "completed"
	Failed    = "failed"
	Aborted   = "aborted"
	Faulted   = "faulted" // a step failed to make durable progress or panicked
)

// Task is a unit of work that checkpoints after every step.
type Task struct {
	ID             int64           `json:"id"`
	ConversationID int64           `json:"conversation_id"`
	Kind           string          `json:"kind"`
	Version        int             `json:"version"`
	State          TaskState       `json:"state"`
	Checkpoint     json.RawMessage `json:"checkpoint"`
	Deadline       *time.Time      `json:"deadline,omitempty"`
	Outcome        string          `json:"outcome,omitempty"`
	Error          string          `json:"error,omitempty"`
	SubmissionID   int64           `json:"submission_id,omitempty"`
	Background     bool            `json:"background,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	EndedAt        *time.Time      `json:"ended_at,omitempty"`
}

// Live reports whether the task still has work to do.
func (t Task) Live() bool { return t.State != Terminal }

// SubmissionStatus is where a submitted input is.
type SubmissionStatus string

// Submission statuses.
const (
	Queued     SubmissionStatus = "queued"     // admitted, not yet in the conversation
	Placed     SubmissionStatus = "placed"     // its owner message is an entry
	Done       SubmissionStatus = "done"       // answered
	Unanswered SubmissionStatus = "unanswered" // the run ended without an answer
)

// Input is what the owner submits.
type Input struct {
	Text      string            `json:"text"`
	RequestID string            `json:"request_id,omitempty"`
	Model     string            `json:"model,omitempty"`
	Options   map[string]string `json:"options,omitempty"` // per-prompt settings, e.g. citations
	Hint      string            `json:"hint,omitempty"`    // server-built note placed right after the message
	// From names the agent that sent this input (send_message, delegate):
	// it is placed as outside text, never as the owner's words. Empty for
	// the owner.
	From string `json:"from,omitempty"`
	// Hops counts the messages in the chain that led here: 1 for a message
	// an agent sent on the owner's behalf, one more for each forward.
	Hops int `json:"hops,omitempty"`
}

// Submission is one admitted input and what became of it.
type Submission struct {
	ID             int64            `json:"id"`
	ConversationID int64            `json:"conversation_id"`
	RequestID      string           `json:"request_id,omitempty"`
	Status         SubmissionStatus `json:"status"`
	Input          Input            `json:"input"`
	TaskID         int64            `json:"task_id"`
	AnswerEntryID  int64            `json:"answer_entry_id,omitempty"`
	Reason         string           `json:"reason,omitempty"`
	CreatedAt      time.Time        `json:"created_at"`
}

// UsageDelta adds to the usage ledger, in the same commit as its entry.
type UsageDelta struct {
	ConversationID int64
	Kind           string // "model" or "tool"
	Name           string
	InputTokens    int64
	OutputTokens   int64
	Calls          int64
}

// Usage is a conversation's ledger: tokens per model, calls per tool.
type Usage struct {
	Models map[string]ModelUsage `json:"models"`
	Tools  map[string]int64      `json:"tools"`
}

// ModelUsage is one model's totals.
type ModelUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	Calls        int64 `json:"calls"`
}

// Writes is one atomic commit: all of it lands, or none.
type Writes struct {
	Conversations []Conversation // inserted; IDs never repeat
	Entries       []Entry        // inserted; IDs never repeat
	Tasks         []Task         // upserted by ID
	Submissions   []Submission   // upserted by ID
	Usage         []UsageDelta
	Settings      map[string]string // host settings, upserted (rules, for example)
	// Notes are written by name, each only if the stored version is one
	// less than its Version (0: none stored yet); otherwise nothing of the
	// commit is, and it fails with ErrNoteChanged.
	Notes []Note
}

// Note is a named text the agent keeps outside every conversation (the
// owner's notes, an agent's work notes).
type Note struct {
	Name      string    `json:"name"`
	Text      string    `json:"text"`
	Version   int64     `json:"version"` // 1 for the first write, one more for each
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	UpdatedBy string    `json:"updated_by,omitempty"` // "owner", or the agent whose tool wrote it
}
