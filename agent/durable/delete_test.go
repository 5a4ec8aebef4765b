package durable_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
)

// A conversation is deleted whole (entries, tasks, submissions, usage,
// its search rows) and only when nothing of it is in flight. Tried: a
// conversation whose run waits (refused, nothing deleted), the root
// conversation, one that does not exist, deleting twice.
func TestDeleteConversation(t *testing.T) {
	m := blockingModel{entered: make(chan struct{}, 1), cancelled: make(chan struct{}), release: make(chan struct{})}
	defer close(m.release)
	e := newEnv(t, durable.Options{Model: m})
	conv, err := e.store.MintID()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.h.Commit(ctx, durable.Writes{Conversations: []durable.Conversation{{ID: conv, CreatedAt: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	e.ask(conv, durable.Input{Text: "plant the tulips"})
	held, err := e.h.Submit(ctx, conv, durable.Input{Text: "hold the bulbs"})
	if err != nil {
		t.Fatal(err)
	}
	<-m.entered
	if err := e.store.DeleteConversation(ctx, conv); !errors.Is(err, durable.ErrLiveWork) {
		t.Fatalf("delete with a run in flight: %v", err)
	}
	if n := len(e.entries(conv)); n < 3 {
		t.Fatalf("a refused delete removed entries: %d left", n)
	}
	if _, err := e.h.Stop(ctx, held.TaskID); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.h.WaitIdle(wctx); err != nil {
		t.Fatal(err)
	}
	if n := tasksOf(t, e, conv); n < 2 {
		t.Fatalf("%d tasks before the delete", n)
	}
	if err := e.store.DeleteConversation(ctx, conv); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := e.store.Conversation(ctx, conv); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("the conversation after delete: %v", err)
	}
	if hits, err := e.store.Search(ctx, "tulips", 10); err != nil || len(hits) != 0 {
		t.Fatalf("search after delete: %v %v", hits, err)
	}
	if n := tasksOf(t, e, conv); n != 0 {
		t.Fatalf("%d tasks of the deleted conversation are left", n)
	}
	if err := e.store.DeleteConversation(ctx, conv); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	if err := e.store.DeleteConversation(ctx, durable.RootConversation); !errors.Is(err, durable.ErrRootConversation) {
		t.Fatalf("delete the root conversation: %v", err)
	}
}

// tasksOf counts conv's tasks in every state.
func tasksOf(t *testing.T, e *env, conv int64) int {
	t.Helper()
	all := []durable.TaskState{durable.Pending, durable.Running, durable.Sleeping, durable.Waiting, durable.Completing, durable.Terminal}
	p, err := e.store.Tasks(ctx, all, durable.Scan{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tk := range p.Items {
		if tk.ConversationID == conv {
			n++
		}
	}
	return n
}
