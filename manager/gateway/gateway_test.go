package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/openai"
	"github.com/affido/affido/internal/scripted"
	"github.com/affido/affido/manager/gateway"
	"github.com/affido/affido/manager/spend"
)

type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) RecordUsage(_ context.Context, user, model string, in, out int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, user+" "+model)
	return nil
}

// waitCalls returns the recorded usage once n calls are in; usage is
// recorded after the answer is streamed, so it may lag the client a moment.
func (r *recorder) waitCalls(n int) []string {
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		calls := append([]string(nil), r.calls...)
		r.mu.Unlock()
		if len(calls) >= n || time.Now().After(deadline) {
			return calls
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func caller(r *http.Request) (string, int, string) {
	if r.Header.Get("Authorization") != "Bearer sb-token" {
		return "", http.StatusUnauthorized, "bad sandbox token"
	}
	return "u1", 0, ""
}

func gatewayServer(t *testing.T, p gateway.Provider, rec *recorder) *httptest.Server {
	mux := http.NewServeMux()
	(&gateway.Handler{Caller: caller, Provider: p, Usage: rec, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// client stands in for the agent's model client: it streams a chat
// completion with a sandbox token, as the agent does, and puts the answer
// together from the chunks.
type client struct {
	base, token string
}

func newClient(srv *httptest.Server, token string) client {
	return client{base: srv.URL + gatewayapi.Prefix, token: token}
}

// answer is a streamed completion put together.
type answer struct {
	Text, StopReason, Model string
	ToolCalls               []openai.ChatToolCall
	Usage                   openai.ChatUsage
}

// statusError is a refusal: the status and the body.
type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.body) }

func ask(t *testing.T, c client, model string, msgs ...openai.ChatMessage) (answer, error) {
	t.Helper()
	req := openai.ChatRequest{Model: model, Messages: msgs, Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true}}
	tool := openai.ChatTool{Type: "function"}
	tool.Function.Name, tool.Function.Parameters = "shell", json.RawMessage(`{"type":"object"}`)
	req.Tools = append(req.Tools, tool)
	b, _ := json.Marshal(req)
	hr, _ := http.NewRequest("POST", c.base+gatewayapi.ChatPath, bytes.NewReader(b))
	hr.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		return answer{}, &statusError{resp.StatusCode, string(body)}
	}
	var a answer
	done := false
	calls := map[int]*openai.ChatToolCall{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ch openai.ChatChunk
		if err := json.Unmarshal([]byte(data), &ch); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		a.Model = ch.Model
		if ch.Usage != nil {
			a.Usage = *ch.Usage
		}
		for _, c := range ch.Choices {
			a.Text += c.Delta.Content
			if c.FinishReason != nil {
				a.StopReason = *c.FinishReason
			}
			for _, tc := range c.Delta.ToolCalls {
				if calls[tc.Index] == nil {
					calls[tc.Index] = &openai.ChatToolCall{Index: tc.Index}
					a.ToolCalls = append(a.ToolCalls, openai.ChatToolCall{})
				}
				cur := calls[tc.Index]
				cur.ID += tc.ID
				cur.Function.Name += tc.Function.Name
				cur.Function.Arguments += tc.Function.Arguments
			}
		}
	}
	for i := range a.ToolCalls {
		a.ToolCalls[i] = *calls[i]
	}
	if !done {
		t.Fatalf("the stream ended without [DONE]: %+v", a)
	}
	return a, nil
}

// status is the refusal's status, 0 for none.
func status(err error) int {
	var se *statusError
	if errors.As(err, &se) {
		return se.status
	}
	return 0
}

func TestFakeRulesOverTheWire(t *testing.T) {
	rec := &recorder{}
	srv := gatewayServer(t, scripted.NewModel([]string{"fake/echo", "fake/alt"}), rec)
	c := newClient(srv, "sb-token")
	user := func(s string) openai.ChatMessage {
		return openai.ChatMessage{Role: "user", Content: "[2026-11-29 15:00 UTC] " + s}
	}

	tests := []struct {
		in       string
		wantText string
		wantTool string
		wantArgs string
	}{
		{"hello there, how are you today?", "echo: hello there, how are you today?", "", ""},
		{"run: ls -la /workspace", "", "shell", `{"command":"ls -la /workspace"}`},
		{"read notes/a.txt", "", "read_file", `{"path":"notes/a.txt"}`},
		{"write a.txt: hello world", "", "write_file", `{"content":"hello world","path":"a.txt"}`},
		{"list", "", "list_files", `{"path":""}`},
		{"search apples", "", "corpus_search", `{"query":"apples"}`},
	}
	for _, tt := range tests {
		resp, err := ask(t, c, "fake/echo", user(tt.in))
		if err != nil {
			t.Fatalf("%q: %v", tt.in, err)
		}
		if resp.Text != tt.wantText {
			t.Errorf("%q: text %q, want %q", tt.in, resp.Text, tt.wantText)
		}
		if tt.wantTool == "" {
			if len(resp.ToolCalls) != 0 {
				t.Errorf("%q: unexpected tool calls %v", tt.in, resp.ToolCalls)
			}
			continue
		}
		if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Function.Name != tt.wantTool || resp.ToolCalls[0].Function.Arguments != tt.wantArgs || resp.ToolCalls[0].ID == "" {
			t.Errorf("%q: tool calls %+v", tt.in, resp.ToolCalls)
		}
		if resp.StopReason != "tool_calls" {
			t.Errorf("%q: stop reason %q", tt.in, resp.StopReason)
		}
	}
	// After a tool result, the fake reports it.
	call := openai.ChatToolCall{ID: "c1", Type: "function"}
	call.Function.Name, call.Function.Arguments = "shell", `{}`
	resp, err := ask(t, c, "fake/alt", user("run: echo hi"),
		openai.ChatMessage{Role: "assistant", ToolCalls: []openai.ChatToolCall{call}},
		openai.ChatMessage{Role: "tool", ToolCallID: "c1", Content: "hi\n"})
	if err != nil || resp.Text != "shell returned:\nhi\n" || resp.Model != "fake/alt" || resp.Usage.PromptTokens == 0 {
		t.Fatalf("after tool: %+v %v", resp, err)
	}
	if calls := rec.waitCalls(len(tests) + 1); len(calls) != len(tests)+1 || calls[0] != "u1 fake/echo" {
		t.Fatalf("usage records %v", calls)
	}
}

func TestBadCallsAreRefused(t *testing.T) {
	srv := gatewayServer(t, scripted.NewModel([]string{"fake/echo"}), &recorder{})
	_, err := ask(t, newClient(srv, "sb-token"), "fake/nope", openai.ChatMessage{Role: "user", Content: "x"})
	if status(err) != 400 {
		t.Fatalf("unknown model: %v", err)
	}
	_, err = ask(t, newClient(srv, "stolen"), "fake/echo", openai.ChatMessage{Role: "user", Content: "x"})
	if status(err) != 401 {
		t.Fatalf("bad token: %v", err)
	}
	resp, err := http.Post(srv.URL+gatewayapi.Prefix+gatewayapi.ChatPath, "application/json", strings.NewReader("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 { // the token is checked first
		t.Fatalf("no token, bad body: %d", resp.StatusCode)
	}
}

// The openrouter path against a local OpenAI-compatible server: the key is
// added upstream, the sandbox's token never goes there, and nothing of the
// key comes back to the sandbox.
func TestOpenRouterAddsKeyUpstream(t *testing.T) {
	var mu sync.Mutex
	var seen []http.Header
	var bodies []string
	fake := scripted.NewModel([]string{"vendor/model"})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		bodies = append(bodies, string(b))
		mu.Unlock()
		if r.URL.Path != "/api/v1/chat/completions" || r.Header.Get("Authorization") != "Bearer sk-or-secret" {
			http.Error(w, "unauthorized", 401)
			return
		}
		var req openai.ChatRequest
		_ = json.Unmarshal(b, &req)
		fake.Serve(r.Context(), w, req)
	}))
	defer upstream.Close()
	rec := &recorder{}
	srv := gatewayServer(t, &gateway.OpenRouter{URL: upstream.URL + "/api/v1", Key: "sk-or-secret"}, rec)
	resp, err := ask(t, newClient(srv, "sb-token"), "vendor/model", openai.ChatMessage{Role: "user", Content: "ping"})
	if err != nil || resp.Text != "echo: ping" {
		t.Fatalf("%+v %v", resp, err)
	}
	mu.Lock()
	first := bodies[0]
	for _, h := range seen {
		for k, vs := range h {
			for _, v := range vs {
				if strings.Contains(v, "sb-token") {
					t.Fatalf("sandbox token went upstream in %s", k)
				}
			}
		}
	}
	mu.Unlock()
	if strings.Contains(first, "sb-token") {
		t.Fatal("sandbox token in the upstream body")
	}
	if calls := rec.waitCalls(1); len(calls) != 1 || calls[0] != "u1 vendor/model" {
		t.Fatalf("usage %v", calls)
	}
	// Nothing the sandbox can receive carries the key: not the answer, not an error.
	for _, model := range []string{"vendor/model", "not a model"} {
		req, _ := http.NewRequest("POST", srv.URL+gatewayapi.Prefix+gatewayapi.ChatPath, strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"x"}],"stream":true}`))
		req.Header.Set("Authorization", "Bearer sb-token")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if strings.Contains(string(b), "sk-or-secret") || strings.Contains(r.Header.Get("Authorization"), "sk-") {
			t.Fatalf("the key reached the sandbox: %s", b)
		}
	}
}

func TestFlakyRuleFailsThenAnswers(t *testing.T) {
	srv := gatewayServer(t, scripted.NewModel([]string{"fake/echo"}), &recorder{})
	c := newClient(srv, "sb-token")
	msg := openai.ChatMessage{Role: "user", Content: "[2026-11-29 15:00 UTC] flaky 2: hello"}
	for i := range 2 {
		if _, err := ask(t, c, "fake/echo", msg); status(err) != 503 {
			t.Fatalf("call %d: %v, want 503 (which the agent retries)", i+1, err)
		}
	}
	if resp, err := ask(t, c, "fake/echo", msg); err != nil || resp.Text != "echo: flaky 2: hello" {
		t.Fatalf("third call: %+v %v", resp, err)
	}
}

// The gateway forwards only the request it decoded and validated, re-encoded;
// a body that could mean two things to two parsers is refused before anything
// goes upstream, with the OpenAI error envelope SDKs show.
func TestGatewayForwardsOnlyWhatItValidated(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	fake := scripted.NewModel([]string{"vendor/model"})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		var req openai.ChatRequest
		_ = json.Unmarshal(b, &req)
		fake.Serve(r.Context(), w, req)
	}))
	defer upstream.Close()
	srv := gatewayServer(t, &gateway.OpenRouter{URL: upstream.URL, Key: "k", Allow: []string{"vendor/model"}}, &recorder{})
	post := func(body string) (int, openai.ErrorEnvelope) {
		req, _ := http.NewRequest("POST", srv.URL+gatewayapi.Prefix+gatewayapi.ChatPath, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sb-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var env openai.ErrorEnvelope
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &env)
		return resp.StatusCode, env
	}
	msgs := `"messages":[{"role":"user","content":"x"}]`
	for _, tc := range []struct{ name, body string }{
		{"case-variant model key", `{"model":"not-served","MODEL":"vendor/model",` + msgs + `}`},
		{"duplicate model key", `{"model":"not-served","model":"vendor/model",` + msgs + `}`},
		{"case-variant key in a message", `{"model":"vendor/model","messages":[{"role":"user","Role":"system","content":"x"}]}`},
		{"unknown field", `{"model":"vendor/model",` + msgs + `,"x_smuggled":{"a":1}}`},
		{"trailing data", `{"model":"vendor/model",` + msgs + `} {"model":"other"}`},
		{"model not served", `{"model":"not-served",` + msgs + `}`},
	} {
		code, env := post(tc.body)
		if code != 400 || env.Error.Message == "" || env.Error.Type != "invalid_request_error" {
			t.Errorf("%s: %d %+v, want 400 with an OpenAI error message", tc.name, code, env)
		}
	}
	mu.Lock()
	if len(bodies) != 0 {
		t.Fatalf("refused requests reached the provider: %q", bodies)
	}
	mu.Unlock()
	// A valid request goes upstream as its re-encoding: the known fields only.
	if code, env := post(`{"model":"vendor/model",` + msgs + `,"temperature":0.5}`); code != 200 {
		t.Fatalf("valid request: %d %+v", code, env)
	}
	mu.Lock()
	defer mu.Unlock()
	var keys map[string]json.RawMessage
	if len(bodies) != 1 || json.Unmarshal([]byte(bodies[0]), &keys) != nil {
		t.Fatalf("upstream bodies %q", bodies)
	}
	if len(keys) != 3 || string(keys["model"]) != `"vendor/model"` || string(keys["temperature"]) != "0.5" {
		t.Fatalf("upstream body %s", bodies[0])
	}
}

// The official OpenAI Go SDK works against the gateway: the model list,
// plain, streamed and tool-calling completions, and a refused model shows
// its message (the OpenAI error envelope).
func TestOpenAISDKAgainstTheGateway(t *testing.T) {
	srv := gatewayServer(t, scripted.NewModel([]string{"fake/echo"}), &recorder{})
	c := oai.NewClient(option.WithBaseURL(srv.URL+gatewayapi.Prefix+"/"), option.WithAPIKey("sb-token"), option.WithMaxRetries(0),
		option.WithHeader("X-Affido-Source-Ip", "10.213.0.2"))
	ctx := context.Background()
	page, err := c.Models.List(ctx)
	if err != nil || len(page.Data) != 1 || page.Data[0].ID != "fake/echo" {
		t.Fatalf("models: %+v %v", page, err)
	}
	plain, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "fake/echo",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hello sdk")}})
	if err != nil || len(plain.Choices) != 1 || plain.Choices[0].Message.Content != "echo: hello sdk" {
		t.Fatalf("plain: %+v %v", plain, err)
	}
	stream := c.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{Model: "fake/echo",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("streamed")}})
	var acc oai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil || len(acc.Choices) != 1 || acc.Choices[0].Message.Content != "echo: streamed" {
		t.Fatalf("streamed: %+v %v", acc.Choices, err)
	}
	tool, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "fake/echo",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("read notes.txt")},
		Tools: []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "read_file", Parameters: shared.FunctionParameters{"type": "object"}})}})
	if err != nil || len(tool.Choices) != 1 || len(tool.Choices[0].Message.ToolCalls) != 1 || tool.Choices[0].Message.ToolCalls[0].Function.Name != "read_file" {
		t.Fatalf("tool call: %+v %v", tool, err)
	}
	_, err = c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "not-served",
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("x")}})
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || !strings.Contains(apiErr.Message, "not served") {
		t.Fatalf("refused model: %v", err)
	}
}

// blockingProvider holds every call until release is closed.
type blockingProvider struct {
	gateway.Provider
	release chan struct{}
}

func (p blockingProvider) Serve(ctx context.Context, w http.ResponseWriter, req openai.ChatRequest) (openai.ChatUsage, error) {
	<-p.release
	return p.Provider.Serve(ctx, w, req)
}

// 20 concurrent calls against a daily limit that fits the worst case of 3:
// 3 are served, 17 refused with 402 spend_limit before reaching the
// provider; the owner is told. A model without a price is refused.
func TestSpendLimitHoldsUnderConcurrency(t *testing.T) {
	fake := scripted.NewModel([]string{"fake/echo", "fake/unpriced"})
	bp := blockingProvider{fake, make(chan struct{})}
	ledger := &spend.Memory{}
	var limited atomic.Int32
	price := spend.Price{Input: 1, Output: 2}
	maxTokens := int64(1000)
	req := openai.ChatRequest{Model: "fake/echo", Messages: []openai.ChatMessage{{Role: "user", Content: "hello"}}, MaxTokens: &maxTokens}
	in, out := spend.Estimate(req)
	worst := spend.Cost(price, in, out)
	mux := http.NewServeMux()
	(&gateway.Handler{Caller: caller, Provider: bp, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Prices: map[string]spend.Price{"fake/echo": price}, Ledger: ledger,
		Limits:  spend.Limits{Daily: 3*worst + worst/2, Monthly: 1 << 40},
		OnLimit: func(string) { limited.Add(1) }}).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	body, _ := json.Marshal(req)
	post := func(b []byte) (int, openai.ErrorEnvelope) {
		hr, _ := http.NewRequest("POST", srv.URL+gatewayapi.Prefix+gatewayapi.ChatPath, bytes.NewReader(b))
		hr.Header.Set("Authorization", "Bearer sb-token")
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Error(err)
			return 0, openai.ErrorEnvelope{}
		}
		defer resp.Body.Close()
		var env openai.ErrorEnvelope
		raw, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(raw, &env)
		return resp.StatusCode, env
	}
	codes := make(chan int, 20)
	for range 20 {
		go func() {
			code, env := post(body)
			if code == 402 && env.Error.Code != openai.CodeSpendLimit {
				t.Errorf("402 without the spend_limit code: %+v", env)
			}
			codes <- code
		}()
	}
	refused := 0
	for range 17 { // the refusals come back while the 3 reserved calls are held
		if c := <-codes; c == 402 {
			refused++
		} else {
			t.Fatalf("status %d while 3 calls hold the budget", c)
		}
	}
	close(bp.release)
	served := 0
	for range 3 {
		if c := <-codes; c == 200 {
			served++
		}
	}
	if served != 3 || refused != 17 || limited.Load() != 17 {
		t.Fatalf("served %d, refused %d, owner told %d times; want 3, 17, 17", served, refused, limited.Load())
	}
	if spent := ledger.Spent("u1"); spent > 3*worst {
		t.Fatalf("charged %d, more than the 3 calls' worst case %d", spent, 3*worst)
	}
	unpriced, _ := json.Marshal(openai.ChatRequest{Model: "fake/unpriced", Messages: req.Messages})
	if code, env := post(unpriced); code != 400 || env.Error.Code != "unpriced_model" {
		t.Fatalf("unpriced model: %d %+v", code, env)
	}
}

// flakyLedger's Settle fails its first fails calls, as while Postgres
// restarts; order records the writes as they land.
type flakyLedger struct {
	spend.Memory
	mu    sync.Mutex
	fails int
	order *[]string
}

func (l *flakyLedger) Settle(ctx context.Context, id, micros int64) error {
	l.mu.Lock()
	if l.fails > 0 {
		l.fails--
		l.mu.Unlock()
		return errors.New("postgres is restarting")
	}
	*l.order = append(*l.order, "settled")
	l.mu.Unlock()
	return l.Memory.Settle(ctx, id, micros)
}

type orderedUsage struct {
	mu    *sync.Mutex
	order *[]string
}

func (u orderedUsage) RecordUsage(context.Context, string, string, int64, int64) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	*u.order = append(*u.order, "counted")
	return nil
}

// A settle that fails (Postgres restarting) is tried again, and the call's
// usage is counted only after it: the ledger and the count do not part.
// Tried: the first two settles fail. (Before, the settle was given up and
// the count written, so the soak found a call counted whose reservation
// stayed open.)
func TestSpendIsSettledBeforeUsageIsCountedAcrossARestart(t *testing.T) {
	var order []string
	ledger := &flakyLedger{fails: 2, order: &order}
	mux := http.NewServeMux()
	(&gateway.Handler{Caller: caller, Provider: scripted.NewModel([]string{"fake/echo"}), Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Prices: map[string]spend.Price{"fake/echo": {Input: 1, Output: 2}}, Ledger: ledger,
		Limits: spend.Limits{Daily: 1 << 40, Monthly: 1 << 40}, Usage: orderedUsage{&ledger.mu, &order}}).Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	if _, err := ask(t, newClient(srv, "sb-token"), "fake/echo", openai.ChatMessage{Role: "user", Content: "hello"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ledger.mu.Lock()
		got := append([]string(nil), order...)
		ledger.mu.Unlock()
		if len(got) == 2 {
			if got[0] != "settled" || got[1] != "counted" {
				t.Fatalf("writes in the order %v, want settled, then counted", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the writes are %v, want settled, then counted", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if spent := ledger.Spent("u1"); spent <= 0 {
		t.Fatalf("spent %d after the settle", spent)
	}
}
