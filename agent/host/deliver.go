package host

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/durable"
)

// Deliver is the hub of the sandbox's agents (agents.Hub): it admits the
// message into a conversation of its own in the receiver (keyed by the
// delivery, so a replay admits nothing twice) and waits for the reply.
func (s *Host) Deliver(ctx context.Context, d agents.Delivery) (agents.Reply, error) {
	rts := s.runtimes()
	main, to := rts[agents.Main], rts[d.To]
	if main == nil || s.closing.Load() {
		return agents.Reply{}, s.closingErr(ctx)
	}
	// The registry as it is now, not as it was when the sender opened: a
	// list changed since (or an agent deleted and made again) counts.
	from, err := s.registry.Get(ctx, main.Harness.Store(), d.From)
	switch {
	case err != nil && s.closing.Load():
		return agents.Reply{}, s.closingErr(ctx)
	case err != nil:
		return agents.Reply{}, err
	case to == nil:
		return agents.Reply{}, fmt.Errorf("agent %q: %w", d.To, agents.ErrNoAgent)
	case from.Kind == agents.KindWorker:
		return agents.Reply{}, fmt.Errorf("%w: the worker messages no agent", agents.ErrNotAllowed)
	case d.To == agents.Worker && !strings.HasPrefix(d.Key, "task:"):
		return agents.Reply{}, fmt.Errorf("%w: the worker takes tasks through delegate", agents.ErrNotAllowed)
	case d.To != agents.Worker && !slices.Contains(from.MayMessage, d.To):
		return agents.Reply{}, fmt.Errorf("%w: %s may message %s", agents.ErrNotAllowed, d.From, listOrNone(from.MayMessage))
	}
	h := to.Harness
	conv, err := s.inbox(ctx, h, d)
	if err == nil {
		var sub durable.Submission
		if sub, err = h.Submit(ctx, conv, durable.Input{Text: d.Text, RequestID: d.Key, From: d.From, Hops: d.Hops}); err == nil {
			return s.awaitReply(ctx, h, d, conv, sub)
		}
	}
	if s.closing.Load() || errors.Is(err, durable.ErrClosed) { // storage closes under the sender too: it replays on reopen
		return agents.Reply{}, s.closingErr(ctx)
	}
	return agents.Reply{}, fmt.Errorf("deliver to %s: %w", d.To, err)
}

// awaitReply waits for the receiver's answer to sub.
func (s *Host) awaitReply(ctx context.Context, h *durable.Harness, d agents.Delivery, conv int64, sub durable.Submission) (agents.Reply, error) {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.MessageTimeout)
	defer cancel()
	sub, err := h.WaitSubmission(wctx, sub.ID)
	switch {
	case ctx.Err() != nil:
		return agents.Reply{}, ctx.Err()
	case errors.Is(err, durable.ErrClosed):
		if s.closing.Load() {
			return agents.Reply{}, s.closingErr(ctx)
		}
		return agents.Reply{}, &agents.NoReplyError{To: d.To, ConversationID: conv, Reason: "the agent was deleted or restarted meanwhile"}
	case wctx.Err() != nil:
		return agents.Reply{}, &agents.NoReplyError{To: d.To, ConversationID: conv, Reason: fmt.Sprintf("no reply within %s; its run goes on", s.cfg.MessageTimeout)}
	case err != nil:
		return agents.Reply{}, err
	case sub.Status != durable.Done:
		return agents.Reply{}, &agents.NoReplyError{To: d.To, ConversationID: conv, Reason: cmp.Or(sub.Reason, string(sub.Status))}
	}
	e, err := h.Store().Entry(ctx, sub.AnswerEntryID)
	if err != nil {
		return agents.Reply{}, fmt.Errorf("read the reply of %s: %w", d.To, err)
	}
	reply := agents.Reply{Text: e.Text, ConversationID: conv, RunID: sub.TaskID}
	if d.To == agents.Worker {
		if reply.Sources, err = sources(ctx, h.Store(), conv, sub.TaskID); err != nil {
			return agents.Reply{}, err
		}
	}
	return reply, nil
}

// closingErr waits for the sender's step to be cancelled by the storage
// closing under it (its tool call then replays on reopen); if storage did
// not close after all within a minute, the delivery fails instead.
func (s *Host) closingErr(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return errors.New("the agents' storage was closing; send again")
	}
}

// inbox returns the receiver's conversation for delivery d, making it on
// the first delivery (the conversation and the key that finds it again in
// one commit).
func (s *Host) inbox(ctx context.Context, h *durable.Harness, d agents.Delivery) (int64, error) {
	key := "inbox." + d.Key
	if v, err := h.Store().Setting(ctx, key); err != nil {
		return 0, err
	} else if v != "" {
		var conv int64
		_, err := fmt.Sscan(v, &conv)
		return conv, err
	}
	id, err := h.Store().MintID()
	if err != nil {
		return 0, err
	}
	title := fmt.Sprintf("message from %s (hop %d)", d.From, d.Hops)
	if d.To == agents.Worker {
		title = "task from " + d.From
	}
	c := durable.Conversation{ID: id, Title: title, CreatedAt: h.Now(), Settings: map[string]string{"from_agent": d.From}}
	if err := h.Commit(ctx, durable.Writes{Conversations: []durable.Conversation{c}, Settings: map[string]string{key: fmt.Sprint(id)}}); err != nil {
		return 0, fmt.Errorf("open a conversation for the message: %w", err)
	}
	return id, nil
}

// sources lists the pages the worker fetched in run.
func sources(ctx context.Context, st *durable.Store, conv, run int64) ([]agents.Source, error) {
	entries, err := st.RunEntries(ctx, conv, run)
	if err != nil {
		return nil, err
	}
	out := []agents.Source{}
	for _, e := range entries {
		var d struct {
			Tool     string `json:"tool"`
			FinalURL string `json:"final_url"`
			SHA256   string `json:"sha256"`
		}
		if e.Kind == durable.OutsideText && jsonInto(e.Data, &d) && d.Tool == "fetch_url" {
			out = append(out, agents.Source{URL: d.FinalURL, SHA256: d.SHA256})
		}
	}
	return out, nil
}

func jsonInto(raw []byte, v any) bool { return len(raw) > 0 && json.Unmarshal(raw, v) == nil }

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "no agent (its may_message list is empty)"
	}
	return "only " + strings.Join(l, ", ")
}
