// Package modelclient is the agent's OpenAI-compatible chat completions
// client. It talks only to the gateway, with the sandbox's token, and
// streams: text deltas, tool calls and usage arrive as server-sent events.
package modelclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/openai"
	"github.com/affido/affido/internal/problem"
)

// Client calls the gateway.
type Client struct {
	BaseURL string // e.g. http://gateway:8088/v1/gateway
	// Token returns the sandbox's gateway token at each call: the manager
	// binds the sandbox, and rotates its token, while the agent runs.
	Token func() string
	HTTP  *http.Client

	mu     sync.Mutex
	models []string
	listed time.Time
}

var _ durable.Model = (*Client)(nil)

// New returns a client for the gateway at baseURL.
func New(baseURL string, token func() string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{Timeout: 10 * time.Minute}}
}

// Stream sends req and reads the streamed answer.
func (c *Client) Stream(ctx context.Context, req durable.ModelRequest, onDelta func(string)) (durable.ModelResponse, error) {
	body := openai.ChatRequest{Model: req.Model, Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true}}
	for _, m := range req.Messages {
		wm := openai.ChatMessage{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
		for i, tc := range m.ToolCalls {
			w := openai.ChatToolCall{Index: i, ID: tc.ID, Type: "function"}
			w.Function.Name, w.Function.Arguments = tc.Name, string(tc.Arguments)
			wm.ToolCalls = append(wm.ToolCalls, w)
		}
		body.Messages = append(body.Messages, wm)
	}
	for _, t := range req.Tools {
		tool := openai.ChatTool{Type: "function"}
		tool.Function.Name, tool.Function.Description, tool.Function.Parameters = t.Name, t.Description, t.Parameters
		if len(tool.Function.Parameters) == 0 {
			tool.Function.Parameters = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		body.Tools = append(body.Tools, tool)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return durable.ModelResponse{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.BaseURL+gatewayapi.ChatPath, bytes.NewReader(b))
	if err != nil {
		return durable.ModelResponse{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+c.Token())
	resp, err := c.HTTP.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return durable.ModelResponse{}, ctx.Err()
		}
		return durable.ModelResponse{}, durable.Transient(fmt.Errorf("reach the model gateway: %w", err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var env openai.ErrorEnvelope
		_ = json.Unmarshal(msg, &env)
		err := fmt.Errorf("model gateway: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
		switch {
		case env.Error.Code == openai.CodeSpendLimit:
			// Waiting does not help: the run stops with this reason.
			return durable.ModelResponse{}, &durable.StopError{Reason: openai.CodeSpendLimit, Err: errors.New(env.Error.Message)}
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
			return durable.ModelResponse{}, durable.Transient(err)
		}
		return durable.ModelResponse{}, err
	}
	return read(resp.Body, req.Model, onDelta)
}

// read parses an SSE stream of chat completion chunks.
func read(r io.Reader, model string, onDelta func(string)) (durable.ModelResponse, error) {
	out := durable.ModelResponse{Model: model}
	var text strings.Builder
	calls := map[int]*openai.ChatToolCall{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	done := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			done = true
			break
		}
		var c openai.ChatChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return out, fmt.Errorf("model gateway: bad stream chunk: %w", err)
		}
		if c.Error != nil {
			return out, durable.Transient(fmt.Errorf("model provider: %s", c.Error.Message))
		}
		if c.Model != "" {
			out.Model = c.Model
		}
		if c.Usage != nil {
			out.Usage = durable.TokenUsage{InputTokens: c.Usage.PromptTokens, OutputTokens: c.Usage.CompletionTokens}
		}
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				text.WriteString(ch.Delta.Content)
				if onDelta != nil {
					onDelta(ch.Delta.Content)
				}
			}
			for _, tc := range ch.Delta.ToolCalls {
				cur := calls[tc.Index]
				if cur == nil {
					cur = &openai.ChatToolCall{Index: tc.Index}
					calls[tc.Index] = cur
				}
				if tc.ID != "" {
					cur.ID = tc.ID
				}
				if tc.Function.Name != "" {
					cur.Function.Name += tc.Function.Name
				}
				cur.Function.Arguments += tc.Function.Arguments
			}
			if ch.FinishReason != nil {
				out.StopReason = *ch.FinishReason
			}
		}
	}
	if err := sc.Err(); err != nil {
		return out, durable.Transient(fmt.Errorf("model stream broke: %w", err))
	}
	if !done && out.StopReason == "" {
		return out, durable.Transient(errors.New("model stream ended early"))
	}
	out.Text = text.String()
	idx := make([]int, 0, len(calls))
	for i := range calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		tc := calls[i]
		args := json.RawMessage(tc.Function.Arguments)
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		out.ToolCalls = append(out.ToolCalls, durable.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: args})
	}
	return out, nil
}

// Models returns the gateway's model list, cached for a minute.
func (c *Client) Models(ctx context.Context) ([]string, error) {
	c.mu.Lock()
	if time.Since(c.listed) < time.Minute && c.models != nil {
		m := c.models
		c.mu.Unlock()
		return m, nil
	}
	c.mu.Unlock()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+gatewayapi.ModelsPath, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token())
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list models: %s", resp.Status)
	}
	var body openai.ModelList
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	models := []string{}
	for _, d := range body.Data {
		models = append(models, d.ID)
	}
	c.mu.Lock()
	c.models, c.listed = models, time.Now()
	c.mu.Unlock()
	return models, nil
}

// ReportWake tells the manager the agent's next due time (zero: nothing
// waits on time), so it can wake the sandbox even if the agent does not
// answer when it is paused.
func (c *Client) ReportWake(ctx context.Context, at time.Time) error {
	var v *time.Time
	if !at.IsZero() {
		v = &at
	}
	return c.post(ctx, gatewayapi.WakeAtPath, "report wake", gatewayapi.WakeAt{At: v})
}

// Notify hands a notification to the manager through the gateway. Its key
// makes repeated hand-offs of the same notification one delivery.
func (c *Client) Notify(ctx context.Context, n gatewayapi.Notification) error {
	return c.post(ctx, gatewayapi.NotifyPath, "notify", n)
}

// Fetch asks the gateway to fetch a URL (fetch_url): the manager fetches
// it through its guarded client; the sandbox has no egress of its own.
func (c *Client) Fetch(ctx context.Context, url string) (gatewayapi.Page, error) {
	var p gatewayapi.Page
	err := c.call(ctx, gatewayapi.FetchPath, "fetch", gatewayapi.FetchRequest{URL: url}, &p)
	return p, err
}

// Browse runs one action of the user's browser (the browser tools): the
// manager holds the browser sandbox and drives it.
func (c *Client) Browse(ctx context.Context, req gatewayapi.BrowserRequest) (gatewayapi.BrowserPage, error) {
	var p gatewayapi.BrowserPage
	err := c.call(ctx, gatewayapi.BrowserPath, "browser "+req.Action, req, &p)
	return p, err
}

// Search asks the gateway's search provider (web_search).
func (c *Client) Search(ctx context.Context, query string, count int) (gatewayapi.SearchResults, error) {
	var r gatewayapi.SearchResults
	err := c.call(ctx, gatewayapi.SearchPath, "search", gatewayapi.SearchRequest{Query: query, Count: count}, &r)
	return r, err
}

// ConnectorTools lists the tools of the owner's connectors agent may call
// (the manager holds the connectors; off tools are not listed).
func (c *Client) ConnectorTools(ctx context.Context, agent string) ([]gatewayapi.ConnectorTool, error) {
	var r gatewayapi.ConnectorTools
	err := c.send(ctx, http.MethodGet, gatewayapi.ConnectorsPath+"?agent="+url.QueryEscape(agent), "connector tools", nil, &r)
	return r.Tools, err
}

// CallConnector asks the manager to call a connector's tool; it checks the
// mode and the tool's pinned definition again, and answers the server's
// text (outside text) or a *GatewayError the model can read.
func (c *Client) CallConnector(ctx context.Context, req gatewayapi.ConnectorCallRequest) (gatewayapi.ConnectorResult, error) {
	var r gatewayapi.ConnectorResult
	err := c.call(ctx, gatewayapi.ConnectorCall, "connector call", req, &r)
	return r, err
}

// GatewayError is a gateway route's refusal: its status and problem.
type GatewayError struct {
	Op     string
	Status int
	problem.Problem
}

func (e *GatewayError) Error() string {
	return fmt.Sprintf("%s: %d %s: %s", e.Op, e.Status, e.Title, e.Detail)
}

// post sends body as JSON to a gateway path with the sandbox token; op
// names the call in errors.
func (c *Client) post(ctx context.Context, path, op string, body any) error {
	return c.call(ctx, path, op, body, nil)
}

// call posts body and decodes a 2xx answer into out (if not nil); any
// other answer is a *GatewayError.
func (c *Client) call(ctx context.Context, path, op string, body, out any) error {
	return c.send(ctx, http.MethodPost, path, op, body, out)
}

// send is call with any method; a nil body sends none.
func (c *Client) send(ctx context.Context, method, path, op string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.Token())
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		ge := &GatewayError{Op: op, Status: resp.StatusCode}
		if json.Unmarshal(msg, &ge.Problem) != nil || ge.Title == "" {
			ge.Title, ge.Detail = resp.Status, strings.TrimSpace(string(msg))
		}
		return ge
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(out); err != nil {
		return fmt.Errorf("%s: decode the answer: %w", op, err)
	}
	return nil
}
