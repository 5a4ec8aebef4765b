package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/affido/affido/agent/durable"
)

// Delivery is one message from an agent to another, or a task delegated
// to the worker.
type Delivery struct {
	From, To string
	Text     string
	// Hops is the message's place in its chain (1 for the first).
	Hops int
	// Key is unique to the sending tool call: delivering it again (a replay
	// after a crash) admits nothing new and waits for the same reply.
	Key string
}

// Source is a page the worker read for a delegated task.
type Source struct {
	URL    string `json:"url"`
	SHA256 string `json:"sha256"`
}

// Reply is what the receiver answered.
type Reply struct {
	Text           string   `json:"text"`
	ConversationID int64    `json:"conversation_id"` // the receiver's conversation that holds the exchange
	RunID          int64    `json:"run_id"`
	Sources        []Source `json:"sources,omitempty"`
}

// Hub delivers messages between the agents of one sandbox and waits for
// the reply. It returns ErrNoAgent for an unknown receiver, ErrNotAllowed
// when the sender may not message it, and *NoReplyError when the receiver's
// run ended without an answer or did not answer in time. A Delivery with
// the same Key is admitted once.
type Hub interface {
	Deliver(ctx context.Context, d Delivery) (Reply, error)
}

// NoReplyError says why a delivered message brought no reply.
type NoReplyError struct {
	To             string
	ConversationID int64
	Reason         string
}

func (e *NoReplyError) Error() string {
	return fmt.Sprintf("%s did not reply (%s); the message was delivered and stays in its conversation %d", e.To, e.Reason, e.ConversationID)
}

// hopsOf is the hop count of the run a tool call belongs to: 0 for a run
// the owner started.
func hopsOf(ctx context.Context, c durable.ToolCallContext) (int, error) {
	in, err := durable.RunInput(ctx, c.Store, c.RunID)
	return in.Hops, err
}

// callKey names one tool call of one agent for good: by the agent's ID,
// which a rename keeps, so a call replayed after a rename is the same delivery.
func callKey(kind string, self Agent, c durable.ToolCallContext) string {
	return fmt.Sprintf("%s:%s:%d:%s", kind, self.ID, c.RunID, c.CallID)
}

// SendMessage returns the send_message tool of agent self. It is safe to
// replay: a delivery is keyed by its call, so a message sent just before a
// crash is delivered once. It is not read-only, so it asks while outside
// text is in the sender's context.
func SendMessage(self Agent, hub Hub) durable.Tool {
	return durable.Tool{
		Name:        "send_message",
		Description: "Send a message to another of the owner's agents (one you may message) and wait for its reply, which comes back as outside text.",
		Parameters:  durable.Schema(`"to":{"type":"string"},"text":{"type":"string"}`, "to", "text"),
		Safe:        true,
		Execute: func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
			var a struct{ To, Text string }
			if err := json.Unmarshal(args, &a); err != nil {
				return durable.ToolResult{}, fmt.Errorf("invalid arguments: %w", err)
			}
			if strings.TrimSpace(a.Text) == "" || strings.TrimSpace(a.To) == "" {
				return durable.ToolResult{}, errors.New("to and text are required")
			}
			if len(a.Text) > 64<<10 {
				return durable.ToolResult{}, errors.New("text is at most 64 KiB")
			}
			hops, err := hopsOf(ctx, c)
			if err != nil {
				return durable.ToolResult{}, err
			}
			if hops+1 > MaxHops {
				return durable.ToolResult{}, fmt.Errorf("%w: this message would be hop %d of a chain, and chains stop at %d hops; answer instead of passing it on", ErrHopLimit, hops+1, MaxHops)
			}
			reply, err := hub.Deliver(ctx, Delivery{From: self.Name, To: a.To, Text: a.Text, Hops: hops + 1, Key: callKey("msg", self, c)})
			if err != nil {
				return durable.ToolResult{}, err
			}
			data, _ := json.Marshal(map[string]any{"source": "agent " + a.To, "from_agent": a.To, "hops": hops + 1,
				"conversation_id": reply.ConversationID, "run_id": reply.RunID})
			return durable.ToolResult{
				Output:  fmt.Sprintf("%s replied (hop %d; its conversation %d). The reply follows as outside text.", a.To, hops+1, reply.ConversationID),
				Data:    data,
				Outside: &durable.Outside{Text: reply.Text, Data: data},
			}, nil
		},
	}
}

// Delegate returns the delegate tool of agent self: the worker, which has
// web tools and none of the owner's data, does the task and its answer
// comes back as outside text with the pages it read.
func Delegate(self Agent, hub Hub) durable.Tool {
	return durable.Tool{
		Name: "delegate",
		Description: "Give a task to the worker, an agent that can fetch web pages and search the web but sees none of the owner's data " +
			"(only the task text). Its answer comes back as outside text, with the URLs and sha256 of the pages it read.",
		Parameters: durable.Schema(`"task":{"type":"string"}`, "task"),
		Safe:       true,
		Execute: func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
			var a struct{ Task string }
			if err := json.Unmarshal(args, &a); err != nil {
				return durable.ToolResult{}, fmt.Errorf("invalid arguments: %w", err)
			}
			if strings.TrimSpace(a.Task) == "" {
				return durable.ToolResult{}, errors.New("task is required")
			}
			if len(a.Task) > 16<<10 {
				return durable.ToolResult{}, errors.New("task is at most 16 KiB")
			}
			hops, err := hopsOf(ctx, c)
			if err != nil {
				return durable.ToolResult{}, err
			}
			if hops+1 > MaxHops {
				return durable.ToolResult{}, fmt.Errorf("%w: delegating would be hop %d of a chain, and chains stop at %d hops", ErrHopLimit, hops+1, MaxHops)
			}
			reply, err := hub.Deliver(ctx, Delivery{From: self.Name, To: Worker, Text: a.Task, Hops: hops + 1, Key: callKey("task", self, c)})
			if err != nil {
				return durable.ToolResult{}, err
			}
			if reply.Sources == nil {
				reply.Sources = []Source{}
			}
			data, _ := json.Marshal(map[string]any{"source": "the worker (delegated task)", "from_agent": Worker, "hops": hops + 1,
				"conversation_id": reply.ConversationID, "run_id": reply.RunID, "sources": reply.Sources})
			var b strings.Builder
			fmt.Fprintf(&b, "The worker answered (its conversation %d); the answer follows as outside text.", reply.ConversationID)
			if len(reply.Sources) == 0 {
				b.WriteString(" It read no pages.")
			} else {
				b.WriteString(" Pages it read:")
				for _, s := range reply.Sources {
					fmt.Fprintf(&b, "\n- %s (sha256 %s)", s.URL, s.SHA256)
				}
			}
			return durable.ToolResult{Output: b.String(), Data: data, Outside: &durable.Outside{Text: reply.Text, Data: data}}, nil
		},
	}
}
