package host

import (
	"context"
	"strconv"

	"github.com/affido/affido/agent/durable"
)

const currentKey = "current_conversation"

// CurrentConversation is the conversation an agent answers in when a
// request names none: the root until another is made current.
func CurrentConversation(ctx context.Context, h *durable.Harness) (int64, error) {
	v, err := h.Store().Setting(ctx, currentKey)
	if err != nil {
		return 0, err
	}
	if v == "" {
		return durable.RootConversation, nil
	}
	return strconv.ParseInt(v, 10, 64)
}

// SetCurrentConversation makes conversation id the agent's current one.
func SetCurrentConversation(ctx context.Context, h *durable.Harness, id int64) error {
	return h.Store().SetSetting(ctx, currentKey, strconv.FormatInt(id, 10))
}
