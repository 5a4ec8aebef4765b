package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/outbound"
	"github.com/affido/affido/manager/spend"
)

// testClock is a wall clock the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// chargedWeb serves the web routes for user "u", charged to ledger.
func chargedWeb(t *testing.T, w *Web, ledger spend.Ledger) *httptest.Server {
	w.Caller = func(r *http.Request) (string, int, string) {
		if r.Header.Get("Authorization") != "Bearer sandbox" {
			return "", http.StatusUnauthorized, "unknown sandbox token"
		}
		return "u", 0, ""
	}
	w.Client = outbound.NewClient(outbound.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	w.Search = ScriptedSearch{}
	w.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	w.Ledger = ledger
	mux := http.NewServeMux()
	w.Register(mux)
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// webCall posts body to a web route and returns the status, the problem (if
// refused) and Retry-After.
func webCall(t *testing.T, ctx context.Context, gw *httptest.Server, path string, body any) (int, problem.Problem, string) {
	t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", gw.URL+gatewayapi.Prefix+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer sandbox")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, problem.Problem{}, err.Error()
	}
	defer resp.Body.Close()
	var pr problem.Problem
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &pr); err != nil || pr.Type == "" {
			t.Fatalf("a refusal that is not problem JSON: %d %s", resp.StatusCode, b)
		}
	}
	return resp.StatusCode, pr, resp.Header.Get("Retry-After")
}

// settling is a ledger that counts settlements.
type settling struct {
	*spend.Memory
	mu      sync.Mutex
	settled int
}

func (l *settling) Settle(ctx context.Context, id, micros int64) error {
	err := l.Memory.Settle(ctx, id, micros)
	if err == nil {
		l.mu.Lock()
		l.settled++
		l.mu.Unlock()
	}
	return err
}

func (l *settling) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.settled
}

// A model looping fetch_url is stopped by the per-minute rate: the calls
// past it are refused with 429, Retry-After and a problem that names the
// rate, go nowhere and cost nothing; a minute later calls go again.
func TestFetchLoopStoppedByRate(t *testing.T) {
	s := site(t)
	clock := &testClock{now: time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)}
	ledger := &spend.Memory{Now: clock.Now}
	price := spend.USD(0.001)
	gw := chargedWeb(t, &Web{Now: clock.Now, PerMinute: 5, Prices: spend.WebPrices{Fetch: price, Search: price},
		Limits: spend.Limits{Daily: spend.USD(100), Monthly: spend.USD(100)}}, ledger)
	ok, refused := 0, 0
	for i := range 50 {
		code, pr, retry := webCall(t, t.Context(), gw, gatewayapi.FetchPath, gatewayapi.FetchRequest{URL: s.URL + "/plain"})
		switch code {
		case 200:
			ok++
		case 429:
			refused++
			if !strings.HasSuffix(pr.Type, gatewayapi.ProblemWebRate) || !strings.Contains(pr.Detail, "rate limit") ||
				!strings.Contains(pr.Detail, "5 a minute") || retry != strconv.Itoa(60-i/10) {
				t.Fatalf("call %d refused as %+v (Retry-After %q)", i, pr, retry)
			}
		default:
			t.Fatalf("call %d: %d %+v", i, code, pr)
		}
		clock.add(100 * time.Millisecond)
	}
	if ok != 5 || refused != 45 {
		t.Fatalf("%d calls went, %d refused; want 5 and 45", ok, refused)
	}
	if got := ledger.Spent("u"); got != 5*price {
		t.Fatalf("charged %s, want the 5 calls that went: %s", spend.Dollars(got), spend.Dollars(5*price))
	}
	// The search shares the rate: the same user is refused there too.
	if code, pr, _ := webCall(t, t.Context(), gw, gatewayapi.SearchPath, gatewayapi.SearchRequest{Query: "q"}); code != 429 || !strings.Contains(pr.Detail, "web_search") {
		t.Fatalf("search within the minute: %d %+v", code, pr)
	}
	clock.add(time.Minute)
	if code, pr, _ := webCall(t, t.Context(), gw, gatewayapi.FetchPath, gatewayapi.FetchRequest{URL: s.URL + "/plain"}); code != 200 {
		t.Fatalf("a minute later: %d %+v", code, pr)
	}
}

// A model looping fetch_url and web_search is stopped by the spend limit:
// each call reserves its price on the ledger model calls use, and the one
// that would pass the daily limit is refused with 402 and a problem that
// names the limit and the price; the owner is told.
func TestWebLoopStoppedBySpend(t *testing.T) {
	s := site(t)
	ledger := &spend.Memory{}
	fetchPrice, searchPrice := spend.USD(0.01), spend.USD(0.005)
	var told []string
	gw := chargedWeb(t, &Web{Prices: spend.WebPrices{Fetch: fetchPrice, Search: searchPrice},
		Limits:  spend.Limits{Daily: spend.USD(0.035), Monthly: spend.USD(1)},
		OnLimit: func(user string) { told = append(told, user) }}, ledger)
	// A model call spent part of the day already: the web shares the limit.
	if _, err := ledger.Reserve(t.Context(), "u", "fake/echo", spend.USD(0.01), spend.Limits{Daily: spend.USD(1), Monthly: spend.USD(1)}); err != nil {
		t.Fatal(err)
	}
	ok := 0
	var last problem.Problem
	var code int
	for range 20 {
		if code, last, _ = webCall(t, t.Context(), gw, gatewayapi.FetchPath, gatewayapi.FetchRequest{URL: s.URL + "/plain"}); code != 200 {
			break
		}
		ok++
	}
	if ok != 2 || code != 402 || !strings.HasSuffix(last.Type, gatewayapi.ProblemSpendLimit) ||
		!strings.Contains(last.Detail, "daily limit is $0.0350") || !strings.Contains(last.Detail, "this fetch_url costs $0.0100") {
		t.Fatalf("after %d fetches: %d %+v", ok, code, last)
	}
	// $0.005 is left: one search fits, the next does not.
	if code, pr, _ := webCall(t, t.Context(), gw, gatewayapi.SearchPath, gatewayapi.SearchRequest{Query: "q"}); code != 200 {
		t.Fatalf("a search within the limit: %d %+v", code, pr)
	}
	if code, pr, _ := webCall(t, t.Context(), gw, gatewayapi.SearchPath, gatewayapi.SearchRequest{Query: "q"}); code != 402 ||
		!strings.Contains(pr.Detail, "this web_search costs $0.0050") {
		t.Fatalf("a search past the limit: %d %+v", code, pr)
	}
	if got, want := ledger.Spent("u"), spend.USD(0.01)+2*fetchPrice+searchPrice; got != want {
		t.Fatalf("spent %s, want %s", spend.Dollars(got), spend.Dollars(want))
	}
	if len(told) != 2 || told[0] != "u" {
		t.Fatalf("the owner was told %v", told)
	}
}

// A call is charged once it goes out, whatever comes back: a body that is
// not text, a redirect the guard refuses, a sandbox that hangs up while
// the site answers. Bad input is refused before: neither charged nor
// counted against the rate.
func TestWebChargeCannotBeDodged(t *testing.T) {
	s := site(t)
	hung := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(hung)
		<-r.Context().Done()
	}))
	t.Cleanup(slow.Close)
	ledger := &settling{Memory: &spend.Memory{}}
	price := spend.USD(0.002)
	gw := chargedWeb(t, &Web{PerMinute: 4, Prices: spend.WebPrices{Fetch: price, Search: price},
		Limits: spend.Limits{Daily: spend.USD(1), Monthly: spend.USD(1)}}, ledger)

	for _, bad := range []any{
		gatewayapi.FetchRequest{URL: "file:///etc/passwd"},
		gatewayapi.FetchRequest{URL: "http:///nohost"},
		map[string]string{"url": s.URL, "extra": "x"},
	} {
		if code, pr, _ := webCall(t, t.Context(), gw, gatewayapi.FetchPath, bad); code != 400 {
			t.Fatalf("%v: %d %+v", bad, code, pr)
		}
	}
	if code, pr, _ := webCall(t, t.Context(), gw, gatewayapi.SearchPath, gatewayapi.SearchRequest{Query: " "}); code != 400 {
		t.Fatalf("empty query: %d %+v", code, pr)
	}
	if got := ledger.Spent("u"); got != 0 {
		t.Fatalf("bad input was charged %s", spend.Dollars(got))
	}

	if code, _, _ := webCall(t, t.Context(), gw, gatewayapi.FetchPath, gatewayapi.FetchRequest{URL: s.URL + "/binary"}); code != 415 {
		t.Fatalf("binary: %d", code)
	}
	if code, _, _ := webCall(t, t.Context(), gw, gatewayapi.FetchPath, gatewayapi.FetchRequest{URL: s.URL + "/redirect?to=http://169.254.169.254/"}); code != 403 {
		t.Fatalf("refused redirect: %d", code)
	}
	ctx, cancel := context.WithCancel(t.Context())
	go func() { <-hung; cancel() }()
	if code, _, _ := webCall(t, ctx, gw, gatewayapi.FetchPath, gatewayapi.FetchRequest{URL: slow.URL + "/"}); code != 0 {
		t.Fatalf("the hung-up call answered %d", code)
	}
	waitUntil(t, func() bool { return ledger.count() == 3 })
	if got := ledger.Spent("u"); got != 3*price {
		t.Fatalf("charged %s for three calls that went out, want %s", spend.Dollars(got), spend.Dollars(3*price))
	}
	// Three calls went; the fourth of the minute goes, the fifth is refused:
	// the bad input did not count.
	if code, _, _ := webCall(t, t.Context(), gw, gatewayapi.FetchPath, gatewayapi.FetchRequest{URL: s.URL + "/plain"}); code != 200 {
		t.Fatalf("the fourth call: %d", code)
	}
	if code, _, _ := webCall(t, t.Context(), gw, gatewayapi.FetchPath, gatewayapi.FetchRequest{URL: s.URL + "/plain"}); code != 429 {
		t.Fatalf("the fifth call: %d", code)
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
