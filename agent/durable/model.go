package durable

import (
	"context"
	"encoding/json"
	"errors"
)

// Message is one message of a model request, in the OpenAI chat shape.
type Message struct {
	Role       string     `json:"role"` // system, user, assistant, tool
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolSpec describes a tool to the model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// ModelRequest is one call to a model.
type ModelRequest struct {
	Model    string
	Messages []Message
	Tools    []ToolSpec
}

// TokenUsage is what a model call cost.
type TokenUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// ModelResponse is a finished model call: the text and tool calls the
// stream carried, its usage and why it stopped.
type ModelResponse struct {
	Model      string
	Text       string
	ToolCalls  []ToolCall
	Usage      TokenUsage
	StopReason string
}

// Model streams one completion. onDelta receives text as it arrives; the
// response holds the whole of it. Errors wrapped with Transient are retried
// with backoff; any other error ends the run.
type Model interface {
	Stream(ctx context.Context, req ModelRequest, onDelta func(text string)) (ModelResponse, error)
}

type transientError struct{ err error }

func (e transientError) Error() string { return e.err.Error() }
func (e transientError) Unwrap() error { return e.err }

// Transient marks err as worth retrying (a timeout, a 429, a 5xx).
func Transient(err error) error { return transientError{err} }

// StopError ends a run with Reason as the submission's reason (for
// example "spend_limit"), instead of the generic "model_error".
type StopError struct {
	Reason string
	Err    error
}

func (e *StopError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *StopError) Unwrap() error { return e.Err }

// IsTransient reports whether err was marked with Transient.
func IsTransient(err error) bool {
	var t transientError
	return errors.As(err, &t)
}
