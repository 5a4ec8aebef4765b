// Package storetest is the conformance suite every durable.DB
// implementation must pass, run through durable.Store.
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
)

// Opener opens (creating if needed) the database at path. Opening the same
// path again, after the first is closed, must give the same data; while it
// is open, the second open must fail with durable.ErrLocked.
type Opener func(path string) (durable.DB, error)

// mustOpen opens path and closes it when the test ends.
func mustOpen(t *testing.T, open Opener, path string) durable.DB {
	t.Helper()
	db, err := open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Run runs the conformance suite against open.
func Run(t *testing.T, open Opener) {
	cases := []struct {
		name string
		fn   func(t *testing.T, open Opener, path string)
	}{
		{"root conversation is reserved", rootReserved},
		{"mixed writes commit atomically and roll back together", atomicCommit},
		{"returned and committed records are copies", copies},
		{"entry scans in both orders with cursors that survive JSON", entryScans},
		{"a cursor continues below its last item after a newer commit", cursorAfterNewerCommit},
		{"task scans by state follow replaced records", taskScans},
		{"submission scans by status and the requestId index", submissions},
		{"strings are lossless", losslessStrings},
		{"one global ID space, never reissued after reopen", globalIDs},
		{"ID exhaustion is an error", idExhaustion},
		{"usage ledger accumulates in the commit", usageLedger},
		{"transactions roll back on error and panic", transactions},
		{"every operation after close fails closed", afterClose},
		{"a second opener is refused while the first is open", secondOpener},
		{"a second store on the same file is refused and writes nothing", secondStore},
		{"NULL round-trips", nullRoundTrip},
		{"blobs round-trip byte for byte", blobRoundTrip},
		{"a 4 MiB text round-trips", largeText},
		{"integers up to MaxID round-trip exactly", bigIntegers},
		{"a failing statement stops a multi-statement Exec", failingExec},
		{"a transaction whose context is cancelled leaves nothing", cancelledTransaction},
		{"readers during a write see only committed data", readersDuringWrite},
		{"concurrent writers lose no update", concurrentWriters},
		{"concurrent commits through the store get distinct IDs", concurrentStoreCommits},
		{"a nested transaction is refused, not deadlocked", nestedTransaction},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.fn(t, open, filepath.Join(t.TempDir(), "store.db"))
		})
	}
}

var ctx = context.Background()

func openStore(t *testing.T, open Opener, path string) *durable.Store {
	t.Helper()
	s, err := durable.OpenStore(ctx, mustOpen(t, open, path))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mint(t *testing.T, s *durable.Store) int64 {
	t.Helper()
	id, err := s.MintID()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func commit(t *testing.T, s *durable.Store, w durable.Writes) {
	t.Helper()
	if err := s.Commit(ctx, w); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func entry(id int64, text string) durable.Entry {
	return durable.Entry{ID: id, ConversationID: durable.RootConversation, Kind: durable.OwnerMessage, Text: text, At: time.Unix(1700000000, 0).UTC()}
}

func ids[T any](items []T, id func(T) int64) []int64 {
	out := []int64{}
	for _, it := range items {
		out = append(out, id(it))
	}
	return out
}

func entryIDs(p durable.Page[durable.Entry]) []int64 {
	return ids(p.Items, func(e durable.Entry) int64 { return e.ID })
}

func rootReserved(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	if _, err := s.Conversation(ctx, durable.RootConversation); err != nil {
		t.Fatalf("root conversation: %v", err)
	}
	if id := mint(t, s); id != 2 {
		t.Fatalf("first minted ID = %d, want 2", id)
	}
	err := s.Commit(ctx, durable.Writes{Conversations: []durable.Conversation{{ID: durable.RootConversation}}})
	if err == nil || !strings.Contains(err.Error(), "ID 1 already belongs to conversation") {
		t.Fatalf("recreating the root: %v", err)
	}
}

func atomicCommit(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	taskID, subID, e1 := mint(t, s), mint(t, s), mint(t, s)
	task := durable.Task{ID: taskID, ConversationID: 1, Kind: "test.task", Version: 1, State: durable.Pending, Checkpoint: json.RawMessage(`{"phase":"a"}`)}
	sub := durable.Submission{ID: subID, ConversationID: 1, RequestID: "r1", Status: durable.Queued, TaskID: taskID}
	commit(t, s, durable.Writes{Tasks: []durable.Task{task}, Submissions: []durable.Submission{sub}, Entries: []durable.Entry{entry(e1, "one")}})

	e2 := mint(t, s)
	task.State, sub.Status = durable.Running, durable.Done
	err := s.Commit(ctx, durable.Writes{
		Tasks:         []durable.Task{task},
		Submissions:   []durable.Submission{sub},
		Entries:       []durable.Entry{entry(e2, "two")},
		Conversations: []durable.Conversation{{ID: durable.RootConversation}}, // fails
		Usage:         []durable.UsageDelta{{ConversationID: 1, Kind: "model", Name: "m", Calls: 1}},
	})
	if err == nil {
		t.Fatal("a commit with a duplicate conversation succeeded")
	}
	if got, _ := s.Task(ctx, taskID); got.State != durable.Pending {
		t.Errorf("task after rollback: %s", got.State)
	}
	if got, _ := s.Submission(ctx, subID); got.Status != durable.Queued {
		t.Errorf("submission after rollback: %s", got.Status)
	}
	if _, err := s.Entry(ctx, e2); !errors.Is(err, durable.ErrNotFound) {
		t.Errorf("entry of the failed commit: %v", err)
	}
	if u, _ := s.Usage(ctx, 1); len(u.Models) != 0 {
		t.Errorf("usage of the failed commit: %v", u)
	}
	// Nothing was claimed: the ID is still free, and the next commit's
	// sequence number is beyond the first one's.
	commit(t, s, durable.Writes{Entries: []durable.Entry{entry(e2, "two")}})
	a, _ := s.Entry(ctx, e1)
	b, _ := s.Entry(ctx, e2)
	if b.CommitSeq <= a.CommitSeq {
		t.Errorf("commit seq %d then %d", a.CommitSeq, b.CommitSeq)
	}
}

func copies(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	id := mint(t, s)
	e := durable.Entry{ID: id, ConversationID: 1, Kind: durable.AssistantMessage, Text: "hi",
		ToolCalls: []durable.ToolCall{{ID: "c1", Name: "read_file", Arguments: json.RawMessage(`{"path":"a"}`)}}}
	commit(t, s, durable.Writes{Entries: []durable.Entry{e}})
	e.ToolCalls[0].Name = "changed"
	e.Text = "changed"
	got, _ := s.Entry(ctx, id)
	if got.Text != "hi" || got.ToolCalls[0].Name != "read_file" {
		t.Fatalf("stored entry changed with its input: %+v", got)
	}
	got.ToolCalls[0].Name = "mutated"
	got.ToolCalls[0].Arguments[0] = 'X'
	again, _ := s.Entry(ctx, id)
	if again.ToolCalls[0].Name != "read_file" || string(again.ToolCalls[0].Arguments) != `{"path":"a"}` {
		t.Fatalf("stored entry changed with a returned copy: %+v", again)
	}
}

func entryScans(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	// Committed out of ID order.
	for _, id := range []int64{30, 10, 20} {
		commit(t, s, durable.Writes{Entries: []durable.Entry{entry(id, "e")}})
	}
	roundTrip := func(c string) string {
		b, _ := json.Marshal(map[string]string{"cursor": c})
		var m map[string]string
		_ = json.Unmarshal(b, &m)
		return m["cursor"]
	}
	for _, tc := range []struct {
		order durable.Order
		pages [][]int64
	}{
		{durable.Asc, [][]int64{{10, 20}, {30}}},
		{durable.Desc, [][]int64{{30, 20}, {10}}},
	} {
		p, err := s.Entries(ctx, 1, durable.Scan{Order: tc.order, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if got := entryIDs(p); !reflect.DeepEqual(got, tc.pages[0]) || p.Next == "" {
			t.Fatalf("%s page 1 = %v next %q", tc.order, got, p.Next)
		}
		p2, err := s.Entries(ctx, 1, durable.Scan{Order: tc.order, Limit: 2, Cursor: roundTrip(p.Next)})
		if err != nil {
			t.Fatal(err)
		}
		if got := entryIDs(p2); !reflect.DeepEqual(got, tc.pages[1]) || p2.Next != "" {
			t.Fatalf("%s page 2 = %v next %q", tc.order, got, p2.Next)
		}
		other := durable.Asc
		if tc.order == durable.Asc {
			other = durable.Desc
		}
		if _, err := s.Entries(ctx, 1, durable.Scan{Order: other, Cursor: p.Next}); !errors.Is(err, durable.ErrBadCursor) {
			t.Fatalf("a %s cursor in a %s scan: %v", tc.order, other, err)
		}
	}
	if _, err := s.Entries(ctx, 1, durable.Scan{Cursor: "garbage"}); !errors.Is(err, durable.ErrBadCursor) {
		t.Fatalf("garbage cursor: %v", err)
	}
	if _, err := s.Entries(ctx, 999, durable.Scan{}); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("unknown conversation: %v", err)
	}
}

func cursorAfterNewerCommit(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	for _, id := range []int64{10, 20, 30} {
		commit(t, s, durable.Writes{Entries: []durable.Entry{entry(id, "e")}})
	}
	p, _ := s.Entries(ctx, 1, durable.Scan{Order: durable.Desc, Limit: 2})
	commit(t, s, durable.Writes{Entries: []durable.Entry{entry(40, "newer")}})
	p2, err := s.Entries(ctx, 1, durable.Scan{Order: durable.Desc, Limit: 2, Cursor: p.Next})
	if err != nil || !reflect.DeepEqual(entryIDs(p2), []int64{10}) {
		t.Fatalf("continued page = %v, %v", entryIDs(p2), err)
	}
}

func taskScans(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	var tasks []durable.Task
	for _, st := range []durable.TaskState{durable.Pending, durable.Running, durable.Sleeping, durable.Waiting, durable.Completing, durable.Terminal, durable.Pending} {
		tk := durable.Task{ID: mint(t, s), ConversationID: 1, Kind: "test.task", Version: 1, State: st, Checkpoint: json.RawMessage(`{}`)}
		if st == durable.Sleeping {
			tk.Deadline = &deadline
		}
		tasks = append(tasks, tk)
	}
	commit(t, s, durable.Writes{Tasks: tasks})
	taskIDs := func(states ...durable.TaskState) []int64 {
		p, err := s.Tasks(ctx, states, durable.Scan{})
		if err != nil {
			t.Fatal(err)
		}
		return ids(p.Items, func(t durable.Task) int64 { return t.ID })
	}
	if got := taskIDs(durable.Pending); !reflect.DeepEqual(got, []int64{tasks[0].ID, tasks[6].ID}) {
		t.Fatalf("pending = %v", got)
	}
	if got := taskIDs(durable.Sleeping); len(got) != 1 {
		t.Fatalf("sleeping = %v", got)
	}
	if got, _ := s.Task(ctx, tasks[2].ID); got.Deadline == nil || !got.Deadline.Equal(deadline) {
		t.Fatalf("deadline = %v, want %v", got.Deadline, deadline)
	}
	// Replacing the record moves it between scans.
	tasks[0].State = durable.Terminal
	tasks[0].Outcome = durable.Completed
	commit(t, s, durable.Writes{Tasks: []durable.Task{tasks[0]}})
	if got := taskIDs(durable.Pending); !reflect.DeepEqual(got, []int64{tasks[6].ID}) {
		t.Fatalf("pending after completion = %v", got)
	}
	if got := taskIDs(durable.Terminal); len(got) != 2 {
		t.Fatalf("terminal = %v", got)
	}
	live, _ := s.LiveTasks(ctx)
	if len(live) != 5 {
		t.Fatalf("live tasks = %d, want 5", len(live))
	}
	p, _ := s.Tasks(ctx, nil, durable.Scan{Order: durable.Desc, Limit: 3})
	if len(p.Items) != 3 || p.Items[0].ID != tasks[6].ID || p.Next == "" {
		t.Fatalf("all tasks, newest first: %v", ids(p.Items, func(t durable.Task) int64 { return t.ID }))
	}
}

func submissions(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	conv2 := mint(t, s)
	commit(t, s, durable.Writes{Conversations: []durable.Conversation{{ID: conv2, Title: "two"}}})
	a := durable.Submission{ID: mint(t, s), ConversationID: 1, RequestID: "req-1", Status: durable.Queued}
	b := durable.Submission{ID: mint(t, s), ConversationID: conv2, RequestID: "req-1", Status: durable.Queued}
	commit(t, s, durable.Writes{Submissions: []durable.Submission{a, b}})
	got, err := s.SubmissionByRequest(ctx, conv2, "req-1")
	if err != nil || got.ID != b.ID {
		t.Fatalf("by request in conversation 2: %v %v", got.ID, err)
	}
	if _, err := s.SubmissionByRequest(ctx, 1, "req-2"); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("unknown request: %v", err)
	}
	dup := durable.Submission{ID: mint(t, s), ConversationID: 1, RequestID: "req-1", Status: durable.Queued}
	if err := s.Commit(ctx, durable.Writes{Submissions: []durable.Submission{dup}}); err == nil {
		t.Fatal("a second submission with the same requestId in one conversation was stored")
	}
	a.Status = durable.Placed
	commit(t, s, durable.Writes{Submissions: []durable.Submission{a}})
	q, _ := s.Submissions(ctx, []durable.SubmissionStatus{durable.Queued}, durable.Scan{})
	p, _ := s.Submissions(ctx, []durable.SubmissionStatus{durable.Placed}, durable.Scan{})
	if len(q.Items) != 1 || q.Items[0].ID != b.ID || len(p.Items) != 1 || p.Items[0].ID != a.ID {
		t.Fatalf("queued %v placed %v", q.Items, p.Items)
	}
}

func losslessStrings(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	texts := []string{
		"emoji 👩‍👩‍👧 and 🇳🇱",
		"combining: e\u0301 vs \u00e9, a\u0308\u0304",
		"CRLF\r\nline two\r\n\r\n",
		"tab\tnul\x00bell\a",
		"quotes \" ' ` and backslash \\ and <html>&amp;",
		"",
		strings.Repeat("ß", 10000),
	}
	for i, text := range texts {
		id := mint(t, s)
		req := "req-" + text
		commit(t, s, durable.Writes{
			Entries:     []durable.Entry{entry(id, text)},
			Submissions: []durable.Submission{{ID: mint(t, s), ConversationID: 1, RequestID: req, Status: durable.Queued, Input: durable.Input{Text: text}}},
		})
		got, _ := s.Entry(ctx, id)
		if got.Text != text {
			t.Errorf("text %d: got %q", i, got.Text)
		}
		sub, err := s.SubmissionByRequest(ctx, 1, req)
		if err != nil || sub.Input.Text != text || sub.RequestID != req {
			t.Errorf("requestId %d: %v %q", i, err, sub.RequestID)
		}
	}
}

func globalIDs(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	commit(t, s, durable.Writes{Entries: []durable.Entry{entry(100, "x")}})
	if id := mint(t, s); id != 101 {
		t.Fatalf("after entry 100, MintID = %d", id)
	}
	err := s.Commit(ctx, durable.Writes{Tasks: []durable.Task{{ID: 100, ConversationID: 1, Kind: "k", State: durable.Pending}}})
	if err == nil || !strings.Contains(err.Error(), "already belongs to entry") {
		t.Fatalf("task with an entry's ID: %v", err)
	}
	err = s.Commit(ctx, durable.Writes{Entries: []durable.Entry{entry(100, "again")}})
	if err == nil || !strings.Contains(err.Error(), "already belongs to entry") {
		t.Fatalf("entry ID reused: %v", err)
	}
	id := mint(t, s)
	commit(t, s, durable.Writes{Tasks: []durable.Task{{ID: id, ConversationID: 1, Kind: "k", State: durable.Pending}}})
	s.Close()

	s2 := openStore(t, open, path)
	if next := mint(t, s2); next <= id {
		t.Fatalf("after reopen, MintID = %d reissues committed ID %d", next, id)
	}
}

func idExhaustion(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	commit(t, s, durable.Writes{Entries: []durable.Entry{entry(durable.MaxID, "last")}})
	if _, err := s.MintID(); !errors.Is(err, durable.ErrIDExhausted) {
		t.Fatalf("MintID after MaxID: %v", err)
	}
	if err := s.Commit(ctx, durable.Writes{Entries: []durable.Entry{entry(durable.MaxID+1, "over")}}); err == nil {
		t.Fatal("an ID above MaxID was committed")
	}
}

func usageLedger(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	for range 3 {
		commit(t, s, durable.Writes{Usage: []durable.UsageDelta{
			{ConversationID: 1, Kind: "model", Name: "fake/echo", InputTokens: 10, OutputTokens: 5, Calls: 1},
			{ConversationID: 1, Kind: "tool", Name: "shell", Calls: 1},
		}})
	}
	u, err := s.Usage(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m := u.Models["fake/echo"]; m.InputTokens != 30 || m.OutputTokens != 15 || m.Calls != 3 || u.Tools["shell"] != 3 {
		t.Fatalf("usage = %+v", u)
	}
}

func transactions(t *testing.T, open Opener, path string) {
	db := mustOpen(t, open, path)
	if err := db.Exec(ctx, `CREATE TABLE t (v TEXT)`); err != nil {
		t.Fatal(err)
	}
	sentinel := errors.New("stop")
	err := db.Transaction(ctx, func(tx durable.Executor) error {
		if err := tx.Run(ctx, `INSERT INTO t (v) VALUES (?)`, "a"); err != nil {
			return err
		}
		return sentinel
	})
	if !errors.Is(err, sentinel) {
		t.Fatalf("Transaction returned %v, want the callback's error", err)
	}
	func() {
		defer func() { _ = recover() }()
		_ = db.Transaction(ctx, func(tx durable.Executor) error {
			_ = tx.Run(ctx, `INSERT INTO t (v) VALUES (?)`, "b")
			panic("boom")
		})
	}()
	var leaked durable.Executor
	if err := db.Transaction(ctx, func(tx durable.Executor) error {
		leaked = tx
		return tx.Run(ctx, `INSERT INTO t (v) VALUES (?)`, "c")
	}); err != nil {
		t.Fatal(err)
	}
	if err := leaked.Run(ctx, `INSERT INTO t (v) VALUES (?)`, "d"); err == nil {
		t.Fatal("a transaction handle worked after its transaction ended")
	}
	rows, err := db.All(ctx, `SELECT v FROM t`)
	if err != nil || len(rows) != 1 || rows[0]["v"] != "c" {
		t.Fatalf("rows after rollbacks = %v, %v", rows, err)
	}
	if _, err := db.Get(ctx, `SELECT v FROM t WHERE v = 'zzz'`); !errors.Is(err, durable.ErrNoRows) {
		t.Fatalf("Get of nothing: %v", err)
	}
}

func afterClose(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	id := mint(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checks := map[string]error{}
	_, checks["Conversation"] = s.Conversation(ctx, 1)
	checks["Commit"] = s.Commit(ctx, durable.Writes{Entries: []durable.Entry{entry(id, "x")}})
	_, checks["MintID"] = s.MintID()
	_, checks["Entries"] = s.Entries(ctx, 1, durable.Scan{})
	_, checks["Tasks"] = s.Tasks(ctx, nil, durable.Scan{})
	_, checks["Usage"] = s.Usage(ctx, 1)
	for op, err := range checks {
		if !errors.Is(err, durable.ErrClosed) || !strings.Contains(err.Error(), "closed") {
			t.Errorf("%s after close: %v", op, err)
		}
	}
	db := mustOpen(t, open, filepath.Join(t.TempDir(), "raw.db"))
	db.Close()
	if err := db.Close(); err != nil {
		t.Errorf("closing twice: %v", err)
	}
	if err := db.Exec(ctx, "SELECT 1"); !errors.Is(err, durable.ErrClosed) {
		t.Errorf("DB.Exec after close: %v", err)
	}
	if err := db.Transaction(ctx, func(durable.Executor) error { return nil }); !errors.Is(err, durable.ErrClosed) {
		t.Errorf("DB.Transaction after close: %v", err)
	}
}

func secondOpener(t *testing.T, open Opener, path string) {
	first, err := open(path)
	if err != nil {
		t.Fatal(err)
	}
	if second, err := open(path); !errors.Is(err, durable.ErrLocked) {
		if second != nil {
			second.Close()
		}
		t.Fatalf("second open while the first is open: %v, want ErrLocked", err)
	}
	first.Close()
	again, err := open(path)
	if err != nil {
		t.Fatalf("open after the first closed: %v", err)
	}
	again.Close()
}

func secondStore(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	commit(t, s, durable.Writes{Entries: []durable.Entry{entry(mint(t, s), "first")}})
	if _, err := open(path); !errors.Is(err, durable.ErrLocked) {
		t.Fatalf("a second store on the same file: %v, want ErrLocked", err)
	}
	p, err := s.Entries(ctx, 1, durable.Scan{Limit: 10})
	if err != nil || len(p.Items) != 1 || p.Items[0].Text != "first" {
		t.Fatalf("entries after the refused opener: %+v %v", p.Items, err)
	}
}

// table makes a scratch table on a fresh DB, in column types SQLite and
// Postgres both know (BIGINT, TEXT, BYTEA).
func table(t *testing.T, open Opener, path, cols string) durable.DB {
	t.Helper()
	db := mustOpen(t, open, path)
	if err := db.Exec(ctx, `CREATE TABLE t (`+cols+`)`); err != nil {
		t.Fatal(err)
	}
	return db
}

func nullRoundTrip(t *testing.T, open Opener, path string) {
	db := table(t, open, path, `k BIGINT PRIMARY KEY, v TEXT`)
	if err := db.Run(ctx, `INSERT INTO t (k, v) VALUES (1, ?)`, nil); err != nil {
		t.Fatal(err)
	}
	row, err := db.Get(ctx, `SELECT v FROM t WHERE k = 1`)
	if err != nil || row["v"] != nil {
		t.Fatalf("NULL came back as %#v (%v)", row["v"], err)
	}
}

func blobRoundTrip(t *testing.T, open Opener, path string) {
	db := table(t, open, path, `k BIGINT PRIMARY KEY, v BYTEA`)
	blob := make([]byte, 256*3)
	for i := range blob {
		blob[i] = byte(i)
	}
	if err := db.Run(ctx, `INSERT INTO t (k, v) VALUES (1, ?)`, blob); err != nil {
		t.Fatal(err)
	}
	row, err := db.Get(ctx, `SELECT v FROM t WHERE k = 1`)
	got, _ := row["v"].([]byte)
	if err != nil || !reflect.DeepEqual(got, blob) {
		t.Fatalf("blob came back as %d bytes (%v)", len(got), err)
	}
}

func largeText(t *testing.T, open Opener, path string) {
	db := table(t, open, path, `k BIGINT PRIMARY KEY, v TEXT`)
	text := strings.Repeat("0123456789abcdéf", 4<<20/17)
	if err := db.Run(ctx, `INSERT INTO t (k, v) VALUES (1, ?)`, text); err != nil {
		t.Fatal(err)
	}
	row, err := db.Get(ctx, `SELECT v FROM t WHERE k = 1`)
	if err != nil || row["v"] != text {
		t.Fatalf("large text did not round-trip (%v)", err)
	}
}

func bigIntegers(t *testing.T, open Opener, path string) {
	db := table(t, open, path, `k BIGINT PRIMARY KEY, v BIGINT`)
	for i, v := range []int64{0, -1, 1 << 40, durable.MaxID, durable.MaxID - 1} {
		if err := db.Run(ctx, `INSERT INTO t (k, v) VALUES (?, ?)`, i, v); err != nil {
			t.Fatal(err)
		}
		row, err := db.Get(ctx, `SELECT v FROM t WHERE k = ?`, i)
		if err != nil || row["v"] != v {
			t.Fatalf("%d came back as %#v (%v)", v, row["v"], err)
		}
	}
}

func failingExec(t *testing.T, open Opener, path string) {
	db := table(t, open, path, `v TEXT`)
	err := db.Exec(ctx, `INSERT INTO t (v) VALUES ('one'); INSERT INTO nosuchtable (v) VALUES ('two'); INSERT INTO t (v) VALUES ('three');`)
	if err == nil {
		t.Fatal("a failing statement in Exec returned no error")
	}
	rows, err := db.All(ctx, `SELECT v FROM t ORDER BY v`)
	if err != nil || len(rows) != 1 || rows[0]["v"] != "one" {
		t.Fatalf("after the failing Exec: %v %v (want only the statement before the failure)", rows, err)
	}
}

func cancelledTransaction(t *testing.T, open Opener, path string) {
	db := table(t, open, path, `v TEXT`)
	cctx, cancel := context.WithCancel(ctx)
	err := db.Transaction(cctx, func(tx durable.Executor) error {
		if err := tx.Run(cctx, `INSERT INTO t (v) VALUES ('before')`); err != nil {
			return err
		}
		cancel()
		return tx.Run(cctx, `INSERT INTO t (v) VALUES ('after')`)
	})
	if err == nil {
		t.Fatal("a transaction cancelled halfway committed")
	}
	rows, err := db.All(ctx, `SELECT v FROM t`)
	if err != nil || len(rows) != 0 {
		t.Fatalf("a cancelled transaction left %v (%v)", rows, err)
	}
}

func readersDuringWrite(t *testing.T, open Opener, path string) {
	db := table(t, open, path, `k BIGINT PRIMARY KEY, v BIGINT`)
	if err := db.Run(ctx, `INSERT INTO t (k, v) VALUES (1, 0), (2, 0)`); err != nil {
		t.Fatal(err)
	}
	// A writer moves a unit between two rows many times; the sum is always 0
	// in committed state, so a reader never sees anything else.
	done := make(chan error, 1)
	go func() {
		for i := 0; i < 200; i++ {
			err := db.Transaction(ctx, func(tx durable.Executor) error {
				if err := tx.Run(ctx, `UPDATE t SET v = v + 1 WHERE k = 1`); err != nil {
					return err
				}
				return tx.Run(ctx, `UPDATE t SET v = v - 1 WHERE k = 2`)
			})
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	errs := make(chan error, 4)
	for r := 0; r < 4; r++ {
		go func() {
			for i := 0; i < 100; i++ {
				row, err := db.Get(ctx, `SELECT sum(v) AS s FROM t`)
				if err != nil {
					errs <- err
					return
				}
				if row["s"] != int64(0) {
					errs <- fmt.Errorf("a reader saw sum %v: an uncommitted half of a write", row["s"])
					return
				}
			}
			errs <- nil
		}()
	}
	for r := 0; r < 4; r++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func concurrentWriters(t *testing.T, open Opener, path string) {
	db := table(t, open, path, `k BIGINT PRIMARY KEY, v BIGINT`)
	if err := db.Run(ctx, `INSERT INTO t (k, v) VALUES (1, 0)`); err != nil {
		t.Fatal(err)
	}
	const writers, each = 4, 50
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func() {
			for i := 0; i < each; i++ {
				err := db.Transaction(ctx, func(tx durable.Executor) error {
					row, err := tx.Get(ctx, `SELECT v FROM t WHERE k = 1`)
					if err != nil {
						return err
					}
					return tx.Run(ctx, `UPDATE t SET v = ? WHERE k = 1`, row["v"].(int64)+1)
				})
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for w := 0; w < writers; w++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	row, err := db.Get(ctx, `SELECT v FROM t WHERE k = 1`)
	if err != nil || row["v"] != int64(writers*each) {
		t.Fatalf("counter %v after %d increments (%v)", row["v"], writers*each, err)
	}
}

func concurrentStoreCommits(t *testing.T, open Opener, path string) {
	s := openStore(t, open, path)
	const n = 8
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			for j := 0; j < 20; j++ {
				id, err := s.MintID()
				if err == nil {
					err = s.Commit(ctx, durable.Writes{Entries: []durable.Entry{entry(id, fmt.Sprint(id))}})
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	p, err := s.Entries(ctx, 1, durable.Scan{Limit: 1000})
	if err != nil || len(p.Items) != n*20 {
		t.Fatalf("%d entries after %d concurrent commits (%v)", len(p.Items), n*20, err)
	}
}

func nestedTransaction(t *testing.T, open Opener, path string) {
	db := table(t, open, path, `v TEXT`)
	done := make(chan error, 1)
	go func() {
		done <- db.Transaction(ctx, func(tx durable.Executor) error {
			if err := tx.Run(ctx, `INSERT INTO t (v) VALUES ('outer')`); err != nil {
				return err
			}
			if err := db.Run(ctx, `INSERT INTO t (v) VALUES ('beside')`); !errors.Is(err, durable.ErrNested) {
				return fmt.Errorf("a DB call inside the callback: %v, want ErrNested", err)
			}
			return db.Transaction(ctx, func(durable.Executor) error { return nil })
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, durable.ErrNested) {
			t.Fatalf("nested transaction: %v, want ErrNested", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a nested transaction deadlocked")
	}
	rows, err := db.All(ctx, `SELECT v FROM t`)
	if err != nil || len(rows) != 0 {
		t.Fatalf("the failed outer transaction left %v (%v)", rows, err)
	}
}
