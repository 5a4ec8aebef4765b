package durable_test

// The crash suite kills a real child process (this test binary, re-run as
// TestCrashChild) with SIGKILL at chosen and at random points of a
// workload, reopens the database in a new child that runs to the end, and
// checks that every run reached its expected end with no entry lost or
// duplicated, that the safe tool reran and the unsafe one was reported
// interrupted.

import (
	"bufio"
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
)

// Child side. Env: CRASH_DIR (db, markers, runs log), CRASH_INPUTS (comma
// separated), CRASH_PAUSE (ms each slow operation takes), CRASH_COMMIT_STALL
// (stall inside the Nth commit).

func mark(dir, what string) {
	f, err := os.OpenFile(filepath.Join(dir, "markers"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err == nil {
		fmt.Fprintln(f, what)
		f.Sync()
		f.Close()
	}
}

// stallDB stalls inside its Nth transaction, after the writes and before
// the commit, so the parent can kill the process mid-commit.
type stallDB struct {
	durable.DB
	dir   string
	n     int64
	count atomic.Int64
}

func (s *stallDB) Transaction(ctx context.Context, fn func(tx durable.Executor) error) error {
	return s.DB.Transaction(ctx, func(tx durable.Executor) error {
		if err := fn(tx); err != nil {
			return err
		}
		if s.count.Add(1) == s.n {
			mark(s.dir, "in-commit")
			time.Sleep(10 * time.Second)
		}
		return nil
	})
}

func TestCrashChild(t *testing.T) {
	dir := os.Getenv("CRASH_DIR")
	if dir == "" {
		t.Skip("helper process for the crash suite")
	}
	pause, _ := time.ParseDuration(os.Getenv("CRASH_PAUSE") + "ms")
	var db durable.DB = openDB(t, filepath.Join(dir, "session.db"))
	if n := os.Getenv("CRASH_COMMIT_STALL"); n != "" {
		var k int64
		fmt.Sscan(n, &k)
		db = &stallDB{DB: db, dir: dir, n: k}
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
		last := lastMsg(req)
		text := lastUser(req)
		_, body, _ := strings.Cut(text, "] ")
		kind, tag, _ := strings.Cut(body, " ")
		if last.Role == "tool" {
			return durable.ModelResponse{Text: "done " + tag + ": " + last.Content}, nil
		}
		switch kind {
		case "safe", "unsafe":
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
	h, err := durable.Open(ctx, store, durable.Options{Model: model, DefaultModel: "test", Tools: []durable.Tool{tool("safe_tool", true), tool("unsafe_tool", false)},
		Retry: durable.RetryPolicy{Base: 3 * pause, Cap: time.Second}})
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
	for _, id := range subs {
		if _, err := h.WaitSubmission(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	mark(dir, "all-done")
	h.Close()
}

// Parent side.

type child struct {
	dir    string
	inputs []string
	pause  int
}

func (c child) cmd(extra ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CRASH_DIR="+c.dir, "CRASH_INPUTS="+strings.Join(c.inputs, ","), fmt.Sprint("CRASH_PAUSE=", c.pause))
	cmd.Env = append(cmd.Env, extra...)
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

// killAt starts the child and SIGKILLs it when marker appears (after its
// count so far) plus delay.
func killAt(t *testing.T, c child, marker string, delay time.Duration, extra ...string) {
	t.Helper()
	before := countMarker(c.dir, marker)
	cmd := c.cmd(extra...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for countMarker(c.dir, marker) == before {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("marker %q never appeared; markers: %v", marker, markers(c.dir))
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(delay)
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}

// killAfter starts the child and SIGKILLs it after d. It reports whether
// the kill landed (the child may finish first).
func killAfter(c child, d time.Duration) bool {
	cmd := c.cmd()
	if cmd.Start() != nil {
		return false
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
		return false
	case <-time.After(d):
		cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return true
	}
}

func finish(t *testing.T, c child) {
	t.Helper()
	out, err := c.cmd().CombinedOutput()
	if err != nil || countMarker(c.dir, "all-done") == 0 {
		t.Fatalf("recovery run failed: %v\n%s", err, out)
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

// check verifies the invariants after recovery and returns the answers by tag.
func check(t *testing.T, c child) map[string]string {
	t.Helper()
	s, err := durable.OpenStore(ctx, openDB(t, filepath.Join(c.dir, "session.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := s.Entries(ctx, 1, durable.Scan{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	owner := map[string]int{}
	intents := map[string]int{}
	results := map[string]int{}
	for _, e := range p.Items {
		switch e.Kind {
		case durable.OwnerMessage:
			owner[e.Text]++
		case durable.ToolCallEntry:
			intents[fmt.Sprint(e.RunID, e.ToolCallID)]++
		case durable.ToolResultEntry:
			results[fmt.Sprint(e.RunID, e.ToolCallID)]++
		}
	}
	answers := map[string]string{}
	for i, in := range c.inputs {
		if owner[in] != 1 {
			t.Errorf("input %q stored %d times", in, owner[in])
		}
		sub, err := s.SubmissionByRequest(ctx, 1, fmt.Sprint("r", i))
		if err != nil || sub.Status != durable.Done {
			t.Errorf("submission of %q: %+v %v", in, sub, err)
			continue
		}
		a, err := s.Entry(ctx, sub.AnswerEntryID)
		if err != nil {
			t.Errorf("answer of %q: %v", in, err)
			continue
		}
		_, tag, _ := strings.Cut(in, " ")
		answers[tag] = a.Text
	}
	for k, n := range intents {
		if n != 1 || results[k] != 1 {
			t.Errorf("tool call %s: %d intents, %d results", k, n, results[k])
		}
	}
	live, _ := s.LiveTasks(ctx)
	if len(live) != 0 {
		t.Errorf("%d tasks still live after recovery", len(live))
	}
	return answers
}

func newChild(t *testing.T, pause int, inputs ...string) child {
	return child{dir: t.TempDir(), inputs: inputs, pause: pause}
}

func TestCrashAtChosenPoints(t *testing.T) {
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

// At least 50 kills at random moments of a mixed workload, several per
// database, bounded in time.
func TestCrashAtRandomPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	const kills = 60
	budget := time.Now().Add(3 * time.Minute)
	done, dbs := 0, 0
	for db := 0; done < kills && time.Now().Before(budget); db++ {
		dbs++
		c := newChild(t, 25, "safe a"+fmt.Sprint(db), "unsafe b"+fmt.Sprint(db), "stream c"+fmt.Sprint(db), "plain d"+fmt.Sprint(db), "retry e"+fmt.Sprint(db))
		for range 6 {
			if killAfter(c, time.Duration(rand.IntN(300))*time.Millisecond) {
				done++
			}
		}
		finish(t, c)
		a := check(t, c)
		tag := fmt.Sprint(db)
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
		if a["c"+tag] != "streamed c"+tag || a["d"+tag] != "echo d"+tag || a["e"+tag] != "echo e"+tag {
			t.Errorf("db %d: answers %v", db, a)
		}
	}
	if done < 50 {
		t.Fatalf("only %d kill points within the time budget", done)
	}
	t.Logf("%d random kill points over %d databases", done, dbs)
}
