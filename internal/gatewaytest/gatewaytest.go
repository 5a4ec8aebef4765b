// Package gatewaytest is a test double of the manager's gateway for the
// agent's tests: it serves the gatewayapi contract in process, with the
// scripted model, the scripted search and an unguarded fetch, and records
// the notifications and wake reports it is handed. The agent's tests use
// it instead of the manager's packages, so neither side's tests import the
// other's (see internal/deptest).
package gatewaytest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/openai"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/scripted"
)

// Model answers chat completions as the gateway's provider does;
// *scripted.Model is one. A test wraps it to hold or observe calls.
type Model interface {
	Known(model string) bool
	List() []string
	Serve(ctx context.Context, w http.ResponseWriter, req openai.ChatRequest) (openai.ChatUsage, error)
}

var _ Model = (*scripted.Model)(nil)

// Gateway is the fake gateway. Every route accepts any sandbox token.
type Gateway struct {
	Model Model // nil: the scripted model serving fake/echo and fake/alt

	mu            sync.Mutex
	notifications []gatewayapi.Notification
	wakes         []gatewayapi.WakeAt
}

// Start serves g until the test ends and returns the base URL an agent's
// model client takes (…/v1/gateway).
func Start(t testing.TB, g *Gateway) string {
	t.Helper()
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	return srv.URL + gatewayapi.Prefix
}

// Handler serves the gateway's routes under gatewayapi.Prefix.
func (g *Gateway) Handler() http.Handler {
	if g.Model == nil {
		g.Model = scripted.NewModel([]string{"fake/echo", "fake/alt"})
	}
	mux := http.NewServeMux()
	route := func(method, path string, h http.HandlerFunc) { mux.HandleFunc(method+" "+gatewayapi.Prefix+path, h) }
	route("POST", gatewayapi.ChatPath, g.chat)
	route("GET", gatewayapi.ModelsPath, g.models)
	route("POST", gatewayapi.NotifyPath, g.notify)
	route("POST", gatewayapi.WakeAtPath, g.wakeAt)
	route("POST", gatewayapi.FetchPath, g.fetch)
	route("POST", gatewayapi.SearchPath, g.search)
	return mux
}

// Notifications returns the notifications handed to the gateway so far.
func (g *Gateway) Notifications() []gatewayapi.Notification {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]gatewayapi.Notification(nil), g.notifications...)
}

// Wakes returns the wake reports handed to the gateway so far.
func (g *Gateway) Wakes() []gatewayapi.WakeAt {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]gatewayapi.WakeAt(nil), g.wakes...)
}

func (g *Gateway) chat(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	req, err := openai.DecodeRequest(raw)
	if err != nil || req.Model == "" || len(req.Messages) == 0 {
		openai.WriteError(w, http.StatusBadRequest, "invalid_request_error", "bad_request", fmt.Sprintf("not a chat completions request: %v", err))
		return
	}
	if !g.Model.Known(req.Model) {
		openai.WriteError(w, http.StatusBadRequest, "invalid_request_error", "model_not_found", fmt.Sprintf("model %q is not served here", req.Model))
		return
	}
	_, _ = g.Model.Serve(r.Context(), w, req)
}

func (g *Gateway) models(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(openai.NewModelList(g.Model.List()))
}

// decode reads the body into v, refusing unknown fields as the manager
// does, or answers the problem itself.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		problem.Write(w, http.StatusBadRequest, "bad-json", err.Error())
		return false
	}
	return true
}

func (g *Gateway) notify(w http.ResponseWriter, r *http.Request) {
	var n gatewayapi.Notification
	if !decode(w, r, &n) {
		return
	}
	if !n.Valid() {
		problem.Write(w, http.StatusBadRequest, gatewayapi.ProblemBadNotification, "key or text out of bounds")
		return
	}
	g.mu.Lock()
	queued := true
	for _, old := range g.notifications {
		queued = queued && old.Key != n.Key
	}
	if queued {
		g.notifications = append(g.notifications, n)
	}
	g.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(gatewayapi.Queued{Key: n.Key, Queued: queued})
}

func (g *Gateway) wakeAt(w http.ResponseWriter, r *http.Request) {
	var at gatewayapi.WakeAt
	if !decode(w, r, &at) {
		return
	}
	g.mu.Lock()
	g.wakes = append(g.wakes, at)
	g.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// fetch gets the page with no guard at all: the tests' pages are on
// loopback, which the manager's guard refuses.
func (g *Gateway) fetch(w http.ResponseWriter, r *http.Request) {
	var req gatewayapi.FetchRequest
	if !decode(w, r, &req) {
		return
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		problem.Write(w, http.StatusBadRequest, gatewayapi.ProblemBadURL, "not an absolute http or https URL")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), gatewayapi.FetchTimeout)
	defer cancel()
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		problem.Write(w, http.StatusBadGateway, gatewayapi.ProblemFailed, "the site could not be reached")
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, gatewayapi.FetchMaxBytes))
	sum := sha256.Sum256(body)
	media, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	p := gatewayapi.Page{URL: u.String(), FinalURL: resp.Request.URL.String(), Status: resp.StatusCode, ContentType: media,
		FetchedAt: time.Now().UTC(), SHA256: hex.EncodeToString(sum[:]), Bytes: len(body), Text: string(body)}
	if media == "text/html" {
		p.Title, p.Text = htmlText(body)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(p)
}

// htmlText is the page's title and its text without scripts and styles.
func htmlText(b []byte) (title, text string) {
	var out strings.Builder
	skip, inTitle := 0, false
	z := html.NewTokenizer(bytes.NewReader(b))
	for {
		switch z.Next() {
		case html.ErrorToken:
			return strings.TrimSpace(title), strings.Join(strings.Fields(out.String()), " ")
		case html.StartTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "script", "style":
				skip++
			case "title":
				inTitle = true
			}
		case html.EndTagToken:
			name, _ := z.TagName()
			switch string(name) {
			case "script", "style":
				skip = max(skip-1, 0)
			case "title":
				inTitle = false
			}
			out.WriteByte(' ')
		case html.TextToken:
			switch {
			case inTitle:
				title += string(z.Text())
			case skip == 0:
				out.Write(z.Text())
			}
		}
	}
}

func (g *Gateway) search(w http.ResponseWriter, r *http.Request) {
	var req gatewayapi.SearchRequest
	if !decode(w, r, &req) {
		return
	}
	q := strings.TrimSpace(req.Query)
	if q == "" {
		problem.Write(w, http.StatusBadRequest, gatewayapi.ProblemBadSearch, "the query is empty")
		return
	}
	n := req.Count
	if n <= 0 {
		n = 5
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(gatewayapi.SearchResults{Provider: scripted.SearchProvider, Query: q,
		SearchedAt: time.Now().UTC(), Hits: scripted.Search(q, min(n, gatewayapi.MaxSearchHits))})
}
