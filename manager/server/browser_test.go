package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/browser"
	"github.com/affido/affido/manager/spend"
)

// fakeBrowser records the owner's calls; err is what they return.
type fakeBrowser struct {
	mu     sync.Mutex
	calls  []string
	inputs []browser.Input
	err    error
	held   time.Duration // what Act says it held the browser
}

func (f *fakeBrowser) Act(context.Context, string, gatewayapi.BrowserRequest) (gatewayapi.BrowserPage, time.Duration, error) {
	return gatewayapi.BrowserPage{}, f.held, nil
}

func (f *fakeBrowser) Screen(_ context.Context, user, agent string, own browser.Own, w, h int, scale float64) (browser.Screen, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("screen %s %s %s %dx%d@%g", user, agent, own.Host, w, h, scale))
	return browser.Screen{JPEG: []byte("\xff\xd8jpeg"), URL: "https://shop.example/sign in?x=1", Width: 390, Height: 700}, f.err
}

func (f *fakeBrowser) Input(_ context.Context, user, agent string, own browser.Own, in browser.Input) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf("input %s %s %s %s", user, agent, own.Host, in.Kind))
	f.inputs = append(f.inputs, in)
	return f.err
}

func (f *fakeBrowser) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// The owner's live view of an agent's tab: only the signed-in owner sees
// their own agents' tabs and sends them input. Tried: no credentials, a
// cross-site POST carrying the cookie, a form post, a body naming another
// user; none reaches the browser.
func TestOwnerLiveViewOfTheAgentsTab(t *testing.T) {
	acc := newFakeAccounts()
	h, _ := account.Hash("right password", cheap)
	acc.hashes["alice"] = h
	fb := &fakeBrowser{}
	s := &Server{EdgeDeps: EdgeDeps{Auth: acc, Resolver: instantResolver{}}, OwnerDeps: OwnerDeps{Accounts: acc, HashParams: cheap},
		GatewayDeps: GatewayDeps{Browser: fb}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	resp, _ := do(t, srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)

	resp, body := doRaw(t, srv, call{"GET", "/api/browser/screen?agent=main&w=390&h=700&scale=2", "", withCookie(c)})
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "image/jpeg" || string(body) != "\xff\xd8jpeg" || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("the screen: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if u, _ := url.QueryUnescape(resp.Header.Get("Affido-Page-URL")); u != "https://shop.example/sign in?x=1" || resp.Header.Get("Affido-Page-Size") != "390x700" {
		t.Fatalf("the page's address and size: %v", resp.Header)
	}
	if resp, _ := do(t, srv, call{"POST", "/api/browser/input", `{"agent":"main","kind":"tap","x":0.5,"y":0.25}`, withCookie(c)}); resp.StatusCode != 200 {
		t.Fatalf("a tap: %d", resp.StatusCode)
	}
	host := srv.Listener.Addr().String()
	want := []string{"screen alice main " + host + " 390x700@2", "input alice main " + host + " tap"}
	if fmt.Sprint(fb.calls) != fmt.Sprint(want) || fb.inputs[0].X != 0.5 || fb.inputs[0].Y != 0.25 {
		t.Fatalf("calls %v %+v, want %v", fb.calls, fb.inputs, want)
	}

	for what, c := range map[string]call{
		"a screen without credentials": {"GET", "/api/browser/screen?agent=main", "", nil},
		"input without credentials":    {"POST", "/api/browser/input", `{"agent":"main","kind":"back"}`, nil},
		"a cross-site input":           {"POST", "/api/browser/input", `{"agent":"main","kind":"back"}`, withCookie(c, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")},
		"a form post":                  {"POST", "/api/browser/input", "", withCookie(c, "Content-Type", "application/x-www-form-urlencoded")},
		"another user in the body":     {"POST", "/api/browser/input", `{"agent":"main","kind":"back","user":"bob"}`, withCookie(c)},
		"two bodies":                   {"POST", "/api/browser/input", `{"agent":"main","kind":"back"}{}`, withCookie(c)},
		"a screen for another site":    {"GET", "/api/browser/screen?agent=main", "", withCookie(c, "Sec-Fetch-Site", "cross-site")},
	} {
		n := fb.count()
		resp, m := do(t, srv, c)
		if resp.StatusCode < 400 || fb.count() != n {
			t.Errorf("%s: %d %v, the browser called: %v", what, resp.StatusCode, m, fb.count() != n)
		}
	}

	// The browser's refusals are problems: no page (in the owner's words),
	// a bad input.
	fb.err = fmt.Errorf("%w: call browser_open first", browser.ErrNoPage)
	if resp, m := do(t, srv, call{"GET", "/api/browser/screen?agent=ops", "", withCookie(c)}); resp.StatusCode != 409 || m["type"] == nil || m["detail"] != "this agent has no page open in its browser: open one with the address field" {
		t.Fatalf("no page: %d %v", resp.StatusCode, m)
	}
	fb.err = fmt.Errorf("%w: unknown key", browser.ErrBadRequest)
	if resp, _ := do(t, srv, call{"POST", "/api/browser/input", `{"agent":"main","kind":"key","key":"F13"}`, withCookie(c)}); resp.StatusCode != 400 {
		t.Fatalf("a bad input: %d", resp.StatusCode)
	}
}

// The browser's time is charged on the spend ledger: each action reserves
// its worst case first, and settles to the time it took (a second at
// least); past the limits the action is refused (402) before the browser
// is touched.
func TestBrowserTimeIsCharged(t *testing.T) {
	fb := &fakeBrowser{}
	ledger := &spend.Memory{}
	s := &Server{GatewayDeps: GatewayDeps{Gateway: okSandbox{}, Browser: fb, Ledger: ledger, BrowserPrice: spend.USD(0.06),
		SpendLimits: spend.Limits{Daily: spend.USD(0.5), Monthly: spend.USD(5)}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	act := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/v1/gateway/browser", strings.NewReader(`{"agent":"main","action":"read"}`))
		req.Header.Set("Authorization", "Bearer sb")
		req.Header.Set(SourceIPHeader, "10.213.0.2")
		w := httptest.NewRecorder()
		s.Handler().ServeHTTP(w, req)
		return w
	}
	if w := act(); w.Code != 200 {
		t.Fatalf("an action: %d %s", w.Code, w.Body)
	}
	// $0.06 a minute: a second (the least charged) is $0.001.
	if got := ledger.Spent("u"); got != spend.USD(0.001) {
		t.Fatalf("spent %d micro-dollars, want a second's (%d)", got, spend.USD(0.001))
	}
	// Charged for the time the action held the browser, as the browser
	// says (its wait for the user's turn is not counted).
	fb.held = 2500 * time.Millisecond
	if w := act(); w.Code != 200 {
		t.Fatalf("an action: %d %s", w.Code, w.Body)
	}
	if got := ledger.Spent("u"); got != spend.USD(0.001)+spend.USD(0.0025) {
		t.Fatalf("spent %d micro-dollars, want %d", got, spend.USD(0.0035))
	}
	// The worst case ($0.09) no longer fits under the day's limit.
	ledger.Limits = map[string]spend.Limits{"u": {Daily: spend.USD(0.05), Monthly: spend.USD(5)}}
	w := act()
	if w.Code != 402 || !strings.Contains(w.Body.String(), "a browser action reserves $0.0900") {
		t.Fatalf("past the limit: %d %s", w.Code, w.Body)
	}
	if got := ledger.Spent("u"); got != spend.USD(0.0035) {
		t.Fatalf("a refused action was charged: %d", got)
	}
}
