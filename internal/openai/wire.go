// Package openai is the OpenAI chat completions wire format, as far as
// Affido speaks it: the gateway (manager) reads and writes it, and the
// agent's model client sends and parses it.
package openai

import "encoding/json"

// ChatRequest is the OpenAI chat completions request, as far as we read it.
type ChatRequest struct {
	Model         string         `json:"model"`
	Messages      []ChatMessage  `json:"messages"`
	Tools         []ChatTool     `json:"tools,omitempty"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *StreamOptions `json:"stream_options,omitempty"`
	// Sampling settings SDKs commonly send; forwarded as decoded.
	Temperature         *float64 `json:"temperature,omitempty"`
	TopP                *float64 `json:"top_p,omitempty"`
	MaxTokens           *int64   `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int64   `json:"max_completion_tokens,omitempty"`
	Seed                *int64   `json:"seed,omitempty"`
}

// StreamOptions asks for a final usage chunk in a stream.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ChatMessage is one message.
type ChatMessage struct {
	Role       string         `json:"role"`
	Content    string         `json:"content"`
	ToolCalls  []ChatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

// ChatToolCall is a tool call in a message or a stream delta.
type ChatToolCall struct {
	Index    int    `json:"index"`
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments,omitempty"`
	} `json:"function"`
}

// ChatTool declares a tool.
type ChatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	} `json:"function"`
}

// ChatUsage is token usage.
type ChatUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// ChatChunk is one streamed chunk.
type ChatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Model   string        `json:"model"`
	Choices []ChunkChoice `json:"choices"`
	Usage   *ChatUsage    `json:"usage,omitempty"`
	Error   *ErrorBody    `json:"error,omitempty"`
}

// ChunkChoice is one choice of a chunk.
type ChunkChoice struct {
	Index        int        `json:"index"`
	Delta        ChunkDelta `json:"delta"`
	FinishReason *string    `json:"finish_reason"`
}

// ChunkDelta is the new part of a message.
type ChunkDelta struct {
	Role      string         `json:"role,omitempty"`
	Content   string         `json:"content,omitempty"`
	ToolCalls []ChatToolCall `json:"tool_calls,omitempty"`
}

// ErrorBody is the error object a provider may send in a stream or body.
type ErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type,omitempty"`
	Code    string `json:"code,omitempty"`
}

// ModelList is the answer of GET …/models.
type ModelList struct {
	Data   []ModelEntry `json:"data"`
	Object string       `json:"object"` // "list"
}

// ModelEntry is one model of a ModelList.
type ModelEntry struct {
	ID     string `json:"id"`
	Object string `json:"object"` // "model"
}

// NewModelList lists models as OpenAI does.
func NewModelList(models []string) ModelList {
	l := ModelList{Object: "list"}
	for _, m := range models {
		l.Data = append(l.Data, ModelEntry{ID: m, Object: "model"})
	}
	return l
}
