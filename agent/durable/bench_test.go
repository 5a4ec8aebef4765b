package durable_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
)

// The durability decision in the README (synchronous=NORMAL or FULL for
// acknowledged submissions) comes from these two benchmarks:
//
//	go test -run '^$' -bench . -benchtime 2s ./agent/durable/

func benchStore(b *testing.B, sync string) *durable.Store {
	b.Helper()
	db, err := sqlite.OpenWith(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{Synchronous: sync})
	if err != nil {
		b.Fatal(err)
	}
	s, err := durable.OpenStore(context.Background(), db)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// One step's commit: the task's checkpoint and the entry it wrote, atomically.
func BenchmarkStepCommit(b *testing.B) {
	for _, sync := range []string{"NORMAL", "FULL"} {
		b.Run("synchronous="+sync, func(b *testing.B) {
			s := benchStore(b, sync)
			task := durable.Task{ConversationID: 1, Kind: "bench", State: durable.Running, Checkpoint: json.RawMessage(`{"phase":"tool"}`)}
			var err error
			if task.ID, err = s.MintID(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id, err := s.MintID()
				if err != nil {
					b.Fatal(err)
				}
				e := durable.Entry{ID: id, ConversationID: 1, Kind: durable.AssistantMessage, Text: fmt.Sprintf("step %d", i), At: time.Now().UTC()}
				if err := s.Commit(context.Background(), durable.Writes{Entries: []durable.Entry{e}, Tasks: []durable.Task{task}}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A whole one-tool turn: submit, the model calls a tool, the tool runs, the
// model answers; every step committed.
func BenchmarkOneToolTurn(b *testing.B) {
	tool := durable.Tool{Name: "add", Safe: true, Execute: func(context.Context, durable.ToolCallContext, json.RawMessage) (durable.ToolResult, error) {
		return durable.ToolResult{Output: "3"}, nil
	}}
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		if lastMsg(req).Role == "tool" {
			return durable.ModelResponse{Text: "it is 3"}, nil
		}
		return durable.ModelResponse{ToolCalls: []durable.ToolCall{{ID: "c1", Name: "add", Arguments: json.RawMessage(`{"a":1,"b":2}`)}}}, nil
	})
	for _, sync := range []string{"NORMAL", "FULL"} {
		b.Run("synchronous="+sync, func(b *testing.B) {
			s := benchStore(b, sync)
			h, err := durable.Open(context.Background(), s, durable.Options{Model: model, DefaultModel: "bench", Tools: []durable.Tool{tool}})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			if err := h.Resume(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sub, err := h.Submit(context.Background(), durable.RootConversation, durable.Input{Text: "add 1 and 2"})
				if err != nil {
					b.Fatal(err)
				}
				if sub, err = h.WaitSubmission(context.Background(), sub.ID); err != nil || sub.Status != durable.Done {
					b.Fatalf("%+v %v", sub, err)
				}
			}
		})
	}
}
