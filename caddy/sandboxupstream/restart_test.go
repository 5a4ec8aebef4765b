package sandboxupstream_test

// The manager restarting behind the real Caddyfile: requests that arrive
// while nothing listens, and resolves the stopping manager hands off, get a
// late answer from the next manager instead of a 502.

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

type result struct {
	code int
	body string
	took time.Duration
}

// sendAsync sends one request through Caddy and reports its answer.
func sendAsync(t *testing.T, method, url, body string, hdr map[string]string) <-chan result {
	out := make(chan result, 1)
	go func() {
		start := time.Now()
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			out <- result{body: err.Error()}
			return
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- result{body: err.Error(), took: time.Since(start)}
			return
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		out <- result{resp.StatusCode, b.String(), time.Since(start)}
	}()
	return out
}

// While the manager is down for 2 s, a sandbox request (its resolve),
// a web client POST and a sandbox's model call (a POST through the gateway
// listener) are each answered by the manager that comes back: none gets a
// 502.
func TestRequestsWaitForARestartingManager(t *testing.T) {
	s := startStack(t)
	alice := map[string]string{"Cookie": "better-auth.session_token=a-token"}
	if code, body := get(t, s.user+"/u/alice/warm", alice); code != 200 {
		t.Fatalf("before the restart: %d %s", code, body)
	}
	const down = 2 * time.Second
	if err := s.managerSrv.Close(); err != nil {
		t.Fatal(err)
	}
	// A POST: a GET could be answered from the decision Caddy keeps, which
	// is right (nothing is revoked while the manager is down) but not
	// what is under test.
	sandbox := sendAsync(t, "POST", s.user+"/u/alice/during", "", alice)
	api := sendAsync(t, "POST", s.user+"/api/tokens", `{"name":"x"}`, alice)
	model := sendAsync(t, "POST", s.gateway+"/v1/gateway/chat/completions", `{"model":"fake/echo"}`, nil)
	time.Sleep(down) // the outage under test
	ln, err := net.Listen("tcp", s.manager)
	if err != nil {
		t.Fatalf("listen again on %s: %v", s.manager, err)
	}
	s.managerSrv = serve(t, ln, s.managerHandler)

	for name, want := range map[string]struct {
		got  <-chan result
		body string
	}{
		"sandbox POST":       {sandbox, "sandbox A path=/during"},
		"web client POST":    {api, "manager /api/tokens"},
		"gateway model POST": {model, "gateway source="},
	} {
		r := <-want.got
		if r.code != 200 || !strings.Contains(r.body, want.body) {
			t.Errorf("%s: %d %q, want 200 with %q", name, r.code, r.body, want.body)
		}
		if r.took < down-200*time.Millisecond {
			t.Errorf("%s: answered after %v, before the manager was back", name, r.took)
		}
	}
}

// A resolve the stopping manager hands off (503 with X-Affido-Retry) is
// asked again, and the answer of the manager that comes back reaches the
// client; any other 503 (a sandbox still starting) goes to the client at
// once, Retry-After and all, without Caddy asking again.
func TestHandedOffResolveIsAskedAgain(t *testing.T) {
	s := startStack(t)
	alice := map[string]string{"Cookie": "better-auth.session_token=a-token"}
	var handoffs, queued atomic.Int32
	s.mu.Lock()
	s.interpose = func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/v1/resolve" {
			return false
		}
		switch {
		case strings.HasPrefix(r.URL.Query().Get("path"), "/handoff") && handoffs.Add(1) <= 3:
			w.Header().Set("X-Affido-Retry", "1")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		case r.URL.Query().Get("path") == "/queued":
			queued.Add(1)
			w.Header().Set("Retry-After", "7")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"title":"sandbox-starting"}`))
			return true
		}
		return false
	}
	s.mu.Unlock()

	r := <-sendAsync(t, "GET", s.user+"/u/alice/handoff", "", alice)
	if r.code != 200 || !strings.Contains(r.body, "sandbox A path=/handoff") || handoffs.Load() != 4 {
		t.Fatalf("handed-off resolve: %d %q after %d resolves, want 200 from the sandbox after 4", r.code, r.body, handoffs.Load())
	}
	s.decisions.Forget("alice") // her sandbox went down: Caddy keeps nothing of it
	req, _ := http.NewRequest("GET", s.user+"/u/alice/queued", nil)
	req.Header.Set("Cookie", alice["Cookie"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "7" || queued.Load() != 1 {
		t.Fatalf("a sandbox still starting: %d Retry-After %q after %d resolves, want 503, 7, 1",
			resp.StatusCode, resp.Header.Get("Retry-After"), queued.Load())
	}
}
