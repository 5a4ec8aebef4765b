package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/outbound"
	"github.com/affido/affido/manager/spend"
)

// Web serves fetch_url and web_search to sandboxes, which have no egress
// of their own: POST /v1/gateway/fetch and /v1/gateway/search, called by
// the agent with its sandbox token.
type Web struct {
	Caller Caller
	// Client is the guarded outbound client (manager/outbound): every
	// address checked at dial time and on every redirect.
	Client *http.Client
	Search Searcher
	Log    *slog.Logger
	Now    func() time.Time

	// Spend control, on the ledger model calls are charged to: with a
	// Ledger, each call reserves its price (Prices) against the user's
	// limits (Limits, the defaults) before it goes out, refused with 402
	// past one, and is settled to it after. PerMinute, if positive, bounds
	// each user's web calls in any minute (429). Bad input is refused
	// before either and is neither charged nor counted.
	Ledger    spend.Ledger
	Limits    spend.Limits
	Prices    spend.WebPrices
	PerMinute int
	OnLimit   func(user string) // told when a call is refused for spend

	rate *perMinute
}

// Register adds the web routes to mux.
func (h *Web) Register(mux *http.ServeMux) {
	h.rate = newPerMinute(h.PerMinute)
	mux.HandleFunc("POST "+gatewayapi.Prefix+gatewayapi.FetchPath, h.fetch)
	mux.HandleFunc("POST "+gatewayapi.Prefix+gatewayapi.SearchPath, h.search)
}

func (h *Web) now() time.Time {
	if h.Now != nil {
		return h.Now().UTC()
	}
	return time.Now().UTC()
}

// begin authenticates the sandbox and reads a small JSON body into v,
// refusing unknown fields; it answers the problem itself on failure.
func (h *Web) begin(w http.ResponseWriter, r *http.Request, v any) (user string, ok bool) {
	user, status, why := h.Caller(r)
	if status != 0 {
		problem.Write(w, status, "gateway-auth", why)
		return "", false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil || dec.More() {
		problem.Write(w, http.StatusBadRequest, "bad-json", fmt.Sprintf("the body is not the expected JSON: %v", err))
		return "", false
	}
	return user, true
}

// CheckFetchURL accepts only an absolute http or https URL with a host and
// no credentials in it.
func CheckFetchURL(raw string) (*url.URL, error) {
	if len(raw) > 4096 {
		return nil, errors.New("the URL is longer than 4096 bytes")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("only http and https URLs can be fetched, not %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, errors.New("the URL has no host")
	}
	if u.User != nil {
		return nil, errors.New("URLs with credentials in them are not fetched")
	}
	return u, nil
}

func (h *Web) fetch(w http.ResponseWriter, r *http.Request) {
	var req gatewayapi.FetchRequest
	user, ok := h.begin(w, r, &req)
	if !ok {
		return
	}
	u, err := CheckFetchURL(req.URL)
	if err != nil {
		problem.Write(w, http.StatusBadRequest, gatewayapi.ProblemBadURL, err.Error())
		return
	}
	settle, ok := h.charge(w, r, user, ToolFetch)
	if !ok {
		return
	}
	defer settle()
	page, kind, status, err := h.get(r.Context(), u)
	if err != nil {
		h.Log.Info("gateway: fetch refused or failed", "user", user, "url", u.Redacted(), "err", err)
		problem.Write(w, status, kind, err.Error())
		return
	}
	h.Log.Info("gateway: fetched", "user", user, "url", u.Redacted(), "final", page.FinalURL, "status", page.Status, "bytes", page.Bytes)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(page)
}

// get fetches u with the guarded client, within the time and size caps.
// On failure it returns the problem kind and status to answer with.
func (h *Web) get(ctx context.Context, u *url.URL) (gatewayapi.Page, string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, gatewayapi.FetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return gatewayapi.Page{}, gatewayapi.ProblemBadURL, http.StatusBadRequest, err
	}
	req.Header.Set("User-Agent", "Affido-fetch/1 (an agent fetching for its owner)")
	req.Header.Set("Accept", "text/html, text/plain;q=0.9, */*;q=0.5")
	resp, err := h.Client.Do(req)
	if err != nil {
		// The error names what the site sent (a redirect's Location, a
		// status line, a certificate's names): text the model must not read
		// unmarked. It goes to the log; the answer says only what happened.
		h.Log.Info("gateway: fetch error", "url", u.Redacted(), "err", err)
		var tmo interface{ Timeout() bool }
		switch {
		case errors.Is(err, outbound.ErrTooManyRedirects):
			return gatewayapi.Page{}, gatewayapi.ProblemRefused, http.StatusForbidden,
				fmt.Errorf("fetch %s refused: more than %d redirects", u.Redacted(), outbound.MaxRedirects)
		case errors.Is(err, outbound.ErrRefused):
			return gatewayapi.Page{}, gatewayapi.ProblemRefused, http.StatusForbidden,
				fmt.Errorf("fetch %s refused: it, or a redirect from it, leads to an address or scheme the outbound guard refuses (loopback, private, link-local, the control network, the sandbox pool; http and https only)", u.Redacted())
		case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.As(err, &tmo) && tmo.Timeout():
			return gatewayapi.Page{}, gatewayapi.ProblemFailed, http.StatusGatewayTimeout,
				fmt.Errorf("fetch %s: no answer within %s", u.Redacted(), gatewayapi.FetchTimeout)
		}
		return gatewayapi.Page{}, gatewayapi.ProblemFailed, http.StatusBadGateway, fmt.Errorf("fetch %s: the site could not be reached", u.Redacted())
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, gatewayapi.FetchMaxBytes+1))
	if err != nil && len(body) == 0 {
		h.Log.Info("gateway: fetch body", "url", u.Redacted(), "err", err)
		return gatewayapi.Page{}, gatewayapi.ProblemFailed, http.StatusBadGateway, fmt.Errorf("fetch %s: the body could not be read", u.Redacted())
	}
	truncated := len(body) > gatewayapi.FetchMaxBytes
	if truncated {
		body = body[:gatewayapi.FetchMaxBytes]
	}
	sum := sha256.Sum256(body)
	p := gatewayapi.Page{URL: u.String(), FinalURL: resp.Request.URL.String(), Status: resp.StatusCode, FetchedAt: h.now(),
		SHA256: hex.EncodeToString(sum[:]), Bytes: len(body), Truncated: truncated}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = http.DetectContentType(body)
	}
	media, _, _ := mime.ParseMediaType(ct)
	p.ContentType = media
	switch {
	case media == "text/html" || media == "application/xhtml+xml":
		p.Title, p.Text, err = HTMLText(bytes.NewReader(body))
		if err != nil {
			return p, gatewayapi.ProblemNotText, http.StatusUnsupportedMediaType, fmt.Errorf("fetch %s: the HTML could not be read", u.Redacted())
		}
	case strings.HasPrefix(media, "text/") || media == "application/json" || strings.HasSuffix(media, "+json") ||
		media == "application/xml" || strings.HasSuffix(media, "+xml"):
		if !utf8.Valid(body) && !truncated {
			return p, gatewayapi.ProblemNotText, http.StatusUnsupportedMediaType, fmt.Errorf("fetch %s: the body is not UTF-8 text", u.Redacted())
		}
		p.Text = strings.ToValidUTF8(string(body), "\uFFFD")
	default:
		return p, gatewayapi.ProblemNotText, http.StatusUnsupportedMediaType, fmt.Errorf("fetch %s: the body is not text (%.60q)", u.Redacted(), media)
	}
	return p, "", 0, nil
}

func (h *Web) search(w http.ResponseWriter, r *http.Request) {
	var req gatewayapi.SearchRequest
	user, ok := h.begin(w, r, &req)
	if !ok {
		return
	}
	q := strings.TrimSpace(req.Query)
	if q == "" || len(q) > 500 {
		problem.Write(w, http.StatusBadRequest, gatewayapi.ProblemBadSearch, "query is 1 to 500 bytes")
		return
	}
	n := req.Count
	if n <= 0 {
		n = 5
	}
	n = min(n, gatewayapi.MaxSearchHits)
	settle, ok := h.charge(w, r, user, ToolSearch)
	if !ok {
		return
	}
	defer settle()
	ctx, cancel := context.WithTimeout(r.Context(), gatewayapi.FetchTimeout)
	defer cancel()
	hits, err := h.Search.Search(ctx, q, n)
	if err != nil {
		h.Log.Warn("gateway: search failed", "user", user, "provider", h.Search.Name(), "err", err)
		problem.Write(w, http.StatusBadGateway, gatewayapi.ProblemNoSearch, "the search provider failed: "+err.Error())
		return
	}
	if len(hits) > n {
		hits = hits[:n]
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(gatewayapi.SearchResults{Provider: h.Search.Name(), Query: q, SearchedAt: h.now(), Hits: hits})
}
