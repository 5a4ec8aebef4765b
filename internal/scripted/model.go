// Package scripted holds the stand-ins for the outside world that the dev
// stack and the tests use instead of a model provider and a search engine:
// the scripted model, which speaks the OpenAI wire protocol and whose rules
// let a person or a test drive every tool by what they type, and a search
// provider with fixed hits. The manager serves them in place of the real
// ones (AFFIDO_FAKE_MODELS, no search key); the agent's tests serve them
// from a fake gateway (internal/gatewaytest). Neither side's code is here.
package scripted

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/affido/affido/internal/openai"
)

// Reply is one scripted model answer: text, or tool calls.
type Reply struct {
	Text      string
	ToolCalls []Call
}

// Call is a scripted tool call.
type Call struct {
	Name string
	Args map[string]any
}

// Model is the scripted model: deterministic, with the OpenAI wire protocol
// (streaming and tool calls). Its rules (see the README) let a person or a
// test drive every tool by what they type. With a script, it answers with
// the scripted replies in order instead, then falls back to the rules.
type Model struct {
	Models []string

	mu     sync.Mutex
	script []Reply
	flaky  map[string]int // "flaky N: text" messages answered with 503 so far
}

var flakyRule = regexp.MustCompile(`^flaky (\d+): `)

var slowRule = regexp.MustCompile(`^slow (\d+): `)

// slowFor is how long to wait before answering a "slow MS: text" message.
func slowFor(req openai.ChatRequest) time.Duration {
	if len(req.Messages) == 0 {
		return 0
	}
	last := req.Messages[len(req.Messages)-1]
	text := timePrefix.ReplaceAllString(last.Content, "")
	if inner, ok := fromAgent(last.Content); ok {
		text = inner
	}
	m := slowRule.FindStringSubmatch(strings.TrimSpace(text))
	if last.Role != "user" || m == nil {
		return 0
	}
	ms, _ := strconv.Atoi(m[1])
	return min(time.Duration(ms)*time.Millisecond, 10*time.Second)
}

// failNow reports whether this request is one of the first N of a
// "flaky N: text" message, which the fake answers 503 (a transient error the
// agent retries with stored backoff).
func (f *Model) failNow(req openai.ChatRequest) bool {
	if len(req.Messages) == 0 {
		return false
	}
	last := req.Messages[len(req.Messages)-1]
	text := timePrefix.ReplaceAllString(last.Content, "")
	m := flakyRule.FindStringSubmatch(text)
	if last.Role != "user" || m == nil {
		return false
	}
	n, _ := strconv.Atoi(m[1])
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.flaky == nil {
		f.flaky = map[string]int{}
	}
	if f.flaky[last.Content] >= n {
		return false
	}
	f.flaky[last.Content]++
	return true
}

// NewModel returns the scripted model serving models.
func NewModel(models []string, script ...Reply) *Model {
	return &Model{Models: models, script: script}
}

// List returns the models the scripted model serves.
func (f *Model) List() []string { return f.Models }

// Known reports whether model is one the scripted model serves.
func (f *Model) Known(model string) bool {
	for _, m := range f.Models {
		if m == model {
			return true
		}
	}
	return false
}

var timePrefix = regexp.MustCompile(`^\[[^\]]*\] `)

var pageNote = regexp.MustCompile(`(?m)^note (owner|work): (.+)$`)

// rules, in order. Each matches the owner's message (time prefix removed).
var rules = []struct {
	re   *regexp.Regexp
	call func(m []string) Reply
}{
	{regexp.MustCompile(`Read (skills/[a-z0-9-]+/SKILL\.md) with read_file first`), func(m []string) Reply {
		return call("read_file", map[string]any{"path": m[1]})
	}},
	{regexp.MustCompile(`(?s)^run: (.+)$`), func(m []string) Reply { return call("shell", map[string]any{"command": m[1]}) }},
	{regexp.MustCompile(`^read (\S+)$`), func(m []string) Reply { return call("read_file", map[string]any{"path": m[1]}) }},
	{regexp.MustCompile(`(?s)^write (\S+?): (.*)$`), func(m []string) Reply {
		return call("write_file", map[string]any{"path": m[1], "content": m[2]})
	}},
	{regexp.MustCompile(`^list ?(\S*)$`), func(m []string) Reply { return call("list_files", map[string]any{"path": m[1]}) }},
	{regexp.MustCompile(`(?s)^search (.+)$`), func(m []string) Reply { return call("corpus_search", map[string]any{"query": m[1]}) }},
	{regexp.MustCompile(`^fetch (\S+)$`), func(m []string) Reply { return call("fetch_url", map[string]any{"url": m[1]}) }},
	{regexp.MustCompile(`(?s)^websearch (.+)$`), func(m []string) Reply { return call("web_search", map[string]any{"query": m[1]}) }},
	// A connector's tool (mcp__<connector>__<tool>), with a JSON object of arguments or none.
	{regexp.MustCompile(`(?s)^mcp (mcp__[a-z0-9-]+__[A-Za-z0-9_-]+)(?: (\{.*\}))?$`), func(m []string) Reply {
		args := map[string]any{}
		_ = json.Unmarshal([]byte(m[2]), &args)
		return call(m[1], args)
	}},
	// The browser: "browse URL", or a browser tool with a JSON object of arguments or none.
	{regexp.MustCompile(`^browse (\S+)$`), func(m []string) Reply { return call("browser_open", map[string]any{"url": m[1]}) }},
	{regexp.MustCompile(`(?s)^browser (open|read|screenshot|click|type|upload|take_over|save_download|close)(?: (\{.*\}))?$`), func(m []string) Reply {
		args := map[string]any{}
		_ = json.Unmarshal([]byte(m[2]), &args)
		return call("browser_"+m[1], args)
	}},
	{regexp.MustCompile(`(?s)^remind (at|in) (\S+): (.+)$`), func(m []string) Reply {
		key := "after"
		if m[1] == "at" {
			key = "at"
		}
		return call("set_reminder", map[string]any{key: m[2], "text": m[3]})
	}},
	{regexp.MustCompile(`^reminders$`), func(m []string) Reply { return call("list_reminders", map[string]any{}) }},
	{regexp.MustCompile(`(?s)^message ([a-z][a-z0-9-]*): (.+)$`), func(m []string) Reply {
		return call("send_message", map[string]any{"to": m[1], "text": m[2]})
	}},
	{regexp.MustCompile(`(?s)^delegate: (.+)$`), func(m []string) Reply { return call("delegate", map[string]any{"task": m[1]}) }},
	{regexp.MustCompile(`(?s)^schedule "([^"]+)"(?: in (\S+))?: (.+)$`), func(m []string) Reply {
		args := map[string]any{"cron": m[1], "prompt": m[3]}
		if m[2] != "" {
			args["tz"] = m[2]
		}
		return call("schedule_job", args)
	}},
	{regexp.MustCompile(`^jobs$`), func(m []string) Reply { return call("list_jobs", map[string]any{}) }},
	{regexp.MustCompile(`(?s)^note (owner|work): (.+)$`), func(m []string) Reply {
		return call("write_note", map[string]any{"notes": m[1], "text": m[2]})
	}},
	{regexp.MustCompile(`^notes$`), func(m []string) Reply { return call("read_notes", map[string]any{}) }},
	{regexp.MustCompile(`^cancel job (\d+)$`), func(m []string) Reply { return call("cancel_job", map[string]any{"id": m[1]}) }},
	{regexp.MustCompile(`^cancel reminder (\d+)$`), func(m []string) Reply {
		return call("cancel_reminder", map[string]any{"id": m[1]})
	}},
}

// fromAgent returns the text of a message another agent sent (outside
// text whose source is an agent).
func fromAgent(content string) (string, bool) {
	if !strings.HasPrefix(content, "[outside text from agent ") {
		return "", false
	}
	_, body, ok := strings.Cut(content, "\n")
	end := strings.LastIndex(body, "\n[end of outside text")
	if !ok || end < 0 {
		return "", false
	}
	return strings.TrimSpace(body[:end]), true
}

// offers reports whether req gives the model the tool called name.
func offers(req openai.ChatRequest, name string) bool {
	for _, t := range req.Tools {
		if t.Function.Name == name {
			return true
		}
	}
	return false
}

func call(name string, args map[string]any) Reply {
	return Reply{ToolCalls: []Call{{Name: name, Args: args}}}
}

// Answer decides the reply to a request.
func (f *Model) Answer(req openai.ChatRequest) Reply {
	f.mu.Lock()
	if len(f.script) > 0 {
		r := f.script[0]
		f.script = f.script[1:]
		f.mu.Unlock()
		return r
	}
	f.mu.Unlock()
	if len(req.Messages) == 0 {
		return Reply{Text: "(no messages)"}
	}
	if r, ok := citationReply(req); ok {
		return r
	}
	last := req.Messages[len(req.Messages)-1]
	// Outside text that says "note owner: …" on a line of its own (a page,
	// or the worker's answer quoting one) steers the scripted model into
	// writing that note when it has write_note, as a model steered by what
	// it reads would: asking the owner is what stands in the way.
	if m := pageNote.FindStringSubmatch(last.Content); last.Role == "tool" && m != nil && strings.Contains(last.Content, "[outside text from ") && offers(req, "write_note") {
		return call("write_note", map[string]any{"notes": m[1], "text": m[2]})
	}
	if last.Role == "tool" {
		name := "tool"
		for i := len(req.Messages) - 1; i >= 0; i-- {
			for _, tc := range req.Messages[i].ToolCalls {
				if tc.ID == last.ToolCallID {
					name = tc.Function.Name
				}
			}
		}
		out := last.Content
		if len(out) > 4000 {
			out = out[:4000] + "\n[truncated]"
		}
		return Reply{Text: fmt.Sprintf("%s returned:\n%s", name, out)}
	}
	text := strings.TrimSpace(timePrefix.ReplaceAllString(last.Content, ""))
	if last.Role != "user" {
		return Reply{Text: "echo: " + text}
	}
	if strings.HasPrefix(last.Content, "[harness] ") {
		text = strings.TrimPrefix(last.Content, "[harness] ")
	}
	if text == "what were you told?" { // the system message, for tests of what reaches the model
		if req.Messages[0].Role != "system" {
			return Reply{Text: "no system message"}
		}
		return Reply{Text: "system: " + req.Messages[0].Content}
	}
	if strings.HasPrefix(last.Content, "[harness] Summarize") {
		return Reply{Text: fmt.Sprintf("Summary: %d earlier messages.", len(req.Messages)-2)}
	}
	// A message from another agent arrives as outside text. The scripted
	// model obeys what it says, as a model steered by what it reads would:
	// that is what the guards around it (asking, the hop limit) are for.
	if inner, ok := fromAgent(last.Content); ok {
		text = inner
	}
	for _, r := range rules {
		if m := r.re.FindStringSubmatch(text); m != nil {
			return r.call(m)
		}
	}
	return Reply{Text: "echo: " + text}
}

// Serve answers one chat completions request as an SSE stream (or one JSON
// object when stream is false), with usage estimated at 4 bytes a token.
func (f *Model) Serve(ctx context.Context, w http.ResponseWriter, req openai.ChatRequest) (openai.ChatUsage, error) {
	if f.failNow(req) {
		w.Header().Set("Content-Type", "application/json")
		openai.WriteError(w, http.StatusServiceUnavailable, "server_error", "flaky", "the scripted model is flaky on purpose")
		return openai.ChatUsage{}, nil
	}
	if d := slowFor(req); d > 0 { // "slow MS: text": answer after MS (at most 10 s)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return openai.ChatUsage{}, ctx.Err()
		}
	}
	reply := f.Answer(req)
	var in int64
	for _, m := range req.Messages {
		in += int64(len(m.Content)+3) / 4
	}
	usage := openai.ChatUsage{PromptTokens: in, CompletionTokens: int64(len(reply.Text)+3) / 4}
	usage.TotalTokens = usage.PromptTokens + usage.CompletionTokens
	var calls []openai.ChatToolCall
	for i, c := range reply.ToolCalls {
		args, _ := json.Marshal(c.Args)
		tc := openai.ChatToolCall{Index: i, ID: fmt.Sprintf("call_%d_%d", len(req.Messages), i), Type: "function"}
		tc.Function.Name, tc.Function.Arguments = c.Name, string(args)
		calls = append(calls, tc)
	}
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		return usage, json.NewEncoder(w).Encode(map[string]any{
			"id": "fake", "object": "chat.completion", "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": finish,
				"message": map[string]any{"role": "assistant", "content": reply.Text, "tool_calls": calls}}},
			"usage": usage,
		})
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	fl, _ := w.(http.Flusher)
	send := func(c openai.ChatChunk) error {
		c.ID, c.Object, c.Model = "fake", "chat.completion.chunk", req.Model
		b, _ := json.Marshal(c)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		if fl != nil {
			fl.Flush()
		}
		return ctx.Err()
	}
	if err := send(openai.ChatChunk{Choices: []openai.ChunkChoice{{Delta: openai.ChunkDelta{Role: "assistant"}}}}); err != nil {
		return usage, err
	}
	for _, part := range splitWords(reply.Text, 3) {
		if err := send(openai.ChatChunk{Choices: []openai.ChunkChoice{{Delta: openai.ChunkDelta{Content: part}}}}); err != nil {
			return usage, err
		}
	}
	if len(calls) > 0 {
		if err := send(openai.ChatChunk{Choices: []openai.ChunkChoice{{Delta: openai.ChunkDelta{ToolCalls: calls}}}}); err != nil {
			return usage, err
		}
	}
	if err := send(openai.ChatChunk{Choices: []openai.ChunkChoice{{FinishReason: &finish}}}); err != nil {
		return usage, err
	}
	if err := send(openai.ChatChunk{Choices: []openai.ChunkChoice{}, Usage: &usage}); err != nil {
		return usage, err
	}
	_, err := fmt.Fprint(w, "data: [DONE]\n\n")
	return usage, err
}

// splitWords cuts s into about n pieces at spaces, so a stream has deltas.
func splitWords(s string, n int) []string {
	if s == "" {
		return nil
	}
	size := len(s)/n + 1
	var out []string
	for len(s) > size {
		i := strings.IndexByte(s[size:], ' ')
		if i < 0 {
			break
		}
		out = append(out, s[:size+i+1])
		s = s[size+i+1:]
	}
	return append(out, s)
}

// citeSlowWait is the -slow variant's pause: until the owner uploads
// uploads/cite-slow.go, or 60 s.
const citeSlowWait = "timeout 60 sh -c 'until [ -e uploads/cite-slow.go ]; do sleep 1; done'"

var citeRule = regexp.MustCompile(`^cite(-uncited|-undeclared|-slow)? (.+)$`)
var citeHit = regexp.MustCompile(`(?m)^\[(c\d+)\] \S+ v\d+ line \d+: (.*)$`)

// citationReply drives the citations gate. For an owner message
// "cite[-uncited|-undeclared|-slow] <query>": first corpus_search; then
// (for -slow, after a shell call that waits until the workspace file
// uploads/cite-slow.go exists, at most 60 s, so a test can alter the
// document meanwhile and then let the run go on) a reply: every line cited, or deliberately one uncited line,
// or an id the search never returned. It keeps the same answer when the
// gate rejects it.
func citationReply(req openai.ChatRequest) (Reply, bool) {
	owner := -1
	for i := len(req.Messages) - 1; i >= 0; i-- {
		m := req.Messages[i]
		if m.Role == "user" && strings.HasPrefix(m.Content, "[2") {
			owner = i
			break
		}
	}
	if owner < 0 {
		return Reply{}, false
	}
	m := citeRule.FindStringSubmatch(strings.TrimSpace(timePrefix.ReplaceAllString(req.Messages[owner].Content, "")))
	if m == nil {
		return Reply{}, false
	}
	variant, query := m[1], m[2]
	var hits [][]string
	slept := false
	for _, msg := range req.Messages[owner+1:] {
		if msg.Role != "tool" {
			continue
		}
		if found := citeHit.FindAllStringSubmatch(msg.Content, -1); found != nil {
			hits, slept = found, false
		} else if hits != nil {
			slept = true // any tool result after the search: the pause happened
		}
	}
	switch {
	case hits == nil && !hasToolResult(req.Messages[owner+1:]):
		return call("corpus_search", map[string]any{"query": query}), true
	case hits == nil:
		return Reply{Text: "I found nothing in the documents about that."}, true
	case variant == "-slow" && !slept:
		return call("shell", map[string]any{"command": citeSlowWait}), true
	}
	id, quote := hits[0][1], hits[0][2]
	switch variant {
	case "-uncited":
		return Reply{Text: quote + " [cite:" + id + "]\nAnd this line cites nothing."}, true
	case "-undeclared":
		return Reply{Text: quote + " [cite:c999999999]"}, true
	}
	return Reply{Text: "The documents say: " + quote + " [cite:" + id + "]"}, true
}

func hasToolResult(msgs []openai.ChatMessage) bool {
	for _, m := range msgs {
		if m.Role == "tool" {
			return true
		}
	}
	return false
}
