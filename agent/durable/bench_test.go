package durable_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/postgres"
	"github.com/affido/affido/agent/durable/postgres/pgtest"
	"github.com/affido/affido/agent/durable/sqlite"
)

// The durability decision in the README (synchronous=NORMAL or FULL for
// acknowledged submissions) comes from the first two benchmarks:
//
//	go test -run '^$' -bench . -benchtime 2s ./agent/durable/
//
// ./dev.sh bench runs BenchmarkStepCommit and BenchmarkRecover, which
// report their p50 and p99 besides the mean.

// reportLatency reports the p50 and p99 of ds, in ms.
func reportLatency(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	pct := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// benchBackends are the stores the commit benchmarks run on, side by side
// in one run: SQLite at both synchronous settings and, when the tests are
// given one (AFFIDO_TEST_POSTGRES_DSN), Postgres (a schema of the test
// database migrated by the real migration files; every commit also renews
// the lease, as in the stack).
var benchBackends = []string{"synchronous=NORMAL", "synchronous=FULL", "postgres"}

func benchStore(b *testing.B, backend string) *durable.Store {
	b.Helper()
	var db durable.DB
	var err error
	if backend == "postgres" {
		pgtest.DSN(b)
		db, err = pgtest.Opener(os.Getenv(pgtest.EnvDSN), postgres.Options{}, nil)(filepath.Join(b.TempDir(), "bench.db"))
	} else {
		db, err = sqlite.OpenWith(context.Background(), filepath.Join(b.TempDir(), "bench.db"), sqlite.Options{Synchronous: strings.TrimPrefix(backend, "synchronous=")})
	}
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

// One step's commit: the task's checkpoint and the entry it wrote,
// atomically; p50 and p99 are of the commit alone.
func BenchmarkStepCommit(b *testing.B) {
	for _, backend := range benchBackends {
		b.Run(backend, func(b *testing.B) {
			s := benchStore(b, backend)
			task := durable.Task{ConversationID: 1, Kind: "bench", State: durable.Running, Checkpoint: json.RawMessage(`{"phase":"tool"}`)}
			var err error
			if task.ID, err = s.MintID(); err != nil {
				b.Fatal(err)
			}
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id, err := s.MintID()
				if err != nil {
					b.Fatal(err)
				}
				task.Checkpoint = json.RawMessage(fmt.Sprintf(`{"phase":"tool","n":%d}`, i))
				e := durable.Entry{ID: id, ConversationID: 1, Kind: durable.AssistantMessage, Text: fmt.Sprintf("step %d", i), At: time.Now().UTC()}
				start := time.Now()
				if err := s.Commit(context.Background(), durable.Writes{Entries: []durable.Entry{e}, Tasks: []durable.Task{task}}); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(start))
			}
			reportLatency(b, ds)
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
	for _, backend := range benchBackends {
		b.Run(backend, func(b *testing.B) {
			s := benchStore(b, backend)
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

// counter is BenchmarkRecover's task kind: it counts, one checkpoint per
// step. In the child (first nil) it waits in its 10th step to be killed; in
// the parent it tells first of its first step and waits to be closed.
type counter struct{ first chan struct{} }

func (c counter) Step(ctx context.Context, sc *durable.StepContext, t durable.Task) (durable.StepResult, error) {
	if c.first != nil {
		c.first <- struct{}{}
		<-ctx.Done()
		return durable.StepResult{}, ctx.Err()
	}
	var cp struct{ N int }
	_ = json.Unmarshal(t.Checkpoint, &cp)
	if cp.N == 10 {
		fmt.Print("ready")
		awaitKill()
	}
	cp.N++
	t.Checkpoint, _ = json.Marshal(cp)
	return durable.StepResult{Task: t}, nil
}

func openCounter(path string, k counter) (*durable.Harness, error) {
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	store, err := durable.OpenStore(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	h, err := durable.Open(ctx, store, durable.Options{Kinds: map[string]durable.TaskKind{"counter": k}})
	if err != nil {
		store.Close()
		return nil, err
	}
	return h, h.Resume()
}

// TestRecoverChild is BenchmarkRecover's child: it runs a counter task
// until its 10th step and waits there to be killed.
func TestRecoverChild(t *testing.T) {
	path := os.Getenv("RECOVER_DB")
	if path == "" {
		t.Skip("helper process for BenchmarkRecover")
	}
	h, err := openCounter(path, counter{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.AddTask(ctx, durable.Task{ConversationID: 1, Kind: "counter", State: durable.Pending, Checkpoint: json.RawMessage(`{"N":0}`)}); err != nil {
		t.Fatal(err)
	}
	awaitKill()
}

// The time from opening a database that a SIGKILL left in the middle of a
// task to that task's first resumed step. A child is killed once; every
// iteration recovers a copy of the files it left.
func BenchmarkRecover(b *testing.B) {
	image := b.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRecoverChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "RECOVER_DB="+filepath.Join(image, "session.db"))
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	timer := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
	got, err := io.ReadAll(io.LimitReader(out, int64(len("ready"))))
	timer.Stop()
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil || !bytes.Equal(got, []byte("ready")) {
		b.Fatalf("the child never reached its 10th step: %q %v", got, err)
	}
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dir := filepath.Join(b.TempDir(), "run")
		os.Mkdir(dir, 0o700)
		for _, name := range []string{"session.db", "session.db-wal", "session.db-shm"} {
			if data, err := os.ReadFile(filepath.Join(image, name)); err == nil {
				os.WriteFile(filepath.Join(dir, name), data, 0o600)
			}
		}
		k := counter{first: make(chan struct{}, 1)}
		b.StartTimer()
		start := time.Now()
		h, err := openCounter(filepath.Join(dir, "session.db"), k)
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-k.first:
		case <-time.After(10 * time.Second):
			b.Fatal("no step resumed within 10 s")
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		h.Close()
	}
	reportLatency(b, ds)
}

// A one-tool turn at the start of a conversation, after 2,000 entries
// (about 75k estimated tokens) with compaction off, and after the same
// 2,000 with compaction on at the production thresholds (a summary from
// 60k, no request past 85k): with compaction a long conversation's turn
// should cost at most twice a fresh one's. ./dev.sh bench runs it.
func BenchmarkLongConversationTurn(b *testing.B) {
	tool := durable.Tool{Name: "add", Safe: true, Execute: func(context.Context, durable.ToolCallContext, json.RawMessage) (durable.ToolResult, error) {
		return durable.ToolResult{Output: "3"}, nil
	}}
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		switch last := lastMsg(req); {
		case last.Role == "tool":
			return durable.ModelResponse{Text: "it is 3"}, nil
		case len(last.Content) > 10 && last.Content[:10] == "[harness] ":
			return durable.ModelResponse{Text: "Summary: the owner added numbers many times."}, nil
		}
		return durable.ModelResponse{ToolCalls: []durable.ToolCall{{ID: "c1", Name: "add", Arguments: json.RawMessage(`{"a":1,"b":2}`)}}}, nil
	})
	for _, c := range []struct {
		name    string
		entries int
		policy  durable.CompactionPolicy
	}{
		{"fresh", 0, durable.CompactionPolicy{Threshold: 60000, HardCap: 85000}},
		{"2000-entries/compaction=off", 2000, durable.CompactionPolicy{}},
		{"2000-entries/compaction=on", 2000, durable.CompactionPolicy{Threshold: 60000, HardCap: 85000}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s := benchStore(b, "synchronous=NORMAL")
			fillConversation(b, s, c.entries)
			h, err := durable.Open(context.Background(), s, durable.Options{Model: model, DefaultModel: "bench", Tools: []durable.Tool{tool}, Compaction: c.policy})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			if err := h.Resume(); err != nil {
				b.Fatal(err)
			}
			turn := func() {
				sub, err := h.Submit(context.Background(), durable.RootConversation, durable.Input{Text: "add 1 and 2"})
				if err != nil {
					b.Fatal(err)
				}
				if sub, err = h.WaitSubmission(context.Background(), sub.ID); err != nil || sub.Status != durable.Done {
					b.Fatalf("%+v %v", sub, err)
				}
			}
			if c.policy.Threshold > 0 && c.entries > 0 { // the first turn sets the summary off
				turn()
				if err := h.WaitIdle(context.Background()); err != nil {
					b.Fatal(err)
				}
				if head, err := s.LatestHead(context.Background(), durable.RootConversation); err != nil || head.Kind != durable.SummaryEntry {
					b.Fatalf("no summary after a turn over the threshold: %+v %v", head, err)
				}
			}
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				turn()
				ds = append(ds, time.Since(start))
			}
			b.StopTimer()
			reportLatency(b, ds)
		})
	}
}

// fillConversation stores n alternating owner and assistant entries of
// about 150 bytes in the root conversation.
func fillConversation(b *testing.B, s *durable.Store, n int) {
	b.Helper()
	text := string(bytes.Repeat([]byte("a long conversation grows "), 6))
	var batch []durable.Entry
	for i := 0; i < n; i++ {
		id, err := s.MintID()
		if err != nil {
			b.Fatal(err)
		}
		kind := durable.OwnerMessage
		if i%2 == 1 {
			kind = durable.AssistantMessage
		}
		batch = append(batch, durable.Entry{ID: id, ConversationID: durable.RootConversation, Kind: kind, Text: text, At: time.Now().UTC()})
		if len(batch) == 500 || i == n-1 {
			if err := s.Commit(context.Background(), durable.Writes{Entries: batch}); err != nil {
				b.Fatal(err)
			}
			batch = nil
		}
	}
}
