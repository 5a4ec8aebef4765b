package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/registry"
)

// sandboxes maps each sandbox token to its user and address.
type sandboxes map[string]registry.Sandbox

func (s sandboxes) SandboxForToken(_ context.Context, tok string) (registry.Sandbox, error) {
	if sb, ok := s[tok]; ok {
		return sb, nil
	}
	return registry.Sandbox{}, registry.ErrUnauthenticated
}

// queue is a notification queue that knows the keys it has seen.
type queue struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (q *queue) EnqueueNotification(_ context.Context, user string, n registry.Notification, _ int) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.seen[user+"/"+n.Key] {
		return false, nil
	}
	q.seen[user+"/"+n.Key] = true
	return true, nil
}

// liveEnv is a Server with alice and bob, each with a sandbox that can
// hand notifications to the gateway.
func liveEnv(t *testing.T) (*httptest.Server, *fakeAccounts) {
	t.Helper()
	srv, _, acc := liveServer(t)
	return srv, acc
}

// liveServer is liveEnv with the Server itself.
func liveServer(t *testing.T) (*httptest.Server, *Server, *fakeAccounts) {
	t.Helper()
	acc := newFakeAccounts()
	h, _ := account.Hash("right password", cheap)
	acc.hashes["alice"], acc.hashes["bob"] = h, h
	s := &Server{
		EdgeDeps: EdgeDeps{Auth: acc, Resolver: instantResolver{}},
		GatewayDeps: GatewayDeps{Gateway: sandboxes{
			"sb-alice": {UserID: "alice", Endpoint: "10.213.0.2:8080"},
			"sb-bob":   {UserID: "bob", Endpoint: "10.213.0.6:8080"},
		}, Notifications: &queue{seen: map[string]bool{}}},
		OwnerDeps: OwnerDeps{Accounts: acc, Owners: &fakeOwners{url: map[string]string{}}, HashParams: cheap},
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv, s, acc
}

// notifyAs hands a notification to the gateway as user's sandbox.
func notifyAs(t *testing.T, srv *httptest.Server, user, ip, key, text string, kindAgent ...string) {
	t.Helper()
	body := fmt.Sprintf(`{"key":%q,"text":%q}`, key, text)
	if len(kindAgent) == 2 {
		body = fmt.Sprintf(`{"key":%q,"text":%q,"kind":%q,"agent":%q}`, key, text, kindAgent[0], kindAgent[1])
	}
	req, _ := http.NewRequest("POST", srv.URL+"/v1/gateway/notify", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer sb-"+user)
	req.Header.Set(SourceIPHeader, ip)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notify as %s: %d", user, resp.StatusCode)
	}
}

// sse is an open event stream: its events arrive on events ("name data"),
// and ended is closed when the server ends it.
type sse struct {
	events chan string
	ended  chan struct{}
}

func openEvents(t *testing.T, srv *httptest.Server, hdr map[string]string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/events", nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("GET /api/events: %d %v", resp.StatusCode, resp.Header)
	}
	s := &sse{events: make(chan string, 64), ended: make(chan struct{})}
	go func() {
		defer close(s.ended)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		name := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				s.events <- name + " " + strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return s
}

func (s *sse) next(t *testing.T) (name string, n LiveNotice) {
	t.Helper()
	select {
	case ev := <-s.events:
		name, data, _ := strings.Cut(ev, " ")
		if name == "notice" {
			if err := json.Unmarshal([]byte(data), &n); err != nil {
				t.Fatalf("notice %q: %v", data, err)
			}
		}
		return name, n
	case <-s.ended:
		t.Fatal("the stream ended")
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return "", n
}

// The owner's live stream carries their sandbox's notices at once, with
// their kind; another user's notices and a notification queued twice
// (same key) never show. Tried: bob's sandbox notifying while alice
// watches, a repeated key, no credentials.
func TestLiveStreamCarriesTheOwnersNoticesOnly(t *testing.T) {
	srv, _ := liveEnv(t)
	if resp, m := do(t, srv, call{"GET", "/api/events", "", nil}); resp.StatusCode != 401 || m["status"] == nil {
		t.Fatalf("no credentials: %d %v", resp.StatusCode, m)
	}
	resp, _ := do(t, srv, signIn("alice", "right password", nil))
	alice := openEvents(t, srv, withCookie(cookieOf(resp)))
	if name, _ := alice.next(t); name != "hello" {
		t.Fatalf("first event %q", name)
	}
	notifyAs(t, srv, "alice", "10.213.0.2", "notice-1a2b", "Your agent ops waits for your decision on approval 7", "approval", "ops")
	if name, n := alice.next(t); name != "notice" || n.Kind != "approval" || n.Agent != "ops" || !strings.Contains(n.Text, "approval 7") || n.At.IsZero() {
		t.Fatalf("alice's approval: %s %+v", name, n)
	}
	// Bob's notice, then alice's key again: neither may show; the next
	// event alice sees must be her new reminder.
	notifyAs(t, srv, "bob", "10.213.0.6", "approval-ffff", "bob's secret approval")
	notifyAs(t, srv, "alice", "10.213.0.2", "notice-1a2b", "the same notice again")
	notifyAs(t, srv, "alice", "10.213.0.2", "reminder-9c", "water the plants")
	if name, n := alice.next(t); name != "notice" || n.Kind != "reminder" || n.Text != "water the plants" {
		t.Fatalf("after bob's notice and a repeat, alice saw %s %+v", name, n)
	}
}

// A stream ends when its session does (signed out here), at its next
// heartbeat: a page left open does not go on hearing the owner's notices.
func TestLiveStreamEndsWithItsSession(t *testing.T) {
	old := liveHeartbeat
	liveHeartbeat = 20 * time.Millisecond
	t.Cleanup(func() { liveHeartbeat = old })
	srv, _ := liveEnv(t)
	resp, _ := do(t, srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)
	alice := openEvents(t, srv, withCookie(c))
	if name, _ := alice.next(t); name != "hello" {
		t.Fatalf("first event %q", name)
	}
	if resp, _ := do(t, srv, call{"POST", "/auth/sign-out", "", withCookie(c, "Content-Type", "application/json")}); resp.StatusCode >= 300 {
		t.Fatalf("sign-out: %d", resp.StatusCode)
	}
	select {
	case <-alice.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream outlived its session")
	}
}

// When the manager stops, its owners' live streams end at once (a drain
// does not wait for them) and a stream opened after ends too: the pages
// reconnect, to the next manager.
func TestLiveStreamEndsWhenTheManagerStops(t *testing.T) {
	srv, s, _ := liveServer(t)
	resp, _ := do(t, srv, signIn("alice", "right password", nil))
	c := cookieOf(resp)
	alice := openEvents(t, srv, withCookie(c))
	if name, _ := alice.next(t); name != "hello" {
		t.Fatalf("first event %q", name)
	}
	s.EndStreams()
	s.EndStreams() // twice: a second Shutdown calls it again
	for _, st := range []*sse{alice, openEvents(t, srv, withCookie(c))} {
		select {
		case <-st.ended:
		case <-time.After(10 * time.Second):
			t.Fatal("a live stream outlived the manager's stop")
		}
	}
}

func TestNoticeKinds(t *testing.T) {
	for key, want := range map[string]string{"approval-ab": "notice", "reminder-01": "reminder", "spend-limit-2026-12-03": "notice", "notice-x": "notice", "": "notice"} {
		if got := noticeKind(key); got != want {
			t.Errorf("noticeKind(%q) = %q, want %q", key, got, want)
		}
	}
}

// A sandbox cannot pose as the manager's spend stop: a key of the
// manager's ("spend-limit-<day>", taken first, would silence the real
// one) and the kind "spend" are refused, and nothing reaches the owner's
// stream.
func TestSandboxCannotTakeTheSpendStop(t *testing.T) {
	srv, _ := liveEnv(t)
	resp, _ := do(t, srv, signIn("alice", "right password", nil))
	alice := openEvents(t, srv, withCookie(cookieOf(resp)))
	if name, _ := alice.next(t); name != "hello" {
		t.Fatalf("first event %q", name)
	}
	for _, body := range []string{
		`{"key":"spend-limit-2099-01-01","text":"All is fine, ignore the next stop"}`,
		`{"key":"x1","text":"Your agent stopped","kind":"spend"}`,
	} {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/gateway/notify", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sb-alice")
		req.Header.Set(SourceIPHeader, "10.213.0.2")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != 400 {
			t.Fatalf("%s: %d", body, r.StatusCode)
		}
	}
	notifyAs(t, srv, "alice", "10.213.0.2", "reminder-ok", "water the plants")
	if name, n := alice.next(t); name != "notice" || n.Text != "water the plants" {
		t.Fatalf("the first notice alice sees: %s %+v", name, n)
	}
}

// A sandbox cannot flood its owner: past NotifyBurst notifications at once
// the gateway answers 429 with Retry-After, and the owner's stream saw
// exactly the burst. Another user's sandbox is not held up by it.
func TestNotificationsAreRateLimitedPerUser(t *testing.T) {
	srv, _ := liveEnv(t)
	send := func(user, ip, key string) *http.Response {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/gateway/notify", strings.NewReader(fmt.Sprintf(`{"key":%q,"text":"phish"}`, key)))
		req.Header.Set("Authorization", "Bearer sb-"+user)
		req.Header.Set(SourceIPHeader, ip)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r
	}
	for i := 0; i < NotifyBurst; i++ {
		if r := send("alice", "10.213.0.2", fmt.Sprintf("k%d", i)); r.StatusCode != 202 {
			t.Fatalf("notice %d: %d", i, r.StatusCode)
		}
	}
	if r := send("alice", "10.213.0.2", "one-too-many"); r.StatusCode != 429 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("past the burst: %d %v", r.StatusCode, r.Header)
	}
	if r := send("bob", "10.213.0.6", "bobs"); r.StatusCode != 202 {
		t.Fatalf("another user's sandbox: %d", r.StatusCode)
	}
}
