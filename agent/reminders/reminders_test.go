package reminders_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
	"github.com/affido/affido/agent/reminders"
	"github.com/affido/affido/internal/gatewayapi"
)

// setOnce asks for one reminder that is due already, then answers "ok".
type setOnce struct{}

func (setOnce) Stream(_ context.Context, req durable.ModelRequest, _ func(string)) (durable.ModelResponse, error) {
	if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
		return durable.ModelResponse{Text: "ok"}, nil
	}
	args, _ := json.Marshal(map[string]string{"text": "stretch", "at": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)})
	return durable.ModelResponse{ToolCalls: []durable.ToolCall{{ID: "c1", Name: "set_reminder", Arguments: args}}}, nil
}

// keyOfFreshSandbox sets one reminder in a brand-new store (as after a reset)
// and returns the notification key and the reminder's task id.
func keyOfFreshSandbox(t *testing.T) (string, int64) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "session.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	keys := []string{}
	notify := func(_ context.Context, n gatewayapi.Notification) error {
		mu.Lock()
		keys = append(keys, n.Key)
		mu.Unlock()
		return nil
	}
	h, err := durable.Open(ctx, st, durable.Options{Model: setOnce{}, DefaultModel: "m", Tools: reminders.Tools(),
		Kinds: map[string]durable.TaskKind{reminders.Kind: reminders.Task{Notify: notify}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Resume(); err != nil {
		t.Fatal(err)
	}
	sub, err := h.Submit(ctx, durable.RootConversation, durable.Input{Text: "remind me"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := h.WaitSubmission(wctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 1 {
		t.Fatalf("notified %d times", len(keys))
	}
	tasks, err := st.Tasks(ctx, nil, durable.Scan{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var id int64
	for _, tk := range tasks.Items {
		if tk.Kind == reminders.Kind {
			id = tk.ID
		}
	}
	return keys[0], id
}

// After a reset task ids start again; the notification key must not, or the
// manager would drop the new reminder as one it has queued already.
func TestNotificationKeysStayUniqueAcrossResets(t *testing.T) {
	k1, id1 := keyOfFreshSandbox(t)
	k2, id2 := keyOfFreshSandbox(t)
	if id1 != id2 {
		t.Fatalf("the two fresh stores gave the reminders task ids %d and %d; the test needs them equal", id1, id2)
	}
	if k1 == k2 {
		t.Fatalf("two reminders with the same task id %d got the same key %q", id1, k1)
	}
}
