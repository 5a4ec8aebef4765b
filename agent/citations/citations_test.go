package citations_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/agent/citations"
	"github.com/affido/affido/agent/corpus"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
	"github.com/affido/affido/agent/modelclient"
	"github.com/affido/affido/internal/gatewaytest"
	"github.com/affido/affido/internal/openai"
	"github.com/affido/affido/internal/scripted"
)

var ctx = context.Background()

type env struct {
	h      *durable.Harness
	corpus *corpus.Corpus
}

// newEnv runs a harness with the scripted model over the real wire, the
// corpus_search tool and the gate; between two model calls it runs between.
func newEnv(t *testing.T, between func()) *env {
	dir := t.TempDir()
	c := &corpus.Corpus{Dir: filepath.Join(dir, "corpus")}
	if _, _, err := c.Ingest("pets.txt", []byte("Cats sleep sixteen hours a day.\r\nDogs dream 🐕 too.\nParrots mimic speech.\n")); err != nil {
		t.Fatal(err)
	}
	gw := gatewaytest.Start(t, &gatewaytest.Gateway{Model: hook{scripted.NewModel([]string{"fake/echo"}), between}})
	db, err := sqlite.Open(ctx, filepath.Join(dir, "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	h, err := durable.Open(ctx, st, durable.Options{Model: modelclient.New(gw, func() string { return "t" }), DefaultModel: "fake/echo",
		Tools: []durable.Tool{citations.Tool(c)}, Gate: citations.Gate(c)})
	if err != nil {
		t.Fatal(err)
	}
	h.Resume()
	t.Cleanup(func() { h.Close() })
	return &env{h: h, corpus: c}
}

type hook struct {
	gatewaytest.Model
	between func()
}

func (p hook) Serve(ctx context.Context, w http.ResponseWriter, req openai.ChatRequest) (openai.ChatUsage, error) {
	if p.between != nil && len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == "tool" {
		p.between()
	}
	return p.Model.Serve(ctx, w, req)
}

func (e *env) ask(t *testing.T, text string) (durable.Submission, []durable.Entry) {
	t.Helper()
	sub, err := e.h.Submit(ctx, 1, durable.Input{Text: text, Options: map[string]string{"citations": "required"}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	sub, err = e.h.WaitSubmission(wctx, sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	es, _ := e.h.Store().RunEntries(ctx, 1, sub.TaskID)
	return sub, es
}

func count(es []durable.Entry, k durable.EntryKind) int {
	n := 0
	for _, e := range es {
		if e.Kind == k {
			n++
		}
	}
	return n
}

func TestCitedReplyPassesAndIsReverified(t *testing.T) {
	e := newEnv(t, nil)
	sub, es := e.ask(t, "cite dogs dream")
	if sub.Status != durable.Done || count(es, durable.CitationEntry) != 1 || count(es, durable.AssistantMessage) != 2 {
		t.Fatalf("%+v entries %v", sub, es)
	}
	rep, err := citations.Check(ctx, e.h.Store(), e.corpus, sub.TaskID)
	if err != nil || rep.Status != "attribution_verified" || len(rep.Citations) != 1 {
		t.Fatalf("report %+v %v", rep, err)
	}
	c := rep.Citations[0]
	if c.Doc != "pets.txt" || c.Version != 1 || c.LineStart != 2 || c.Quote != "Dogs dream 🐕 too." || !c.Verified {
		t.Fatalf("citation %+v", c)
	}
	// Alter the stored bytes: the same citation now reports the mismatch.
	os.WriteFile(filepath.Join(e.corpus.Dir, "pets.txt", "v1"), []byte("Cats sleep.\nDogs never dream.\n"), 0o644)
	rep, err = citations.Check(ctx, e.h.Store(), e.corpus, sub.TaskID)
	if err != nil || rep.Status != "attribution_failed" || rep.Citations[0].Verified || len(rep.Reasons) != 1 {
		t.Fatalf("after altering the document: %+v %v", rep, err)
	}
	if _, err := citations.Check(ctx, e.h.Store(), e.corpus, 999999); err != citations.ErrUnknownRun {
		t.Fatalf("unknown run: %v", err)
	}
}

func TestBadRepliesAreRejectedAndWriteNothing(t *testing.T) {
	for _, tc := range []struct {
		prompt, reason string
		alter          bool
	}{
		{"cite-uncited cats sleep", "has no citation", false},
		{"cite-undeclared parrots", "did not return in this run", false},
		{"cite-slow parrots mimic", "no longer matches", true},
	} {
		t.Run(tc.prompt, func(t *testing.T) {
			var e *env
			altered := false
			e = newEnv(t, func() {
				if tc.alter && !altered {
					altered = true
					os.WriteFile(filepath.Join(e.corpus.Dir, "pets.txt", "v1"), []byte("changed underneath\n"), 0o644)
				}
			})
			sub, es := e.ask(t, tc.prompt)
			if sub.Status != durable.Unanswered || sub.Reason != "attribution_failed" {
				t.Fatalf("submission %+v", sub)
			}
			for _, en := range es {
				if en.Kind == durable.AssistantMessage && len(en.ToolCalls) == 0 {
					t.Fatalf("a rejected reply was stored: %q", en.Text)
				}
			}
			if count(es, durable.CitationEntry) != 0 {
				t.Fatal("citation rows of a rejected reply were stored")
			}
			task, _ := e.h.Store().Task(ctx, sub.TaskID)
			if !strings.Contains(task.Error, tc.reason) {
				t.Fatalf("reasons %q, want %q", task.Error, tc.reason)
			}
			// Each refusal is said in the conversation (and the trace), the
			// last as the run's error, every one with its reason.
			if g, x := count(es, durable.GateEntry), count(es, durable.ErrorEntry); g < 1 || x != 1 {
				t.Fatalf("%d gate entries and %d errors: %v", g, x, es)
			}
			for _, en := range es {
				if (en.Kind == durable.GateEntry || en.Kind == durable.ErrorEntry) && !strings.Contains(en.Text, tc.reason) {
					t.Fatalf("%s entry without the reason %q: %q", en.Kind, tc.reason, en.Text)
				}
			}
			rep, _ := citations.Check(ctx, e.h.Store(), e.corpus, sub.TaskID)
			if rep.Status != "attribution_failed" {
				t.Fatalf("report %+v", rep)
			}
		})
	}
}

func TestCitationsNotRequiredPassesPlainReplies(t *testing.T) {
	e := newEnv(t, nil)
	sub, err := e.h.Submit(ctx, 1, durable.Input{Text: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	sub, _ = e.h.WaitSubmission(ctx, sub.ID)
	if sub.Status != durable.Done {
		t.Fatalf("%+v", sub)
	}
}

func FuzzParseReply(f *testing.F) {
	for _, s := range []string{"", "a [cite:c1]", "x\n\n[cite:c2][cite:c3] y\r\nz", "[cite:]", "[cite:c1", "[cite:c1]]", "\n\n", "é [cite:c-9_x]\n👩‍👩‍👧"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		lines := citations.ParseReply(reply)
		all := strings.Split(reply, "\n")
		for _, l := range lines {
			if l.N < 1 || l.N > len(all) || all[l.N-1] != l.Text || strings.TrimSpace(l.Text) == "" {
				t.Fatalf("line %d %q does not match the reply", l.N, l.Text)
			}
			for _, id := range l.IDs {
				if !strings.Contains(l.Text, "[cite:"+id+"]") {
					t.Fatalf("id %q not in line %q", id, l.Text)
				}
			}
		}
		blank := 0
		for _, s := range all {
			if strings.TrimSpace(s) == "" {
				blank++
			}
		}
		if len(lines)+blank != len(all) {
			t.Fatalf("%d lines + %d blank != %d", len(lines), blank, len(all))
		}
		_, _ = json.Marshal(lines)
	})
}
