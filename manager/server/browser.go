package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/browser"
	"github.com/affido/affido/manager/gateway"
	"github.com/affido/affido/manager/spend"
)

// Browser runs the agents' browser actions (manager/browser), and the
// owner's live view of an agent's tab (the take-over).
type Browser interface {
	// Act runs an action and says how long it held the browser.
	Act(ctx context.Context, user string, req gatewayapi.BrowserRequest) (gatewayapi.BrowserPage, time.Duration, error)
	Screen(ctx context.Context, user, agent string, own browser.Own, width, height int, scale float64) (browser.Screen, error)
	Input(ctx context.Context, user, agent string, own browser.Own, in browser.Input) error
}

func (s *Server) browserOwnerRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/browser/screen", s.serve(s.browserScreen))
	mux.HandleFunc("POST /api/browser/input", s.serve(s.browserInput))
}

// browserScreen answers GET /api/browser/screen?agent=&w=&h=&scale=: a
// JPEG of the agent's tab, sized to the owner's screen (w × h CSS pixels
// at scale; none: as it is). The tab's address is in Affido-Page-URL
// (percent-encoded), its size in Affido-Page-Size.
func (s *Server) browserScreen(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	// A read, but it brings the browser up and resizes the tab: not from
	// another site's page (a cookie rides a cross-site top-level visit).
	if f := r.Header.Get("Sec-Fetch-Site"); f == "cross-site" || f == "same-site" {
		return problem.New(http.StatusForbidden, "cross-site", "the live view is not shown to another site's page")
	}
	q := r.URL.Query()
	num := func(k string) float64 {
		v, err := strconv.ParseFloat(q.Get(k), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0
		}
		return v
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	sc, err := s.Browser.Screen(ctx, user, q.Get("agent"), ownSite(r), int(num("w")), int(num("h")), num("scale"))
	if err != nil {
		return ownerBrowserProblem(err)
	}
	w.Header().Set("Content-Type", "image/jpeg")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Affido-Page-URL", url.QueryEscape(sc.URL))
	w.Header().Set("Affido-Page-Size", fmt.Sprintf("%dx%d", sc.Width, sc.Height))
	_, _ = w.Write(sc.JPEG)
	return nil
}

// browserInput serves POST /api/browser/input: one of the owner's taps,
// keys or texts, sent to the agent's tab ({"agent": …} beside
// manager/browser.Input's fields).
func (s *Server) browserInput(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	var body struct {
		Agent string `json:"agent"`
		browser.Input
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || dec.More() {
		return problem.New(http.StatusBadRequest, "bad-json", fmt.Sprintf("the body is not a browser input: %v", err))
	}
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	if err := s.Browser.Input(ctx, user, body.Agent, ownSite(r), body.Input); err != nil {
		return ownerBrowserProblem(err)
	}
	writeJSONStatus(w, http.StatusOK, map[string]any{"ok": true})
	return nil
}

// ownSite is the site the owner reached the manager at: the agent's
// browser is never shown or driven on it.
func ownSite(r *http.Request) browser.Own { return browser.Own{Host: requestHost(r)} }

// ownerBrowserProblem words "no page" for the owner (the agent's words
// tell it to call browser_open).
func ownerBrowserProblem(err error) error {
	if errors.Is(err, browser.ErrNoPage) {
		return problem.New(http.StatusConflict, "no-page", "this agent has no page open in its browser: open one with the address field")
	}
	return err
}

// browserAction serves POST /v1/gateway/browser: one action of the
// sandbox's user's browser. A page's own failure is a 502 in the
// manager's words (manager/browser.ErrPage).
func (s *Server) browserAction(w http.ResponseWriter, r *http.Request) error {
	user, status, why := s.caller(r)
	if status != 0 {
		return problem.New(status, "gateway-auth", why)
	}
	var req gatewayapi.BrowserRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, gatewayapi.BrowserUploadMax*4/3+64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || dec.More() {
		return problem.New(http.StatusBadRequest, "bad-json", fmt.Sprintf("the body is not a browser request: %v", err))
	}
	settle, err := s.chargeBrowser(r, user)
	if err != nil {
		return err
	}
	page, held, err := s.Browser.Act(r.Context(), user, req)
	settle(held)
	if err != nil {
		return err
	}
	writeJSONStatus(w, http.StatusOK, page)
	return nil
}

// BrowserCharged is the ledger's name for the browser's time.
const BrowserCharged = "browser"

// browserWorst is the longest one action can hold the browser (the agent
// gives up on a call after tools.BrowserTimeout): what is reserved before
// it runs.
const browserWorst = 90 * time.Second

// chargeBrowser reserves the worst case of one action's browser time at
// BrowserPrice against the user's spend limits (402 past them), and
// returns the settle that charges the time it took (at least a second),
// whatever came of it. Not priced, or no ledger: nothing.
func (s *Server) chargeBrowser(r *http.Request, user string) (func(time.Duration), error) {
	if s.Ledger == nil || s.BrowserPrice == 0 {
		return func(time.Duration) {}, nil
	}
	cost := func(d time.Duration) int64 { // rounded up; no overflow under $100,000 a minute
		ms := max(d, time.Second).Milliseconds()
		return (s.BrowserPrice*ms + 59_999) / 60_000
	}
	id, perr := gateway.Reserve(r.Context(), s.Ledger, s.SpendLimits, user, BrowserCharged, cost(browserWorst),
		fmt.Sprintf("a browser action reserves %s (%s a minute, for up to %s)", spend.Dollars(cost(browserWorst)), spend.Dollars(s.BrowserPrice), browserWorst))
	if perr != nil {
		if perr.Status == http.StatusPaymentRequired {
			s.spendLimitReached(user)
		}
		return nil, perr
	}
	return func(d time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Ledger.Settle(ctx, id, cost(min(d, browserWorst))); err != nil {
			s.Log.Warn("browser: spend not settled (the reservation stands)", "user", user, "id", id, "err", err)
		}
	}, nil
}

// browserProblem is the problem a browser error answers with, nil for
// one it does not know.
func browserProblem(err error) *problem.Error {
	switch {
	case errors.Is(err, browser.ErrBadRequest):
		return problem.New(http.StatusBadRequest, "bad-browser-request", err.Error())
	case errors.Is(err, browser.ErrNoPage):
		return problem.New(http.StatusConflict, "no-page", err.Error())
	case errors.Is(err, browser.ErrOtherSite):
		return problem.New(http.StatusConflict, "other-site", err.Error())
	case errors.Is(err, browser.ErrOwnSite):
		return problem.New(http.StatusConflict, "own-site", err.Error())
	case errors.Is(err, browser.ErrPassword):
		return problem.New(http.StatusForbidden, "password-field", err.Error())
	case errors.Is(err, browser.ErrNoElement):
		return problem.New(http.StatusNotFound, "no-element", err.Error())
	case errors.Is(err, browser.ErrBusy):
		return problem.New(http.StatusTooManyRequests, "browser-busy", err.Error()).Retry(2)
	case errors.Is(err, browser.ErrPage):
		return problem.New(http.StatusBadGateway, "page-error", err.Error())
	case errors.Is(err, browser.ErrBrowser):
		return problem.New(http.StatusServiceUnavailable, "browser-unavailable", err.Error()).Retry(2)
	}
	return nil
}
