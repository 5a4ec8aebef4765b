//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The soak's HTTP client: every request goes through Caddy with the user's
// token, is tried again while it fails, and lands in a ledger. A 503 or 429
// with Retry-After is the documented "try again" and is waited out. Any
// other 5xx, a transport error or a timeout is tried again too, and kept
// with its time, so the requests invariant can ask afterwards whether a
// fault explains it (a request in flight when Caddy or the manager is
// killed may fail at the transport level; one that fails with nothing
// injected is a violation). A request that gets no answer within
// soakRequestBudget is unanswered.

// soakRequestBudget is how long one request is tried before it counts as
// unanswered: long enough to ride out a manager restart during a Postgres
// restart, short enough that a stuck sandbox shows.
const soakRequestBudget = 4 * time.Minute

// soakAttemptTimeout is one try's limit. A prompt that waits for its reply
// (the fake model answers in milliseconds; "slow" in at most 10 s, retries
// after 2, 4, 8 s) has its own, soakWaitTimeout.
const (
	soakAttemptTimeout = 60 * time.Second
	soakWaitTimeout    = 90 * time.Second
)

// failure is one try of a request that did not get an answer: a transport
// error, a timeout, a 5xx other than 503/429 with Retry-After, or a stream
// cut short. Whether a fault explains it is decided at the end, against the
// fault log.
type failure struct {
	User       string
	Route      string
	Start, End time.Time
	Code       int    // 0 for no HTTP answer
	What       string // "transport: …", "502", "stream cut", …
}

// finalAnswer is how one request ended.
type finalAnswer struct {
	User       string
	Route      string
	Start, End time.Time
	Code       int // 0: unanswered within the budget
	Tries      int
}

// soakLedger keeps every request's end and every failed try.
type soakLedger struct {
	mu         sync.Mutex
	answers    []finalAnswer
	failures   []failure
	retryAfter map[int]int // documented 503/429 with Retry-After, by status
}

func (l *soakLedger) fail(f failure) {
	l.mu.Lock()
	l.failures = append(l.failures, f)
	l.mu.Unlock()
}

func (l *soakLedger) answer(a finalAnswer) {
	l.mu.Lock()
	l.answers = append(l.answers, a)
	l.mu.Unlock()
}

func (l *soakLedger) documented(code int) {
	l.mu.Lock()
	if l.retryAfter == nil {
		l.retryAfter = map[int]int{}
	}
	l.retryAfter[code]++
	l.mu.Unlock()
}

// snapshot copies the ledger for the checks.
func (l *soakLedger) snapshot() (answers []finalAnswer, failures []failure, retryAfter map[int]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	retryAfter = map[int]int{}
	for k, v := range l.retryAfter {
		retryAfter[k] = v
	}
	return append([]finalAnswer(nil), l.answers...), append([]failure(nil), l.failures...), retryAfter
}

// soakClient sends the soak's requests.
type soakClient struct {
	ledger *soakLedger
	http   *http.Client // one try's timeout is set per request
	stream *http.Client // for event streams: no overall timeout
}

func newSoakClient() *soakClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 32, ResponseHeaderTimeout: soakWaitTimeout, IdleConnTimeout: 30 * time.Second}
	return &soakClient{ledger: &soakLedger{}, http: &http.Client{Transport: tr},
		stream: &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: soakAttemptTimeout}}}
}

// soakReq is one request. Body is replayed on every try, so only requests
// that are safe to send again go through here: GETs, PUT of an upload, a
// prompt with its requestId, a decision (a repeat is 409), a new
// conversation (a repeat makes an empty one).
type soakReq struct {
	user, token  string
	method, path string // path from the site's root, e.g. /u/alice/prompt
	body         []byte
	timeout      time.Duration // one try; soakAttemptTimeout when zero
	budget       time.Duration // all tries; soakRequestBudget when zero
	// final lists 5xx statuses that are answers here, not failures (507
	// for an upload: the disk is full).
	final []int
}

// soakResp is the answer to a request.
type soakResp struct {
	Code  int
	Body  string
	Tries int
}

// route names a request in reports: method and path without the user's
// prefix or the query.
func (r soakReq) route() string {
	p, _, _ := strings.Cut(r.path, "?")
	p = strings.TrimPrefix(p, "/u/"+r.user)
	return r.method + " " + p
}

// do sends r until it is answered or the budget runs out; the error is
// errUnanswered then.
func (c *soakClient) do(r soakReq) (soakResp, error) {
	start := time.Now()
	budget := r.budget
	if budget == 0 {
		budget = soakRequestBudget
	}
	deadline := start.Add(budget)
	timeout := r.timeout
	if timeout == 0 {
		timeout = soakAttemptTimeout
	}
	for tries := 1; ; tries++ {
		t0 := time.Now()
		code, body, hdr, err := c.try(r, timeout)
		t1 := time.Now()
		retry := time.Second
		switch {
		case err != nil:
			c.ledger.fail(failure{User: r.user, Route: r.route(), Start: t0, End: t1, What: "transport: " + shortError(err)})
		case (code == http.StatusServiceUnavailable || code == http.StatusTooManyRequests) && hdr.Get("Retry-After") != "":
			c.ledger.documented(code)
			retry = retryAfter(hdr.Get("Retry-After"))
		case code >= 500 && !containsInt(r.final, code):
			c.ledger.fail(failure{User: r.user, Route: r.route(), Start: t0, End: t1, Code: code, What: fmt.Sprintf("%d %s", code, problemType(body))})
		default:
			c.ledger.answer(finalAnswer{User: r.user, Route: r.route(), Start: start, End: t1, Code: code, Tries: tries})
			return soakResp{Code: code, Body: body, Tries: tries}, nil
		}
		if time.Now().Add(retry).After(deadline) {
			c.ledger.answer(finalAnswer{User: r.user, Route: r.route(), Start: start, End: time.Now(), Tries: tries})
			return soakResp{Tries: tries}, errUnanswered
		}
		time.Sleep(retry) // the server's Retry-After, or a second after a failure
	}
}

var errUnanswered = errors.New("no answer within the soak's request budget")

func (c *soakClient) try(r soakReq, timeout time.Duration) (int, string, http.Header, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, baseURL+r.path, body)
	if err != nil {
		return 0, "", nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	if r.body != nil && r.method != "PUT" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", nil, fmt.Errorf("reading the answer (%d): %w", resp.StatusCode, err)
	}
	return resp.StatusCode, string(b), resp.Header, nil
}

// retryAfter reads a Retry-After of seconds, kept within 0.1 to 5 s.
func retryAfter(v string) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return 100 * time.Millisecond
	}
	return min(time.Duration(n)*time.Second, 5*time.Second)
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// problemType is the last part of a problem body's type, or "".
func problemType(body string) string {
	i := strings.Index(body, `"type":"`)
	if i < 0 {
		return ""
	}
	rest := body[i+len(`"type":"`):]
	rest, _, _ = strings.Cut(rest, `"`)
	return rest[strings.LastIndex(rest, "/")+1:]
}

// shortError keeps what a transport error says, without the URL.
func shortError(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && strings.Contains(s, baseURL) {
		s = s[i+2:]
	}
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}

// follow holds one event stream connection of a conversation open, resuming
// after lastID, until ctx ends or the stream does, calling entry for each
// entry event's id. It reports whether the stream ended by itself (cut) and
// records the connection in the ledger like any request.
func (c *soakClient) follow(ctx context.Context, user, token, path string, lastID int64, entry func(id int64)) (cut bool) {
	start := time.Now()
	deadline := start.Add(soakRequestBudget)
	for tries := 1; ; tries++ {
		req, _ := http.NewRequestWithContext(ctx, "GET", baseURL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "text/event-stream")
		if lastID > 0 {
			req.Header.Set("Last-Event-ID", strconv.FormatInt(lastID, 10))
		}
		route := "GET /events"
		t0 := time.Now()
		resp, err := c.stream.Do(req)
		if ctx.Err() != nil {
			if err == nil {
				resp.Body.Close()
			}
			return false
		}
		retry := time.Second
		switch {
		case err != nil:
			c.ledger.fail(failure{User: user, Route: route, Start: t0, End: time.Now(), What: "transport: " + shortError(err)})
		case (resp.StatusCode == 503 || resp.StatusCode == 429) && resp.Header.Get("Retry-After") != "":
			c.ledger.documented(resp.StatusCode)
			retry = retryAfter(resp.Header.Get("Retry-After"))
			resp.Body.Close()
		case resp.StatusCode >= 500:
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			c.ledger.fail(failure{User: user, Route: route, Start: t0, End: time.Now(), Code: resp.StatusCode, What: fmt.Sprintf("%d %s", resp.StatusCode, problemType(string(b)))})
		default:
			c.ledger.answer(finalAnswer{User: user, Route: route, Start: start, End: time.Now(), Code: resp.StatusCode, Tries: tries})
			if resp.StatusCode != 200 {
				resp.Body.Close()
				return false
			}
			why := readEvents(resp.Body, entry)
			resp.Body.Close()
			if ctx.Err() != nil {
				return false
			}
			now := time.Now()
			// The cut is when it happened, not when the stream began.
			c.ledger.fail(failure{User: user, Route: "GET /events (open stream)", Start: now.Add(-2 * time.Second), End: now, What: "stream cut: " + why})
			return true
		}
		if time.Now().Add(retry).After(deadline) {
			c.ledger.answer(finalAnswer{User: user, Route: route, Start: start, End: time.Now(), Tries: tries})
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(retry):
		}
	}
}

// readEvents reads server-sent events until the body ends, calling entry
// for every "entry" event's id; it returns why it ended.
func readEvents(body io.Reader, entry func(id int64)) string {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var id, event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event == "entry" {
				if n, err := strconv.ParseInt(id, 10, 64); err == nil {
					entry(n)
				}
			}
			if event == "error" {
				return "an error event"
			}
			id, event = "", ""
		case strings.HasPrefix(line, "id:"):
			id = strings.TrimSpace(line[3:])
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(line[6:])
		}
	}
	if err := sc.Err(); err != nil {
		return shortError(err)
	}
	return "the server ended it"
}
