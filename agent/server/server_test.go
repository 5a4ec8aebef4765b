package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/gatewaytest"
	"github.com/affido/affido/internal/openai"
	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/internal/scripted"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/identity"
	"github.com/affido/affido/agent/jobs"
	"github.com/affido/affido/agent/modelclient"
	"github.com/affido/affido/agent/reminders"
	"github.com/affido/affido/agent/server"
	"github.com/affido/affido/agent/tools"
	"github.com/affido/affido/agent/workspace"
)

type agent struct {
	t       *testing.T
	srv     *server.Server
	http    *httptest.Server
	dir     string
	ws      string
	db      string
	id      *identity.Store
	holdMu  sync.Mutex
	hold    chan struct{} // while non-nil, model calls wait for it
	held    chan struct{} // receives once per model call that waits on hold
	reading chan struct{} // receives when a request handler first reads its body
	systems []string      // the system message of every model request, in order (under holdMu)
}

// slowProvider delays answers while a.hold is set, so tests can catch a run in flight.
type slowProvider struct {
	gatewaytest.Model
	a *agent
}

func (p slowProvider) Serve(ctx context.Context, w http.ResponseWriter, req openai.ChatRequest) (openai.ChatUsage, error) {
	p.a.holdMu.Lock()
	c := p.a.hold
	system := ""
	if len(req.Messages) > 0 && req.Messages[0].Role == "system" {
		system = req.Messages[0].Content
	}
	p.a.systems = append(p.a.systems, system)
	p.a.holdMu.Unlock()
	if c != nil {
		select {
		case p.a.held <- struct{}{}:
		default:
		}
		<-c
	}
	return p.Model.Serve(ctx, w, req)
}

// signalBody tells the test when a handler starts reading its request body:
// from then on the request is inside the server and counted as in flight.
type signalBody struct {
	io.ReadCloser
	c    chan struct{}
	once sync.Once
}

func (b *signalBody) Read(p []byte) (int, error) {
	b.once.Do(func() {
		select {
		case b.c <- struct{}{}:
		default:
		}
	})
	return b.ReadCloser.Read(p)
}

// identityOf loads the identity kept beside db; with a user, claimed by it.
func identityOf(t *testing.T, db, user string) *identity.Store {
	t.Helper()
	os.MkdirAll(filepath.Dir(db), 0o755)
	id, err := identity.Load(filepath.Dir(db))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		if err := id.Claim(user, "token-"+user+"-abcdef"); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// newAgent starts an agent claimed by user "u".
func newAgent(t *testing.T) *agent { return startAgent(t, t.TempDir(), "u") }

// startAgent starts an agent on dir, claimed by user unless it is empty (an
// agent already claimed in dir stays so).
func startAgent(t *testing.T, dir, user string) *agent { return startAgentWith(t, dir, user, nil) }

// startAgentWith is startAgent with the owner's agents' tools that come and
// go (their connectors), if agentTools is not nil.
func startAgentWith(t *testing.T, dir, user string, agentTools func(string) func(context.Context) ([]durable.Tool, error)) *agent {
	a := &agent{t: t, dir: dir, held: make(chan struct{}, 1), reading: make(chan struct{}, 1)}
	a.ws = filepath.Join(a.dir, "workspace")
	a.db = filepath.Join(a.dir, "data", "session.db")
	a.id = identityOf(t, a.db, user)
	// The gateway's double fetches loopback: the tests' pages are served there.
	gw := gatewaytest.Start(t, &gatewaytest.Gateway{Model: slowProvider{scripted.NewModel([]string{"fake/echo", "fake/alt"}), a}})
	model := modelclient.New(gw, a.id.Token)
	red := tools.NewRedactor(map[string]string{"AFFIDO_SECRET_DEMO": "s3cr3t-value"})
	builtin := append(tools.Builtin(workspace.Workspace{Dir: a.ws}, tools.LocalShell{Path: "/bin/sh", Dir: a.ws}), tools.WebTools(model)...)
	builtin = append(append(builtin, reminders.Tools()...), jobs.Tools()...)
	notify := func(context.Context, gatewayapi.Notification) error { return nil }
	a.srv = server.New(server.Config{Identity: a.id, SessionDB: a.db, Workspace: a.ws, Model: model, DefaultModel: "fake/echo", Models: model.Models,
		WorkerTools: tools.WebTools(model), AgentTools: agentTools,
		Harness: durable.Options{Tools: builtin, Redact: red.Redact, Kinds: map[string]durable.TaskKind{reminders.Kind: reminders.Task{Notify: notify}, jobs.Kind: jobs.Task{}}},
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil))})
	h := a.srv.Handler()
	a.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &signalBody{ReadCloser: r.Body, c: a.reading}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { a.http.Close(); a.srv.Close() })
	return a
}

func (a *agent) do(method, path, body string) (int, map[string]any) {
	a.t.Helper()
	code, _, m := a.doWith(method, path, body, nil)
	return code, m
}

// doWith sends a request with extra headers and returns the answer's.
func (a *agent) doWith(method, path, body string, hdr http.Header) (int, http.Header, map[string]any) {
	a.t.Helper()
	req, _ := http.NewRequest(method, a.http.URL+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		m = map[string]any{"raw": string(b)}
	}
	if resp.StatusCode >= 400 && resp.Header.Get("Content-Type") != "application/problem+json" {
		a.t.Errorf("%s %s: %d without a problem body", method, path, resp.StatusCode)
	}
	return resp.StatusCode, resp.Header, m
}

func (a *agent) prompt(text string) map[string]any {
	a.t.Helper()
	b, _ := json.Marshal(map[string]string{"text": text})
	code, m := a.do("POST", "/prompt", string(b))
	if code != 200 {
		a.t.Fatalf("prompt %q: %d %v", text, code, m)
	}
	return m
}

// allow adds the owner's rule that lets tool run without asking.
// allow adds a rule that allows every call of tool: the test means it.
func (a *agent) allow(tool string) {
	a.t.Helper()
	if code, m := a.do("POST", "/rules", `{"tool":"`+tool+`","effect":"allow","confirm_unconditional":true}`); code != 201 {
		a.t.Fatalf("allow %s: %d %v", tool, code, m)
	}
}

func (a *agent) entryCount() float64 {
	a.t.Helper()
	_, m := a.do("GET", "/session", "")
	return m["entry_count"].(float64)
}

func TestFreshAgentDoesNotOpenStorageForHealthAndStatus(t *testing.T) {
	a := newAgent(t)
	for _, p := range []string{"/health", "/status", "/health", "/files"} {
		if code, _ := a.do("GET", p, ""); code != 200 {
			t.Fatalf("%s: %d", p, code)
		}
	}
	if code, _ := a.do("POST", "/ingest?name=a.txt", "some text"); code != 201 {
		t.Fatalf("ingest: %d", code)
	}
	if code, _ := a.do("POST", "/pause", ""); code != 200 {
		t.Fatalf("pause: %d", code)
	}
	if _, err := os.Stat(a.db); !os.IsNotExist(err) {
		t.Fatalf("the session database exists after passive routes: %v", err)
	}
	a.prompt("hi")
	if _, err := os.Stat(a.db); err != nil {
		t.Fatalf("a prompt did not create the database: %v", err)
	}
}

func TestPromptToolsInspectEntry(t *testing.T) {
	a := newAgent(t)
	m := a.prompt("hello agent")
	if m["reply"] != "echo: hello agent" || m["status"] != "done" || m["model"] != "fake/echo" {
		t.Fatalf("reply %v", m)
	}
	a.allow("write_file")
	a.allow("shell")
	a.prompt("write notes/a.txt: line one")
	m = a.prompt("read notes/a.txt")
	if !strings.Contains(m["reply"].(string), "line one") || len(m["entries"].([]any)) != 5 {
		t.Fatalf("read reply %v", m)
	}
	m = a.prompt("run: echo from-shell && cat notes/a.txt")
	if !strings.Contains(m["reply"].(string), "from-shell") {
		t.Fatalf("shell reply %v", m)
	}
	_, in := a.do("GET", "/inspect?limit=1000", "")
	entries := in["entries"].(map[string]any)["items"].([]any)
	var kinds []string
	var resultID float64
	for _, e := range entries {
		em := e.(map[string]any)
		kinds = append(kinds, em["kind"].(string))
		if em["kind"] == "tool_result" && em["tool_name"] == "read_file" {
			resultID = em["id"].(float64)
		}
	}
	want := "owner_message,assistant_message,policy,policy,owner_message,assistant_message,tool_call,tool_result,assistant_message"
	if !strings.HasPrefix(strings.Join(kinds, ","), want) {
		t.Fatalf("kinds %v", kinds)
	}
	code, e := a.do("GET", "/entry?id="+jsonNum(resultID), "")
	if code != 200 || e["text"] != "line one" || e["tool_call_id"] == "" {
		t.Fatalf("entry %d %v", code, e)
	}
	usage := in["usage"].(map[string]any)
	if usage["tools"].(map[string]any)["read_file"].(float64) != 1 {
		t.Fatalf("usage %v", usage)
	}
}

func jsonNum(f float64) string { b, _ := json.Marshal(f); return string(b) }

func TestConversationsAndReset(t *testing.T) {
	a := newAgent(t)
	a.prompt("in the root")
	code, c := a.do("POST", "/session/new", `{"title":"topic two","model":"fake/alt"}`)
	if code != 200 || c["title"] != "topic two" || c["entry_count"].(float64) != 0 {
		t.Fatalf("new %d %v", code, c)
	}
	second := c["conversation_id"].(float64)
	if m := a.prompt("in topic two"); m["model"] != "fake/alt" {
		t.Fatalf("conversation model not used: %v", m)
	}
	code, c = a.do("POST", "/session/switch", `{"id":1}`)
	if code != 200 || c["entry_count"].(float64) != 2 {
		t.Fatalf("switch %d %v", code, c)
	}
	code, _ = a.do("POST", "/reset", "")
	if code != 200 || a.entryCount() != 3 {
		t.Fatalf("reset %d, entries %v", code, a.entryCount())
	}
	_, in := a.do("GET", "/inspect?conversation="+jsonNum(second), "")
	if in["entry_count"].(float64) != 2 {
		t.Fatalf("second conversation %v", in["entry_count"])
	}
}

func TestModelPerPromptIsRecorded(t *testing.T) {
	a := newAgent(t)
	for _, model := range []string{"fake/echo", "fake/alt"} {
		b, _ := json.Marshal(map[string]string{"text": "which model?", "model": model})
		code, m := a.do("POST", "/prompt", string(b))
		if code != 200 || m["model"] != model {
			t.Fatalf("%s: %d %v", model, code, m)
		}
	}
}

func TestPromptIsIdempotentByRequestID(t *testing.T) {
	a := newAgent(t)
	body := `{"text":"once","requestId":"abc"}`
	_, m1 := a.do("POST", "/prompt", body)
	_, m2 := a.do("POST", "/prompt", body)
	if m1["run_id"] != m2["run_id"] || a.entryCount() != 2 {
		t.Fatalf("runs %v %v, entries %v", m1["run_id"], m2["run_id"], a.entryCount())
	}
}

// Every bad input gets a 4xx problem and writes nothing.
func TestBadInputWritesNothing(t *testing.T) {
	a := newAgent(t)
	a.prompt("seed")
	os.MkdirAll(a.ws, 0o755)
	outside := filepath.Join(a.dir, "outside.txt")
	os.WriteFile(outside, []byte("secret outside"), 0o644)
	os.Symlink(outside, filepath.Join(a.ws, "link"))
	os.Symlink(a.dir, filepath.Join(a.ws, "dirlink"))
	big := strings.Repeat("x", 70<<10)
	tests := []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/prompt", `{}`, 400},
		{"POST", "/prompt", `{"text":"  "}`, 400},
		{"POST", "/prompt", `{"text":"x","bogus":1}`, 400},
		{"POST", "/prompt", `{"text":"x"} trailing`, 400},
		{"POST", "/prompt", `not json`, 400},
		{"POST", "/prompt", `{"text":"` + big + `"}`, 413},
		{"POST", "/prompt", `{"text":"x","model":"fake/unknown"}`, 400},
		{"POST", "/prompt", `{"text":"x","citations":"maybe"}`, 400},
		{"POST", "/prompt", `{"text":"` + strings.Repeat("y", 2<<20) + `"}`, 413},
		{"GET", "/entry?id=abc", "", 400},
		{"GET", "/entry?id=-1", "", 400},
		{"GET", "/entry?id=99999", "", 404},
		{"POST", "/session/switch", `{"id":999}`, 404},
		{"POST", "/session/switch", `{"id":"x"}`, 400},
		{"POST", "/session/new", `{"model":"nope/nope"}`, 400},
		{"GET", "/inspect?conversation=999", "", 404},
		{"GET", "/inspect?conversation=x", "", 400},
		{"GET", "/inspect?cursor=garbage", "", 400},
		{"GET", "/inspect?limit=0", "", 400},
		{"GET", "/file?path=../outside.txt", "", 400},
		{"GET", "/file?path=/etc/passwd", "", 400},
		{"GET", "/file?path=link", "", 400},
		{"GET", "/file?path=dirlink/outside.txt", "", 400},
		{"GET", "/file?path=nope.txt", "", 404},
		{"GET", "/file", "", 400},
		{"GET", "/files?path=..", "", 400},
		{"GET", "/files?path=dirlink", "", 400},
		{"PUT", "/uploads/../../escape.txt", "x", 404}, // cleaned to /escape.txt: no such route
		{"PUT", "/uploads/%2e%2e/%2e%2e/escape.txt", "x", 400},
		{"GET", "/artifacts/..%2f..%2foutside.txt", "", 400},
		{"POST", "/ingest?name=../x", "text", 400},
		{"POST", "/ingest?name=.hidden", "text", 400},
		{"POST", "/ingest?name=bin.dat", "abc\x00def", 415},
		{"POST", "/ingest?name=bad.txt", "\xff\xfe", 415},
		{"POST", "/ingest?name=empty.txt", "", 400},
		{"POST", "/ingest?name=big.txt", strings.Repeat("z", 1<<20+1), 413},
		{"GET", "/raw?doc=nope", "", 404},
		{"GET", "/raw?doc=../x", "", 400},
		{"GET", "/raw?doc=a&version=0", "", 400},
		{"DELETE", "/prompt", "", 405},
	}
	before := a.entryCount()
	for _, tt := range tests {
		code, m := a.do(tt.method, tt.path, tt.body)
		if code != tt.want {
			t.Errorf("%s %s: %d %v, want %d", tt.method, tt.path, code, m["detail"], tt.want)
		}
	}
	if after := a.entryCount(); after != before {
		t.Fatalf("bad input wrote entries: %v -> %v", before, after)
	}
	for _, p := range []string{filepath.Join(a.dir, "escape.txt"), filepath.Join(a.ws, "escape.txt")} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("a refused upload wrote %s", p)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "secret outside" {
		t.Fatal("the file outside the workspace changed")
	}
	if _, err := os.Stat(filepath.Join(a.dir, "data", "corpus", "bin.dat")); err == nil {
		t.Fatal("a refused ingest left a document")
	}
}

func TestUploadsArtifactsIngestRaw(t *testing.T) {
	a := newAgent(t)
	if code, _ := a.do("PUT", "/uploads/docs/in.txt", "uploaded bytes"); code != 201 {
		t.Fatalf("upload %d", code)
	}
	if code, m := a.do("GET", "/uploads/docs/in.txt", ""); code != 200 || m["raw"] != "uploaded bytes" {
		t.Fatalf("download %d %v", code, m)
	}
	a.allow("write_file")
	a.prompt("write artifacts/out.txt: made by the agent")
	if code, m := a.do("GET", "/artifacts/out.txt", ""); code != 200 || m["raw"] != "made by the agent" {
		t.Fatalf("artifact %d %v", code, m)
	}
	code, v1 := a.do("POST", "/ingest?name=doc.txt", "version one\r\nline two 👩‍👩‍👧\n")
	code2, again := a.do("POST", "/ingest?name=doc.txt", "version one\r\nline two 👩‍👩‍👧\n")
	code3, v2 := a.do("POST", "/ingest?name=doc.txt", "version two\n")
	if code != 201 || code2 != 200 || code3 != 201 || v1["version"].(float64) != 1 || again["version"].(float64) != 1 || v2["version"].(float64) != 2 {
		t.Fatalf("versions %v %v %v", v1, again, v2)
	}
	if code, m := a.do("GET", "/raw?doc=doc.txt&version=1", ""); code != 200 || m["raw"] != "version one\r\nline two 👩‍👩‍👧\n" {
		t.Fatalf("raw v1 %d %q", code, m["raw"])
	}
}

func TestRedactionOfToolResults(t *testing.T) {
	a := newAgent(t)
	os.MkdirAll(a.ws, 0o755)
	os.WriteFile(filepath.Join(a.ws, "leak.txt"), []byte("the key is s3cr3t-value, keep it"), 0o644)
	m := a.prompt("read leak.txt")
	if strings.Contains(m["reply"].(string), "s3cr3t-value") || !strings.Contains(m["reply"].(string), "[redacted AFFIDO_SECRET_DEMO]") {
		t.Fatalf("reply %q", m["reply"])
	}
	// The shell sees no secrets in its environment.
	a.allow("shell")
	m = a.prompt("run: env")
	if strings.Contains(m["reply"].(string), a.id.Token()) || strings.Contains(m["reply"].(string), "GATEWAY") {
		t.Fatalf("shell env leaks: %q", m["reply"])
	}
}

func TestPauseIfIdleRefusesWhileBusy(t *testing.T) {
	a := newAgent(t)
	a.prompt("warm up")
	a.holdMu.Lock()
	a.hold = make(chan struct{})
	a.holdMu.Unlock()
	done := make(chan map[string]any)
	go func() {
		code, m := a.do("POST", "/prompt", `{"text":"slow one"}`)
		m["code"] = code
		done <- m
	}()
	<-a.held // the prompt is inside the model call
	if code, _ := a.do("POST", "/pause?if_idle=1", ""); code != 409 {
		t.Fatalf("pause during a running prompt: %d", code)
	}
	a.holdMu.Lock()
	close(a.hold)
	a.hold = nil
	a.holdMu.Unlock()
	if m := <-done; m["code"].(int) != 200 {
		t.Fatalf("slow prompt %v", m)
	}
	// Another in-flight request (a slow upload) also keeps it awake.
	pr, pw := io.Pipe()
	upDone := make(chan struct{})
	go func() {
		req, _ := http.NewRequest("PUT", a.http.URL+"/uploads/slow.bin", pr)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		close(upDone)
	}()
	drain(a.reading)
	pw.Write(bytes.Repeat([]byte("a"), 1024))
	<-a.reading // the upload handler is reading its body
	if code, _ := a.do("POST", "/pause?if_idle=1", ""); code != 409 {
		t.Fatalf("pause during an upload: %d", code)
	}
	pw.Close()
	<-upDone
	code, m := a.do("POST", "/pause?if_idle=1", "")
	if code != 200 || m["next_wake_at"] != nil {
		t.Fatalf("idle pause %d %v", code, m)
	}
	if _, st := a.do("GET", "/status", ""); st["storage_open"] != false || st["entry_count"].(float64) != 4 {
		t.Fatalf("status after pause %v", st)
	}
	if code, _ := a.do("POST", "/wake", ""); code != 200 {
		t.Fatal("wake")
	}
	if _, st := a.do("GET", "/status", ""); st["storage_open"] != true {
		t.Fatalf("status after wake %v", st)
	}
}

// drain empties a signal channel so the next receive waits for a new signal.
func drain(c chan struct{}) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// Only Caddy's address may call the API: a program inside the sandbox that
// calls the agent (here: any other address) is refused, and writes nothing.
func TestAPIAnswersOnlyTheCaller(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "workspace")
	db := filepath.Join(dir, "data", "session.db")
	s := server.New(server.Config{Identity: identityOf(t, db, "u"), SessionDB: db, Workspace: ws,
		DefaultModel: "fake/echo", Caller: netip.MustParseAddr("10.213.0.14"),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer s.Close()
	h := httptest.NewServer(s.Handler()) // the test client comes from 127.0.0.1
	defer h.Close()
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"GET", "/health", "", 200},
		{"GET", "/status", "", 403},
		{"POST", "/ingest?name=planted.txt", "a planted document", 403},
		{"POST", "/skills/install", `{"name":"csv-summary"}`, 403},
		{"POST", "/prompt", `{"text":"hi"}`, 403},
		{"PUT", "/uploads/x.txt", "x", 403},
	} {
		req, _ := http.NewRequest(tc.method, h.URL+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s from another address: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Fatalf("refused requests wrote %v", ents)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "corpus")); err == nil {
		t.Fatal("a refused ingest wrote the corpus")
	}
}

// Where Caddy's address is not fixed (Kubernetes) the API answers only the
// key Caddy sends, and the agent holds just its hash. Tried: no key, a
// guess, the hash itself, the key with a byte more, the key twice, the
// right key beside a wrong one; each is refused and writes nothing, and
// the right key alone gets through.
func TestAPIAnswersOnlyTheCallerKey(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef-key"
	dir := t.TempDir()
	ws := filepath.Join(dir, "workspace")
	db := filepath.Join(dir, "data", "session.db")
	s := server.New(server.Config{Identity: identityOf(t, db, "u"), SessionDB: db, Workspace: ws,
		DefaultModel: "fake/echo", CallerKeyHash: sha256.Sum256([]byte(key)),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer s.Close()
	h := httptest.NewServer(s.Handler())
	defer h.Close()
	send := func(method, path, body string, keys ...string) int {
		t.Helper()
		req, _ := http.NewRequest(method, h.URL+path, strings.NewReader(body))
		for _, k := range keys {
			req.Header.Add(sandboxapi.HeaderCaller, k)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := send("GET", "/health", ""); c != 200 {
		t.Fatalf("GET /health without the key: %d, want 200", c)
	}
	for _, keys := range [][]string{nil, {""}, {"guess"}, {sandboxapi.CallerKeyHash(key)}, {key + "x"}, {key, key}, {key, "guess"}} {
		for _, tc := range []struct{ method, path, body string }{
			{"GET", "/status", ""},
			{"POST", "/ingest?name=planted.txt", "a planted document"},
			{"POST", "/prompt", `{"text":"hi"}`},
			{"PUT", "/uploads/x.txt", "x"},
			{"POST", "/claim", `{}`},
		} {
			if c := send(tc.method, tc.path, tc.body, keys...); c != http.StatusForbidden {
				t.Errorf("%s %s with caller keys %q: %d, want 403", tc.method, tc.path, keys, c)
			}
		}
	}
	if ents, _ := os.ReadDir(ws); len(ents) != 0 {
		t.Fatalf("refused requests wrote %v", ents)
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "corpus")); err == nil {
		t.Fatal("a refused ingest wrote the corpus")
	}
	if c := send("GET", "/status", "", key); c != 200 {
		t.Fatalf("GET /status with the key: %d, want 200", c)
	}
	if c := send("PUT", "/uploads/x.txt", "x", key); c != 201 {
		t.Fatalf("PUT /uploads/x.txt with the key: %d, want 201", c)
	}
}

// Uploads and ingest past the storage quota are 507 and store nothing.
func TestStorageQuotaOnUploadAndIngest(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "session.db")
	s := server.New(server.Config{Identity: identityOf(t, db, "u"), SessionDB: db, Workspace: filepath.Join(dir, "ws"),
		DefaultModel: "fake/echo", Quota: 1000, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	defer s.Close()
	h := httptest.NewServer(s.Handler())
	defer h.Close()
	send := func(method, path string, n int) int {
		req, _ := http.NewRequest(method, h.URL+path, strings.NewReader(strings.Repeat("x", n)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := send("PUT", "/uploads/a.txt", 600); c != 201 {
		t.Fatalf("first upload: %d", c)
	}
	if c := send("PUT", "/uploads/b.txt", 600); c != 507 {
		t.Fatalf("upload past the quota: %d, want 507", c)
	}
	if c := send("POST", "/ingest?name=d.txt", 600); c != 507 {
		t.Fatalf("ingest past the quota: %d, want 507", c)
	}
	if _, err := os.Stat(filepath.Join(dir, "ws", "uploads", "b.txt")); err == nil {
		t.Fatal("the refused upload was stored")
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "corpus", "d.txt")); err == nil {
		t.Fatal("the refused document was stored")
	}
}
