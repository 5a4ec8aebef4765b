package durable_test

// The crash suite kills a real child process (this test binary, re-run as
// TestCrashChild) with SIGKILL at chosen and at random points of a
// workload, reopens the database in a new child that runs to the end, and
// checks that every run reached its expected end with no entry lost or
// duplicated, that the safe tool reran and the unsafe one was reported
// interrupted.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/postgres"
	"github.com/affido/affido/agent/durable/postgres/pgtest"
	"github.com/affido/affido/agent/durable/sqlite"
	"golang.org/x/sys/unix"
)

// Child side. Env: CRASH_DIR (db, markers, runs log), CRASH_INPUTS (comma
// separated), CRASH_LATE (inputs submitted after recovery has started),
// CRASH_PAUSE (ms each slow operation takes), CRASH_COMMIT_STALL (stall
// inside the Nth commit), CRASH_APPROVAL_TTL (ms: ask_tool asks the owner,
// and its approval expires after that long).
//
// The workload's inputs are "KIND TAG": safe (a replay-safe tool), unsafe
// (a tool that must not rerun), stream (a slow model reply), retry (a model
// error that is retried after a stored sleep), remind (a tool that creates
// a background sleeping task, which writes "alarm TAG" when due), big (a
// tool whose 8 MiB result makes a commit SQLite takes a while to write), and
// ask (a call that waits for the owner until its approval expires), and
// anything else (an echo).

// crashOpen opens the database of the crash suite on backend be: the same
// kind of opener as the conformance suite's, so another backend runs both
// unchanged. On "postgres" it is the path's schema on the test Postgres,
// and every open is a newer generation, as a restarted agent is: it takes
// the lease the killed process could not give up.
func crashOpen(be, path string) (durable.DB, error) {
	if be == "postgres" {
		newer := func() int64 { return time.Now().UnixNano() }
		return pgtest.Opener(os.Getenv(pgtest.EnvDSN), postgres.Options{}, newer)(path)
	}
	return sqlite.Open(ctx, path)
}

// onBackends runs a crash test on SQLite and, when the tests are given a
// Postgres, on Postgres beside it (the two share nothing: a child's
// database is its own file or its own schema).
func onBackends(t *testing.T, test func(t *testing.T)) {
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		test(t)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pgtest.DSN(t)
		test(t)
	})
}

// backendOf is the backend a crash test runs on: the name of its
// onBackends subtest ("TestCrashAtChosenPoints/postgres/..."), or, in a
// child process, CRASH_BACKEND, which the parent sets from it.
func backendOf(t *testing.T) string {
	if parts := strings.Split(t.Name(), "/"); len(parts) > 1 && (parts[1] == "sqlite" || parts[1] == "postgres") {
		return parts[1]
	}
	if be := os.Getenv("CRASH_BACKEND"); be != "" {
		return be
	}
	return "sqlite"
}

func mustCrashOpen(t *testing.T, path string) durable.DB {
	t.Helper()
	db, err := crashOpen(backendOf(t), path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// bigOutput is the big tool's result.
var bigOutput = strings.Repeat("0123456789abcdef", 8<<20/16)

// crashAsk asks the owner about every call of ask_tool; nobody answers in
// the crash suite, so each such approval expires (CRASH_APPROVAL_TTL).
type crashAsk struct{}

func (crashAsk) Check(_ context.Context, q durable.PolicyQuery) (durable.Verdict, error) {
	if q.Call.Name == "ask_tool" {
		return durable.Verdict{Effect: durable.Ask, Reason: "nobody will answer"}, nil
	}
	return durable.Verdict{Effect: durable.Allow}, nil
}

// crashAlarm is the task a remind call leaves behind.
type crashAlarm struct{}

func (crashAlarm) Step(ctx context.Context, sc *durable.StepContext, t durable.Task) (durable.StepResult, error) {
	var cp struct{ Tag string }
	_ = json.Unmarshal(t.Checkpoint, &cp)
	id, err := sc.Harness().Store().MintID()
	if err != nil {
		return durable.StepResult{}, err
	}
	t.State, t.Outcome, t.Deadline = durable.Terminal, durable.Completed, nil
	return durable.StepResult{Task: t, Entries: []durable.Entry{{ID: id, ConversationID: t.ConversationID,
		Kind: durable.OutsideText, Text: "alarm " + cp.Tag, At: sc.Harness().Now(), RunID: t.ID}}}, nil
}

func mark(dir, what string) {
	f, err := os.OpenFile(filepath.Join(dir, "markers"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		fmt.Fprintln(f, what)
		f.Sync()
		f.Close()
	}
}

// awaitKill holds the calling goroutine until the parent's SIGKILL ends
// the process (pause(2) returns on every signal the runtime takes itself).
func awaitKill() {
	for {
		_ = unix.Pause()
	}
}

// stallDB stalls in its Nth transaction so the parent can kill the process
// there: inside it, after the writes and before the commit (after=false),
// or right after it committed (after=true), which is between two commits
// of the code under test.
type stallDB struct {
	durable.DB
	dir   string
	n     int64
	after bool
	count atomic.Int64
}

func (s *stallDB) Transaction(ctx context.Context, fn func(tx durable.Executor) error) error {
	var nth bool
	err := s.DB.Transaction(ctx, func(tx durable.Executor) error {
		if err := fn(tx); err != nil {
			return err
		}
		nth = s.count.Add(1) == s.n
		if nth && !s.after {
			mark(s.dir, "in-commit")
			awaitKill()
		}
		return nil
	})
	if nth && s.after && err == nil {
		mark(s.dir, "after-commit")
		awaitKill()
	}
	return err
}

func TestCrashChild(t *testing.T) {
	dir := os.Getenv("CRASH_DIR")
	if dir == "" {
		t.Skip("helper process for the crash suite")
	}
	pause, _ := time.ParseDuration(os.Getenv("CRASH_PAUSE") + "ms")
	db := mustCrashOpen(t, filepath.Join(dir, "session.db"))
	if n := os.Getenv("CRASH_COMMIT_STALL"); n != "" {
		var k int64
		fmt.Sscan(n, &k)
		db = &stallDB{DB: db, dir: dir, n: k}
	}
	if n := os.Getenv("CRASH_AFTER_COMMIT"); n != "" {
		var k int64
		fmt.Sscan(n, &k)
		db = &stallDB{DB: db, dir: dir, n: k, after: true}
	}
	store, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	logRun := func(line string) {
		f, _ := os.OpenFile(filepath.Join(dir, "runs"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		fmt.Fprintln(f, line)
		f.Sync()
		f.Close()
	}
	tool := func(name string, safe bool) durable.Tool {
		return durable.Tool{Name: name, Safe: safe, Execute: func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
			var a struct{ Tag string }
			_ = json.Unmarshal(args, &a)
			logRun(name + " " + a.Tag)
			mark(dir, name)
			select {
			case <-time.After(pause):
			case <-ctx.Done():
				return durable.ToolResult{}, ctx.Err()
			}
			return durable.ToolResult{Output: name + "-ok " + a.Tag}, nil
		}}
	}
	model := fnModel(func(req durable.ModelRequest) (durable.ModelResponse, error) {
		// The owner's message of this run, and the tool result after it if
		// any. An alarm that fires mid-run adds outside text after the tool
		// result; it is not the owner speaking.
		text, toolResult := "", ""
		for i := len(req.Messages) - 1; i >= 0; i-- {
			m := req.Messages[i]
			if m.Role == "tool" && toolResult == "" {
				toolResult = m.Content
			}
			if m.Role == "user" && !strings.HasPrefix(m.Content, "[outside text") {
				text = m.Content
				break
			}
		}
		_, body, _ := strings.Cut(text, "] ")
		kind, tag, _ := strings.Cut(body, " ")
		if toolResult != "" {
			return durable.ModelResponse{Text: "done " + tag + ": " + toolResult}, nil
		}
		switch kind {
		case "safe", "unsafe", "remind", "big", "ask":
			return durable.ModelResponse{ToolCalls: []durable.ToolCall{{ID: "call-" + tag, Name: kind + "_tool", Arguments: json.RawMessage(`{"tag":"` + tag + `"}`)}}}, nil
		case "stream":
			mark(dir, "stream")
			time.Sleep(pause)
			return durable.ModelResponse{Text: "streamed " + tag}, nil
		case "retry": // fails the first attempt ever made, across processes
			if countMarker(dir, "retry-failed:"+tag) == 0 {
				mark(dir, "retry-failed:"+tag)
				return durable.ModelResponse{}, durable.Transient(fmt.Errorf("rate limited"))
			}
		}
		return durable.ModelResponse{Text: "echo " + tag}, nil
	})
	// Replay-safe: the task it creates is committed with its result, so a
	// call interrupted before that commit did nothing.
	remind := durable.Tool{Name: "remind_tool", Safe: true, Execute: func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
		due := c.Now.Add(2 * pause)
		return durable.ToolResult{Output: "reminder set", Tasks: []durable.Task{{Kind: "crash-alarm", State: durable.Sleeping,
			Deadline: &due, Checkpoint: args, Background: true}}}, nil
	}}
	big := durable.Tool{Name: "big_tool", Safe: true, Execute: func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
		mark(dir, "big-result")
		return durable.ToolResult{Output: bigOutput}, nil
	}}
	opts := durable.Options{Model: model, DefaultModel: "test",
		Tools: []durable.Tool{tool("safe_tool", true), tool("unsafe_tool", false), tool("ask_tool", false), remind, big},
		Kinds: map[string]durable.TaskKind{"crash-alarm": crashAlarm{}},
		Retry: durable.RetryPolicy{Base: 3 * pause, Cap: time.Second}}
	if ttl := os.Getenv("CRASH_APPROVAL_TTL"); ttl != "" {
		opts.Policy = crashAsk{}
		opts.ApprovalTTL, _ = time.ParseDuration(ttl + "ms")
	}
	h, err := durable.Open(ctx, store, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Resume(); err != nil {
		t.Fatal(err)
	}
	var subs []int64
	for i, in := range strings.Split(os.Getenv("CRASH_INPUTS"), ",") {
		sub, err := h.Submit(ctx, 1, durable.Input{Text: in, RequestID: fmt.Sprint("r", i)})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub.ID)
	}
	mark(dir, "submitted")
	// Work that arrives while the recovery of the rest is under way.
	if late := os.Getenv("CRASH_LATE"); late != "" {
		for i, in := range strings.Split(late, ",") {
			sub, err := h.Submit(ctx, 1, durable.Input{Text: in, RequestID: fmt.Sprint("late", i)})
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub.ID)
		}
	}
	for _, id := range subs {
		if _, err := h.WaitSubmission(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for { // background alarms too: until nothing is live
		live, err := store.LiveTasks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(live) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d tasks still live after 60 s", len(live))
		}
		time.Sleep(5 * time.Millisecond)
	}
	mark(dir, "all-done")
	h.Close()
}

// Parent side.

type child struct {
	dir    string
	inputs []string
	late   []string // submitted by the recovery run, while it recovers the rest
	pause  int
	env    []string // more environment for every run of the child
	be     string   // its backend (backendOf the test that made it)
}

func (c child) cmd(extra ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CRASH_BACKEND="+c.be, "CRASH_DIR="+c.dir, "CRASH_INPUTS="+strings.Join(c.inputs, ","), fmt.Sprint("CRASH_PAUSE=", c.pause))
	cmd.Env = append(append(cmd.Env, c.env...), extra...)
	return cmd
}

func markers(dir string) []string {
	b, _ := os.ReadFile(filepath.Join(dir, "markers"))
	return strings.Fields(string(b))
}

func countMarker(dir, m string) int {
	n := 0
	for _, x := range markers(dir) {
		if x == m {
			n++
		}
	}
	return n
}

// startUntil starts the child and returns once marker has appeared once
// more than before, looking every poll. finished is true when the child
// ended first. Past a deadline the child is killed and the test fails.
func startUntil(t *testing.T, c child, marker string, poll time.Duration, extra ...string) (cmd *exec.Cmd, done chan struct{}, finished bool) {
	t.Helper()
	before := countMarker(c.dir, marker)
	cmd = c.cmd(extra...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done = make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	deadline := time.Now().Add(30 * time.Second)
	for countMarker(c.dir, marker) == before {
		select {
		case <-done:
			return cmd, done, true
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			t.Fatalf("marker %q never appeared; markers: %v", marker, markers(c.dir))
		}
		time.Sleep(poll)
	}
	return cmd, done, false
}

// kill SIGKILLs a started child and waits for it.
func kill(cmd *exec.Cmd, done chan struct{}) {
	cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// killAt starts the child and SIGKILLs it delay after marker appears (after
// its count so far).
func killAt(t *testing.T, c child, marker string, delay time.Duration, extra ...string) {
	t.Helper()
	cmd, done, finished := startUntil(t, c, marker, 2*time.Millisecond, extra...)
	if finished {
		t.Fatalf("the child ended before marker %q; markers: %v", marker, markers(c.dir))
	}
	time.Sleep(delay) // the kill point under test, not a wait for anything
	kill(cmd, done)
}

// killAfterSubmitted starts the child and SIGKILLs it d after it has
// submitted its work. It reports whether the kill landed before the child
// finished.
func killAfterSubmitted(t *testing.T, c child, d time.Duration) bool {
	t.Helper()
	cmd, done, finished := startUntil(t, c, "submitted", time.Millisecond)
	if finished {
		return false
	}
	select {
	case <-done:
		return false
	case <-time.After(d):
		kill(cmd, done)
		return true
	}
}

// killWhileWritingBigCommit starts the child and SIGKILLs it while SQLite
// appends the big tool's result to the WAL: once the WAL has grown by 1 MiB
// since the tool returned. It reports whether the kill came before the
// write was complete (the WAL had grown by less than the result's size).
func killWhileWritingBigCommit(t *testing.T, c child) bool {
	t.Helper()
	wal := filepath.Join(c.dir, "session.db-wal")
	size := func() int64 {
		st, err := os.Stat(wal)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	cmd, done, finished := startUntil(t, c, "big-result", 100*time.Microsecond)
	if finished {
		t.Fatalf("the child ended before the big tool ran; markers: %v", markers(c.dir))
	}
	base := size()
	deadline := time.Now().Add(30 * time.Second)
	var at int64
	for at = size(); at < base+1<<20 && time.Now().Before(deadline); at = size() {
	}
	kill(cmd, done)
	return at < base+int64(len(bigOutput))
}

// finish runs the recovery child to its end. One that has not ended in
// 3 minutes (it takes seconds) has stalled: it is killed, with a
// goroutine dump first, and the test fails instead of hanging the suite.
func finish(t *testing.T, c child) {
	t.Helper()
	cmd := c.cmd("CRASH_LATE=" + strings.Join(c.late, ","))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		cmd.Process.Signal(syscall.SIGQUIT) // the Go runtime dumps every goroutine and exits
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		t.Fatalf("recovery run stalled; markers %v\n%s", markers(c.dir), out.String())
	}
	if err != nil || countMarker(c.dir, "all-done") == 0 {
		t.Fatalf("recovery run failed: %v\n%s", err, out.String())
	}
}

func runLines(dir string) []string {
	f, err := os.Open(filepath.Join(dir, "runs"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// recovered opens the child's store after its runs, with the entries of
// its conversation; the caller closes the store.
func recovered(t *testing.T, c child) (*durable.Store, durable.Page[durable.Entry]) {
	t.Helper()
	s, err := durable.OpenStore(ctx, mustCrashOpen(t, filepath.Join(c.dir, "session.db")))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Entries(ctx, 1, durable.Scan{Limit: 10000})
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	return s, p
}

// check verifies the invariants after recovery and returns the answers by
// tag: every input stored once and answered exactly once, every tool call
// with exactly one intent and one result (no orphan results), one alarm per
// remind, no error entries, a usage ledger that counts each model reply and
// each tool result once, and nothing left live.
func check(t *testing.T, c child) map[string]string {
	t.Helper()
	s, p := recovered(t, c)
	defer s.Close()
	owner := map[string]int{}
	intents := map[string]int{}
	results := map[string]int{}
	finals := map[int64]int{} // run -> assistant messages without tool calls
	alarms := map[string]int{}
	kinds := map[durable.EntryKind]int{}
	for _, e := range p.Items {
		kinds[e.Kind]++
		switch e.Kind {
		case durable.OwnerMessage:
			owner[e.Text]++
		case durable.ToolCallEntry:
			intents[fmt.Sprint(e.RunID, e.ToolCallID)]++
		case durable.ToolResultEntry:
			results[fmt.Sprint(e.RunID, e.ToolCallID)]++
		case durable.AssistantMessage:
			if len(e.ToolCalls) == 0 {
				finals[e.RunID]++
			}
		case durable.OutsideText:
			alarms[e.Text]++
		case durable.ErrorEntry:
			t.Errorf("error entry: %q", e.Text)
		}
	}
	answers := map[string]string{}
	inputs := map[string]string{} // input -> request id
	for i, in := range c.inputs {
		inputs[in] = fmt.Sprint("r", i)
	}
	for i, in := range c.late {
		inputs[in] = fmt.Sprint("late", i)
	}
	reminds := 0
	for in, req := range inputs {
		if owner[in] != 1 {
			t.Errorf("input %q stored %d times", in, owner[in])
		}
		kind, tag, _ := strings.Cut(in, " ")
		if kind == "remind" {
			reminds++
			if alarms["alarm "+tag] != 1 {
				t.Errorf("reminder %s fired %d times", tag, alarms["alarm "+tag])
			}
		}
		sub, err := s.SubmissionByRequest(ctx, 1, req)
		if err != nil || sub.Status != durable.Done {
			t.Errorf("submission of %q: %+v %v", in, sub, err)
			continue
		}
		if finals[sub.TaskID] != 1 {
			t.Errorf("input %q: %d final answers in its run, want exactly 1", in, finals[sub.TaskID])
		}
		a, err := s.Entry(ctx, sub.AnswerEntryID)
		if err != nil {
			t.Errorf("answer of %q: %v", in, err)
			continue
		}
		answers[tag] = a.Text
	}
	if len(alarms) != reminds {
		t.Errorf("%d distinct alarms for %d reminders: %v", len(alarms), reminds, alarms)
	}
	for k, n := range intents {
		if n != 1 || results[k] != 1 {
			t.Errorf("tool call %s: %d intents, %d results", k, n, results[k])
		}
	}
	for k := range results {
		if intents[k] != 1 {
			t.Errorf("tool result %s has %d intents (an orphan result)", k, intents[k])
		}
	}
	u, err := s.Usage(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	var modelCalls, toolCalls int64
	for _, m := range u.Models {
		modelCalls += m.Calls
	}
	for _, n := range u.Tools {
		toolCalls += n
	}
	if modelCalls != int64(kinds[durable.AssistantMessage]) {
		t.Errorf("usage ledger: %d model calls for %d model replies stored", modelCalls, kinds[durable.AssistantMessage])
	}
	if toolCalls != int64(kinds[durable.ToolResultEntry]) {
		t.Errorf("usage ledger: %d tool calls for %d tool results stored", toolCalls, kinds[durable.ToolResultEntry])
	}
	live, _ := s.LiveTasks(ctx)
	if len(live) != 0 {
		t.Errorf("%d tasks still live after recovery", len(live))
	}
	return answers
}

func newChild(t *testing.T, pause int, inputs ...string) child {
	return child{dir: t.TempDir(), inputs: inputs, pause: pause, be: backendOf(t)}
}

func TestCrashAtChosenPoints(t *testing.T) { onBackends(t, crashAtChosenPoints) }

func crashAtChosenPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	t.Run("during a model stream", func(t *testing.T) {
		c := newChild(t, 300, "stream s1")
		killAt(t, c, "stream", 50*time.Millisecond)
		finish(t, c)
		if a := check(t, c); a["s1"] != "streamed s1" {
			t.Fatalf("answer %q", a["s1"])
		}
	})
	t.Run("inside a safe tool: it reruns", func(t *testing.T) {
		c := newChild(t, 300, "safe t1")
		killAt(t, c, "safe_tool", 50*time.Millisecond)
		finish(t, c)
		a := check(t, c)
		if a["t1"] != "done t1: safe_tool-ok t1" {
			t.Fatalf("answer %q", a["t1"])
		}
		if n := strings.Count(strings.Join(runLines(c.dir), "\n"), "safe_tool t1"); n != 2 {
			t.Fatalf("safe tool ran %d times, want 2", n)
		}
	})
	t.Run("inside an unsafe tool: reported interrupted, never rerun", func(t *testing.T) {
		c := newChild(t, 300, "unsafe u1")
		killAt(t, c, "unsafe_tool", 50*time.Millisecond)
		finish(t, c)
		a := check(t, c)
		if !strings.Contains(a["u1"], "was interrupted and may have partially run") {
			t.Fatalf("answer %q", a["u1"])
		}
		if n := strings.Count(strings.Join(runLines(c.dir), "\n"), "unsafe_tool u1"); n != 1 {
			t.Fatalf("unsafe tool ran %d times, want 1", n)
		}
	})
	t.Run("between a tool's intent and its result", func(t *testing.T) {
		// The intent commit happens right before the tool starts; killing at
		// the tool's first line is the earliest point after it.
		c := newChild(t, 300, "unsafe u2", "safe t2")
		killAt(t, c, "unsafe_tool", 0)
		finish(t, c)
		a := check(t, c)
		if !strings.Contains(a["u2"], "interrupted") || a["t2"] != "done t2: safe_tool-ok t2" {
			t.Fatalf("answers %q / %q", a["u2"], a["t2"])
		}
	})
	t.Run("while sleeping for a retry", func(t *testing.T) {
		c := newChild(t, 100, "retry z1")
		killAt(t, c, "retry-failed:z1", 50*time.Millisecond)
		finish(t, c)
		if a := check(t, c); a["z1"] != "echo z1" {
			t.Fatalf("answer %q", a["z1"])
		}
	})
	t.Run("while a reminder sleeps", func(t *testing.T) {
		c := newChild(t, 200, "remind m1")
		killAt(t, c, "submitted", 150*time.Millisecond)
		finish(t, c)
		if a := check(t, c); a["m1"] != "done m1: reminder set" {
			t.Fatalf("answer %q", a["m1"])
		}
	})
	t.Run("while SQLite writes a commit", func(t *testing.T) {
		if backendOf(t) == "postgres" {
			t.Skip("it watches SQLite's WAL grow; on Postgres the server writes, and a client killed mid-send leaves nothing (the other cases cover it)")
		}
		midWrite := 0
		for i := range 4 {
			c := newChild(t, 20, "big g1", "plain p1")
			if killWhileWritingBigCommit(t, c) {
				midWrite++
			}
			c.late = []string{"plain late" + fmt.Sprint(i)}
			finish(t, c)
			a := check(t, c)
			if a["g1"] != "done g1: "+bigOutput || a["p1"] != "echo p1" {
				t.Fatalf("answers after a kill during the big commit: %d bytes / %q", len(a["g1"]), a["p1"])
			}
		}
		t.Logf("%d of 4 kills landed while the WAL was still being written", midWrite)
		if midWrite == 0 {
			t.Fatal("no kill landed while SQLite was writing the commit")
		}
	})
	t.Run("right after each of the first commits", func(t *testing.T) {
		// Every boundary between two commits of a tool turn and a plain
		// reply: work split over two commits would show here as a step
		// done twice. On Postgres, opening makes one transaction fewer
		// (the schema comes from migration files, not from a transaction).
		commits := 14
		if backendOf(t) == "postgres" {
			commits = 13
		}
		for n := 1; n <= commits; n++ {
			c := newChild(t, 20, "safe c1", "plain p1")
			killAt(t, c, "after-commit", 0, fmt.Sprint("CRASH_AFTER_COMMIT=", n))
			finish(t, c)
			a := check(t, c)
			if a["c1"] != "done c1: safe_tool-ok c1" || a["p1"] != "echo p1" {
				t.Fatalf("after commit %d: answers %v", n, a)
			}
		}
	})
	t.Run("inside a commit", func(t *testing.T) {
		for _, n := range []int{2, 3, 4, 5, 6} {
			c := newChild(t, 20, "safe c1", "plain p1")
			killAt(t, c, "in-commit", 20*time.Millisecond, fmt.Sprint("CRASH_COMMIT_STALL=", n))
			finish(t, c)
			a := check(t, c)
			if a["c1"] != "done c1: safe_tool-ok c1" || a["p1"] != "echo p1" {
				t.Fatalf("commit %d: answers %v", n, a)
			}
		}
	})
}

// At least 50 kills at random moments after the child has submitted a
// mixed workload (tools, a slow stream, a retry, a reminder), several per
// database, and a submission arriving during each recovery; bounded in time.
func TestCrashAtRandomPoints(t *testing.T) { onBackends(t, crashAtRandomPoints) }

func crashAtRandomPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	const kills = 60
	budget := time.Now().Add(3 * time.Minute)
	done, dbs := 0, 0
	for db := 0; done < kills && time.Now().Before(budget); db++ {
		dbs++
		tag := fmt.Sprint(db)
		c := newChild(t, 25, "safe a"+tag, "unsafe b"+tag, "stream c"+tag, "plain d"+tag, "retry e"+tag, "remind f"+tag)
		for range 6 {
			if killAfterSubmitted(t, c, time.Duration(rand.IntN(250))*time.Millisecond) {
				done++
			}
		}
		c.late = []string{"plain g" + tag}
		finish(t, c)
		a := check(t, c)
		if a["a"+tag] != "done a"+tag+": safe_tool-ok a"+tag {
			t.Errorf("db %d: safe answer %q", db, a["a"+tag])
		}
		unsafeRuns := strings.Count(strings.Join(runLines(c.dir), "\n"), "unsafe_tool b"+tag)
		switch ub := a["b"+tag]; {
		case unsafeRuns > 1:
			t.Errorf("db %d: unsafe tool ran %d times", db, unsafeRuns)
		case strings.Contains(ub, "interrupted"):
		case ub != "done b"+tag+": unsafe_tool-ok b"+tag || unsafeRuns != 1:
			t.Errorf("db %d: unsafe answer %q after %d runs", db, ub, unsafeRuns)
		}
		if a["c"+tag] != "streamed c"+tag || a["d"+tag] != "echo d"+tag || a["e"+tag] != "echo e"+tag ||
			a["f"+tag] != "done f"+tag+": reminder set" || a["g"+tag] != "echo g"+tag {
			t.Errorf("db %d: answers %v", db, a)
		}
	}
	if done < 50 {
		t.Fatalf("only %d kill points within the time budget", done)
	}
	t.Logf("%d random kill points after submission over %d databases", done, dbs)
}

// An approval nobody decides expires exactly once, whichever commit a
// SIGKILL comes right after (the ask, the expiry's, the answer's) and
// however long the process was gone: the run records one expiry, the model
// reads one refusal and answers once, and the tool never runs.
func TestCrashApprovalExpiresOnce(t *testing.T) { onBackends(t, crashApprovalExpiresOnce) }

func crashApprovalExpiresOnce(t *testing.T) {
	killed := 0
	for n := 1; n <= 30; n++ {
		c := newChild(t, 10, "ask a")
		c.env = []string{"CRASH_APPROVAL_TTL=300"}
		cmd, done, finished := startUntil(t, c, "after-commit", time.Millisecond, fmt.Sprint("CRASH_AFTER_COMMIT=", n))
		if !finished {
			kill(cmd, done)
			killed++
			finish(t, c)
		}
		checkExpiredOnce(t, c, n)
		if finished {
			break
		}
	}
	if killed < 6 {
		t.Fatalf("killed after only %d commits: the workload should make more", killed)
	}
	t.Logf("killed right after each of the first %d commits", killed)
}

func checkExpiredOnce(t *testing.T, c child, n int) {
	t.Helper()
	for _, line := range runLines(c.dir) {
		if strings.HasPrefix(line, "ask_tool") {
			t.Errorf("kill after commit %d: the tool of an expired approval ran: %q", n, line)
		}
	}
	s, p := recovered(t, c)
	defer s.Close()
	count := map[string]int{}
	for _, e := range p.Items {
		k := string(e.Kind)
		switch e.Kind {
		case durable.DecisionEntry:
			var d durable.Decision
			_ = json.Unmarshal(e.Data, &d)
			k += ":" + d.Decision
		case durable.ToolResultEntry:
			k += ":" + strings.Fields(e.Text)[0]
		}
		count[k]++
	}
	want := map[string]int{"owner_message": 1, "assistant_message": 2, "approval": 1, "approval_decision:expired": 1, "tool_result:[expired]": 1}
	if fmt.Sprint(count) != fmt.Sprint(want) {
		t.Errorf("kill after commit %d: entries %v, want %v", n, count, want)
	}
	sub, err := s.SubmissionByRequest(ctx, 1, "r0")
	if err != nil || sub.Status != durable.Done {
		t.Errorf("kill after commit %d: submission %+v %v", n, sub, err)
	}
	if live, _ := s.LiveTasks(ctx); len(live) != 0 {
		t.Errorf("kill after commit %d: %d tasks still live", n, len(live))
	}
}
