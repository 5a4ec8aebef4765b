package connectors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/affido/affido/manager/outbound"
)

// checkURL accepts an absolute http or https URL with a host, no
// credentials and no fragment.
func checkURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, errors.New("url is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("url must be http or https")
	case u.Hostname() == "":
		return nil, errors.New("url has no host")
	case u.User != nil:
		return nil, errors.New("url cannot hold credentials (use header_name and secret)")
	case u.Fragment != "":
		return nil, errors.New("url cannot have a fragment")
	}
	return u, nil
}

// session is one connection to a connector's server, for one operation.
type session struct {
	cs   *mcp.ClientSession
	over *atomic.Bool // an answer passed the cap on the wire
}

// dial connects to c's server with base (the guarded outbound client):
// the secret header goes only to c's own origin, and every answer's body
// is cut off with an error past maxWire bytes, so a server sending
// megabytes costs at most that much memory; stop is called then, to end
// the operation at once (the SDK would otherwise try to resume the stream).
func dial(ctx context.Context, base *http.Client, c Connector, maxWire int64, stop func()) (*session, error) {
	u, err := checkURL(c.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	over := &atomic.Bool{}
	tr := base.Transport
	if tr == nil {
		tr = http.DefaultTransport
	}
	hc := &http.Client{
		Transport:     &boundedTransport{base: tr, origin: u.Scheme + "://" + u.Host, header: c.HeaderName, secret: c.Secret, max: maxWire, over: over, stop: stop},
		CheckRedirect: base.CheckRedirect,
		Timeout:       base.Timeout,
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "affido", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: c.URL, HTTPClient: hc, MaxRetries: -1,
		DisableStandaloneSSE: true, MaxEventSize: -1}, nil) // the body is bounded instead: see boundedTransport
	if err != nil {
		return nil, classify(ctx, over, "connect", err)
	}
	return &session{cs: cs, over: over}, nil
}

// close ends the session without waiting: closing sends the server a
// DELETE, which a hanging server may keep waiting up to the client's own
// timeout, and the answer to the model must not wait for that.
func (s *session) close() { go func() { _ = s.cs.Close() }() }

// listedTool is a tool as the server lists it.
type listedTool struct {
	Name, Description string
	InputSchema       json.RawMessage
}

// maxTools bounds one server's tool list (pages included).
const maxTools = 200

// list returns every tool the server lists, following cursors.
func (s *session) list(ctx context.Context) ([]listedTool, error) {
	var out []listedTool
	params := &mcp.ListToolsParams{}
	for {
		res, err := s.cs.ListTools(ctx, params)
		if err != nil {
			return nil, classify(ctx, s.over, "list tools", err)
		}
		for _, t := range res.Tools {
			schema, err := json.Marshal(t.InputSchema)
			if err != nil {
				return nil, fmt.Errorf("%w: tool %.60q has a schema that is not JSON", ErrServer, t.Name)
			}
			out = append(out, listedTool{Name: t.Name, Description: t.Description, InputSchema: schema})
		}
		if len(out) > maxTools {
			return nil, fmt.Errorf("%w: it lists more than %d tools", ErrServer, maxTools)
		}
		if res.NextCursor == "" {
			return out, nil
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
}

// Result is a tool call's answer: text for the model, which is outside text.
type Result struct {
	Text      string `json:"text"`
	IsError   bool   `json:"is_error"`
	Truncated bool   `json:"truncated"`
}

// call calls tool with args, its text capped at maxText bytes.
func (s *session) call(ctx context.Context, tool string, args json.RawMessage, maxText int) (Result, error) {
	var a any
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return Result{}, fmt.Errorf("%w: arguments are not JSON", ErrInvalid)
		}
	}
	if _, isObject := a.(map[string]any); a != nil && !isObject {
		return Result{}, fmt.Errorf("%w: arguments must be a JSON object", ErrInvalid)
	}
	res, err := s.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: a})
	if err != nil {
		return Result{}, classify(ctx, s.over, "call "+tool, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		switch c := c.(type) {
		case *mcp.TextContent:
			b.WriteString(c.Text)
		case *mcp.ImageContent:
			fmt.Fprintf(&b, "[an image (%.40s) the model is not shown]", c.MIMEType)
		case *mcp.AudioContent:
			fmt.Fprintf(&b, "[audio (%.40s) the model is not shown]", c.MIMEType)
		case *mcp.ResourceLink:
			fmt.Fprintf(&b, "[a resource link: %s]", c.URI)
		case *mcp.EmbeddedResource:
			if c.Resource != nil && c.Resource.Text != "" {
				b.WriteString(c.Resource.Text)
			} else {
				b.WriteString("[an embedded resource the model is not shown]")
			}
		default:
			b.WriteString("[content the model is not shown]")
		}
	}
	if b.Len() == 0 && res.StructuredContent != nil {
		raw, _ := json.Marshal(res.StructuredContent)
		b.Write(raw)
	}
	text := strings.ToValidUTF8(b.String(), "\uFFFD")
	r := Result{Text: text, IsError: res.IsError}
	if len(text) > maxText {
		cut := maxText
		for cut > 0 && !isRuneStart(text[cut]) {
			cut--
		}
		r.Text, r.Truncated = text[:cut]+fmt.Sprintf("\n[cut at %d bytes of %d]", cut, len(text)), true
	}
	return r, nil
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

// classify maps what the SDK returned to this package's errors. The
// server's own words (an error's text, a redirect's Location) are not
// passed on: they would reach the model unmarked.
func classify(ctx context.Context, over *atomic.Bool, op string, err error) error {
	switch {
	case over.Load():
		return fmt.Errorf("%w (%s)", ErrTooLarge, op)
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return fmt.Errorf("%w (%s)", ErrTimeout, op)
	case errors.Is(err, outbound.ErrRefused) || strings.Contains(err.Error(), outbound.ErrRefused.Error()):
		return fmt.Errorf("%w: %s: the address, or a redirect's, is one the outbound guard refuses (loopback, private, link-local, the control network, the sandbox pool)", ErrServer, op)
	case errors.Is(err, outbound.ErrTooManyRedirects) || strings.Contains(err.Error(), outbound.ErrTooManyRedirects.Error()):
		return fmt.Errorf("%w: %s: too many redirects", ErrServer, op)
	}
	var werr *jsonrpc.Error
	if errors.As(err, &werr) {
		return fmt.Errorf("%w: %s: the server answered with protocol error %d", ErrServer, op, werr.Code)
	}
	return fmt.Errorf("%w: %s: the server could not be reached or did not speak MCP", ErrServer, op)
}

// isTimeout reports whether err is the HTTP client's own timeout, which
// the SDK may pass on only as text.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout() || strings.Contains(err.Error(), "Client.Timeout exceeded")
}

// boundedTransport adds the connector's secret header to requests for its
// own origin and bounds every answer's body.
type boundedTransport struct {
	base           http.RoundTripper
	origin         string
	header, secret string
	max            int64
	over           *atomic.Bool
	stop           func()
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.header != "" && req.URL.Scheme+"://"+req.URL.Host == t.origin {
		req = req.Clone(req.Context())
		req.Header.Set(t.header, t.secret)
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.max {
		resp.Body.Close()
		t.tooLarge()
		return nil, ErrTooLarge
	}
	resp.Body = &boundedBody{rc: resp.Body, left: t.max, over: t.tooLarge}
	return resp, nil
}

func (t *boundedTransport) tooLarge() {
	t.over.Store(true)
	if t.stop != nil {
		t.stop()
	}
}

// boundedBody fails a read past its bytes.
type boundedBody struct {
	rc   io.ReadCloser
	left int64
	over func()
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, ErrTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		b.over()
		return 0, ErrTooLarge
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
