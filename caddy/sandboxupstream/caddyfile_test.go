package sandboxupstream_test

// These tests run the real Caddy, in process, with caddy/Caddyfile, in front
// of a stand-in manager and two stand-in sandboxes on loopback addresses, and
// attack the route: forged endpoint and control headers, another user's
// credentials, path tricks, and a manager that answers with an address
// outside the pool.

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/affido/affido/caddy/controlkey"
	_ "github.com/affido/affido/caddy/profile"
	_ "github.com/affido/affido/caddy/resolve"
	_ "github.com/affido/affido/caddy/sandboxupstream"
	"github.com/affido/affido/internal/edgeapi"
	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/edge"
)

type stack struct {
	user, control, gateway string // Caddy listener base URLs
	manager, sbA, sbB      string // host:port of the stand-ins
	mu                     sync.Mutex
	resolves               []url.Values
	gatewayHeaders         []http.Header
	callerKeys             [][]string  // X-Affido-Caller as each request reached a sandbox or the manager
	headers                http.Header // of the last request that reached a stand-in
	managerSrv             *http.Server
	managerHandler         http.Handler
	// interpose, if set, sees every request to the stand-in manager first
	// and says whether it answered it.
	interpose func(w http.ResponseWriter, r *http.Request) bool
	// What the stand-in manager answers for carol and dave, changed by the
	// tests as a revoke, a pause or a move would: revoked tokens get 401;
	// a user's endpoint, "" for a sandbox that cannot be served (503).
	revoked   map[string]bool
	endpoints map[string]string
	// decisions is the manager's side of Caddy's decision cache, the real
	// one (manager/edge): the stand-in keeps its 200s for GETs for 5 s and
	// makes Caddy forget them on a revoke and a change of endpoint, as the
	// manager does.
	decisions *edge.Decisions
	polls     int
}

// revoke makes the stand-in manager refuse token from now on, then makes
// Caddy forget (the manager's revoke paths: commit, forget, answer).
func (s *stack) revoke(token string) {
	s.mu.Lock()
	s.revoked[token] = true
	s.mu.Unlock()
	s.decisions.Forget("")
}

// setEndpoint makes the stand-in manager answer ep for user ("": 503),
// with Caddy made to forget the old answer (as the lifecycle does before
// it takes a sandbox down).
func (s *stack) setEndpoint(user, ep string) {
	s.mu.Lock()
	s.endpoints[user] = ep
	s.mu.Unlock()
	s.decisions.Forget(user)
}

// leased waits until Caddy has polled the stand-in manager twice (it holds
// a lease, so GETs are kept from here on).
func (s *stack) leased(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		n := s.polls
		s.mu.Unlock()
		if n >= 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Caddy polled the manager %d times in 10 s", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// callerKeySeen returns the X-Affido-Caller values of the last request that
// reached a stand-in.
func (s *stack) callerKeySeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.callerKeys[len(s.callerKeys)-1]
}

func (s *stack) sawCaller(r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callerKeys = append(s.callerKeys, r.Header.Values("X-Affido-Caller"))
	s.headers = r.Header.Clone()
}

// callerKeysSeen is every request that reached a stand-in, as the caller
// keys it carried.
func (s *stack) callerKeysSeen() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.callerKeys...)
}

// lastHeaders are the headers of the last request that reached a stand-in.
func (s *stack) lastHeaders() http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.headers
}

func (s *stack) resolveCalls() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.resolves...)
}

func listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	return ln
}

func freeAddr(t testing.TB, ip string) string {
	ln := listen(t, ip+":0")
	defer ln.Close()
	return ln.Addr().String()
}

func serve(t testing.TB, ln net.Listener, h http.Handler) *http.Server {
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return srv
}

func startStack(t testing.TB) *stack {
	if testing.Short() {
		t.Skip("starts Caddy")
	}
	s := &stack{revoked: map[string]bool{}, endpoints: map[string]string{}, decisions: edge.New(func(edgeapi.Touch) {})}
	for name, ip := range map[string]string{"A": "127.0.1.2", "B": "127.0.1.3"} {
		ln := listen(t, ip+":0")
		if name == "A" {
			s.sbA = ln.Addr().String()
		} else {
			s.sbB = ln.Addr().String()
		}
		serve(t, ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.sawCaller(r)
			if r.URL.Path == "/hostile-headers" { // a sandbox trying to act on the site's origin
				w.Header().Add("Set-Cookie", "better-auth.session_token=planted; Path=/")
				w.Header().Set("Clear-Site-Data", `"cookies"`)
				w.Header().Set("Access-Control-Allow-Origin", "*")
				w.Header().Set("Access-Control-Allow-Credentials", "true")
				w.Header().Set("Service-Worker-Allowed", "/")
				w.Header().Set("Content-Security-Policy", "default-src *")
				w.Header().Set("Content-Type", "text/html")
				fmt.Fprint(w, "<script>steal()</script>")
				return
			}
			fmt.Fprintf(w, "sandbox %s path=%s cookie=%q auth=%q endpoint=%q control=%q", name, r.URL.Path,
				r.Header.Get("Cookie"), r.Header.Get("Authorization"), r.Header.Get("X-Sandbox-Endpoint"), r.Header.Values("X-Affido-Control"))
		}))
	}
	mln := listen(t, "127.0.0.1:0")
	s.manager = mln.Addr().String()
	s.managerHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == edgeapi.PollPath {
			var p edgeapi.Poll
			if r.Header.Get(sandboxapi.HeaderControlKey) != controlKey || json.NewDecoder(r.Body).Decode(&p) != nil {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			a := s.decisions.Poll(p, r.Context().Done())
			s.mu.Lock()
			s.polls++
			s.mu.Unlock()
			_ = json.NewEncoder(w).Encode(a)
			return
		}
		s.mu.Lock()
		interpose := s.interpose
		s.mu.Unlock()
		if interpose != nil && interpose(w, r) {
			return
		}
		s.sawCaller(r)
		if strings.HasPrefix(r.URL.Path, "/v1/gateway/") {
			s.mu.Lock()
			s.gatewayHeaders = append(s.gatewayHeaders, r.Header.Clone())
			s.mu.Unlock()
			fmt.Fprintf(w, "gateway source=%s", r.Header.Get("X-Affido-Source-Ip"))
			return
		}
		if r.URL.Path != "/v1/resolve" {
			fmt.Fprintf(w, "manager %s", r.URL.Path)
			return
		}
		q := r.URL.Query()
		s.mu.Lock()
		s.resolves = append(s.resolves, q)
		s.mu.Unlock()
		tokens := map[string]string{"a-token": "alice", "b-token": "bob", "n-token": "nohdr", "e-token": "evil", "c-token": "carol", "d-token": "dave"}
		c, err := r.Cookie("better-auth.session_token")
		s.mu.Lock()
		revoked := err == nil && s.revoked[c.Value]
		ep, moving := s.endpoints[q.Get("user")]
		s.mu.Unlock()
		if err != nil || tokens[c.Value] == "" || revoked {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if tokens[c.Value] != q.Get("user") {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		if moving && ep == "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		switch q.Get("user") {
		case "carol", "dave":
			w.Header().Set("X-Sandbox-Endpoint", ep)
		case "alice":
			w.Header().Set("X-Sandbox-Endpoint", s.sbA)
		case "bob":
			w.Header().Set("X-Sandbox-Endpoint", s.sbB)
		case "evil": // a compromised manager answer: the manager itself
			w.Header().Set("X-Sandbox-Endpoint", s.manager)
		}
		if m := r.Header.Get("X-Forwarded-Method"); m == "GET" || m == "HEAD" {
			w.Header().Set(edgeapi.TTLHeader, "5000")
		}
		w.WriteHeader(http.StatusOK)
	})
	s.managerSrv = serve(t, mln, s.managerHandler)

	src, err := os.ReadFile("../Caddyfile")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("AFFIDO_CADDY_IP", "127.0.0.1")
	t.Setenv("AFFIDO_MANAGER", s.manager)
	t.Setenv("AFFIDO_SANDBOX_POOL", "127.0.1.0/24")
	t.Setenv("AFFIDO_CALLER_KEY", callerKey) // as on Kubernetes; Docker leaves it empty
	t.Setenv("AFFIDO_CONTROL_KEY", controlKey)
	adapter := caddyconfig.GetAdapter("caddyfile")
	cfgJSON, _, err := adapter.Adapt(src, nil)
	if err != nil {
		t.Fatalf("adapt Caddyfile: %v", err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["admin"] = map[string]any{"disabled": true, "config": map[string]any{"persist": false}}
	cfg["logging"] = map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}}
	servers := cfg["apps"].(map[string]any)["http"].(map[string]any)["servers"].(map[string]any)
	addrs := map[string]*string{"srv0": &s.user, "srv1": &s.control, "srv2": &s.gateway}
	for name, dst := range addrs {
		a := freeAddr(t, "127.0.0.1")
		servers[name].(map[string]any)["listen"] = []string{a}
		*dst = "http://" + a
	}
	out, _ := json.Marshal(cfg)
	if err := caddy.Load(out, true); err != nil {
		t.Fatalf("load config: %v", err)
	}
	t.Cleanup(func() { _ = caddy.Stop() })
	s.leased(t)
	return s
}

// callerKey is the key Caddy sends sandboxes in the tests.
const callerKey = "0123456789abcdef0123456789abcdef-caller"

// controlKey is the manager's key for the control listener in the tests;
// control is the header that carries it.
const controlKey = "fedcba9876543210fedcba9876543210-control"

var control = map[string]string{"X-Affido-Control-Key": controlKey}

// with returns h plus the control key.
func with(h map[string]string) map[string]string {
	out := map[string]string{"X-Affido-Control-Key": controlKey}
	for k, v := range h {
		out[k] = v
	}
	return out
}

func get(t *testing.T, rawURL string, hdr map[string]string) (int, string) {
	t.Helper()
	return send(t, "GET", rawURL, hdr)
}

func send(t *testing.T, method, rawURL string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Send the path exactly as written, without Go cleaning it.
	if u, err := url.Parse(rawURL); err == nil {
		req.URL.Opaque = u.EscapedPath()
		req.URL.Opaque = "//" + u.Host + u.EscapedPath()
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestCaddyRoute(t *testing.T) {
	s := startStack(t)
	alice := map[string]string{"Cookie": "better-auth.session_token=a-token"}

	t.Run("owner reaches own sandbox, prefix stripped, credentials not forwarded", func(t *testing.T) {
		code, body := get(t, s.user+"/u/alice/health", alice)
		if code != 200 || !strings.HasPrefix(body, "sandbox A path=/health ") {
			t.Fatalf("got %d %q", code, body)
		}
		if !strings.Contains(body, `cookie=""`) || !strings.Contains(body, `auth=""`) {
			t.Fatalf("credentials reached the sandbox: %q", body)
		}
	})

	t.Run("forged X-Sandbox-Endpoint never changes the dial", func(t *testing.T) {
		for _, forged := range []string{s.sbB, "sandbox-manager:9090", "unix//var/run/docker.sock", s.manager, "127.0.0.1:2019", "10.0.0.1:80"} {
			h := map[string]string{"Cookie": alice["Cookie"], "X-Sandbox-Endpoint": forged}
			code, body := get(t, s.user+"/u/alice/x", h)
			if code != 200 || !strings.HasPrefix(body, "sandbox A path=/x ") || !strings.Contains(body, `endpoint=""`) {
				t.Errorf("forged %q: got %d %q", forged, code, body)
			}
			// Without credentials the forged header must not get anywhere either.
			code, body = get(t, s.user+"/u/alice/x", map[string]string{"X-Sandbox-Endpoint": forged})
			if code != 401 {
				t.Errorf("forged %q without credentials: got %d %q", forged, code, body)
			}
		}
	})

	t.Run("a client's X-Affido-Control never reaches the sandbox", func(t *testing.T) {
		for _, forged := range []string{"1", "true", "0"} {
			h := map[string]string{"Cookie": alice["Cookie"], "X-Affido-Control": forged}
			for _, method := range []string{"GET", "POST"} {
				code, body := send(t, method, s.user+"/u/alice/claim", h)
				if code != 200 || !strings.HasPrefix(body, "sandbox A path=/claim ") || !strings.HasSuffix(body, "control=[]") {
					t.Errorf("%s with X-Affido-Control %q: got %d %q", method, forged, code, body)
				}
			}
		}
	})

	// The agent's API answers only this key where Caddy's address is not
	// fixed (Kubernetes): Caddy sends its own on both listeners, whatever
	// the client sent, and a client's never reaches the manager.
	t.Run("the caller key reaches sandboxes from Caddy alone", func(t *testing.T) {
		for _, forged := range []string{"", "guess", callerKey + "x"} {
			h := map[string]string{"Cookie": alice["Cookie"]}
			if forged != "" {
				h["X-Affido-Caller"] = forged
			}
			code, body := get(t, s.user+"/u/alice/status", h)
			if got := s.callerKeySeen(); code != 200 || !strings.HasPrefix(body, "sandbox A path=/status ") || len(got) != 1 || got[0] != callerKey {
				t.Errorf("user route, client sent %q: %d %q, sandbox saw %q", forged, code, body, got)
			}
			code, body = send(t, "POST", s.control+"/_sandbox/"+s.sbA+"/wake", with(map[string]string{"X-Affido-Caller": forged}))
			if got := s.callerKeySeen(); code != 200 || len(got) != 1 || got[0] != callerKey {
				t.Errorf("control route, client sent %q: %d %q, sandbox saw %q", forged, code, body, got)
			}
			if forged == "" {
				continue
			}
			// Without credentials the request ends at the manager's
			// resolve, which must not see the key a client sent either.
			if code, _ := get(t, s.user+"/u/alice/status", map[string]string{"X-Affido-Caller": forged}); code != 401 {
				t.Errorf("no credentials, client sent %q: %d", forged, code)
			}
			if got := s.callerKeySeen(); len(got) != 0 {
				t.Errorf("the manager saw the client's caller key %q", got)
			}
		}
	})

	t.Run("another user's credentials are refused", func(t *testing.T) {
		if code, body := get(t, s.user+"/u/bob/health", alice); code != 403 {
			t.Fatalf("got %d %q", code, body)
		}
		// The cleaned path decides the user: alice's path walking to bob's.
		if code, body := get(t, s.user+"/u/alice/../bob/health", alice); code != 403 {
			t.Fatalf("dot-dot: got %d %q", code, body)
		}
	})

	t.Run("a 200 without an endpoint, or with one outside the pool, dials nothing", func(t *testing.T) {
		for _, tok := range []string{"n-token", "e-token"} {
			user := map[string]string{"n-token": "nohdr", "e-token": "evil"}[tok]
			h := map[string]string{"Cookie": "better-auth.session_token=" + tok, "X-Sandbox-Endpoint": s.sbB}
			code, body := get(t, s.user+"/u/"+user+"/x", h)
			if code < 500 || strings.Contains(body, "sandbox") || strings.Contains(body, "manager") {
				t.Errorf("%s: got %d %q", user, code, body)
			}
		}
	})

	t.Run("a sandbox's answer cannot set cookies, site data, CORS or scripts on the origin", func(t *testing.T) {
		req, _ := http.NewRequest("GET", s.user+"/u/alice/hostile-headers", nil)
		req.Header.Set("Cookie", "better-auth.session_token=a-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, h := range []string{"Set-Cookie", "Clear-Site-Data", "Access-Control-Allow-Origin", "Access-Control-Allow-Credentials", "Service-Worker-Allowed"} {
			if v := resp.Header.Get(h); v != "" {
				t.Errorf("%s passed through: %q", h, v)
			}
		}
		if csp := resp.Header.Values("Content-Security-Policy"); len(csp) != 1 || !strings.HasPrefix(csp[0], "sandbox") {
			t.Errorf("Content-Security-Policy %q, want only Caddy's sandbox policy", csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("no nosniff")
		}
	})

	t.Run("bad user ids never reach the manager", func(t *testing.T) {
		before := len(s.resolveCalls())
		for _, p := range []string{"/u/a.b/health", "/u/%2e%2e/health", "/u/" + strings.Repeat("x", 65) + "/health", "/u/a%20b/health", "/u/%2E%2E%2Fbob/health"} {
			if code, body := get(t, s.user+p, alice); code != 404 && code != 400 {
				t.Errorf("%s: got %d %q", p, code, body)
			}
		}
		if n := len(s.resolveCalls()); n != before {
			t.Fatalf("manager was called %d times for bad ids", n-before)
		}
	})

	t.Run("query injection through the path stays in the path parameter", func(t *testing.T) {
		s.decisions.Forget("alice") // so that the manager is asked, not Caddy's kept answer
		get(t, s.user+"/u/alice/x%26user=bob", alice)
		calls := s.resolveCalls()
		last := calls[len(calls)-1]
		if last.Get("user") != "alice" || len(last["user"]) != 1 || last.Get("path") != "/x&user=bob" {
			t.Fatalf("resolve query = %v", last)
		}
	})

	t.Run("manager routes and 404 elsewhere", func(t *testing.T) {
		if code, body := get(t, s.user+"/app/", nil); code != 200 || body != "manager /app/" {
			t.Errorf("/app/: %d %q", code, body)
		}
		if code, _ := get(t, s.user+"/v1/resolve?user=alice", alice); code != 404 {
			t.Errorf("/v1/resolve on the user listener: %d", code)
		}
		if code, _ := get(t, s.user+"/v1/gateway/whoami", nil); code != 404 {
			t.Errorf("gateway route on the user listener: %d", code)
		}
	})

	t.Run("gateway listener forwards only gateway routes, with a source address it sets", func(t *testing.T) {
		code, body := get(t, s.gateway+"/v1/gateway/whoami", map[string]string{"X-Affido-Source-Ip": "127.0.1.3"})
		if code != 200 || body != "gateway source=127.0.0.1" {
			t.Fatalf("got %d %q", code, body)
		}
		for _, p := range []string{"/u/alice/health", "/v1/resolve?user=alice", "/app/", "/metrics"} {
			if code, body := get(t, s.gateway+p, alice); code != 404 {
				t.Errorf("%s on the gateway listener: %d %q", p, code, body)
			}
		}
	})

	t.Run("sandbox control listener marks its requests as control, whatever the client sent", func(t *testing.T) {
		for _, sent := range []map[string]string{control, with(map[string]string{"X-Affido-Control": "0"})} {
			code, body := send(t, "POST", s.control+"/_sandbox/"+s.sbA+"/claim", sent)
			if code != 200 || !strings.HasPrefix(body, "sandbox A path=/claim ") || !strings.HasSuffix(body, `control=["1"]`) {
				t.Errorf("sent %v: got %d %q", sent, code, body)
			}
		}
	})

	t.Run("sandbox control listener reaches pool addresses only", func(t *testing.T) {
		if code, body := get(t, s.control+"/_sandbox/"+s.sbB+"/health", control); code != 200 || !strings.HasPrefix(body, "sandbox B path=/health") {
			t.Fatalf("pool address: %d %q", code, body)
		}
		if code, body := get(t, s.control+"/_sandbox/"+s.manager+"/v1/resolve", control); code < 500 || strings.Contains(body, "manager") {
			t.Fatalf("manager address: %d %q", code, body)
		}
	})

	// The attack (issue 28): anything that reaches the control network
	// (a local user of a shared host, a pod) asked another user's agent for
	// its rules, inspect, prompt and claim routes through Caddy, which
	// added the control header and connected from the address the agent
	// trusts. Only the manager's key opens the listener now.
	t.Run("sandbox control listener refuses callers without the manager's key", func(t *testing.T) {
		for _, h := range []map[string]string{nil, {"X-Affido-Control-Key": ""}, {"X-Affido-Control-Key": "guess"},
			{"X-Affido-Control-Key": controlKey + "x"}, {"X-Affido-Control-Key": controlKey[:len(controlKey)-1]},
			{"X-Affido-Control": "1", "X-Affido-Caller": callerKey}} {
			for _, p := range []string{"/_sandbox/" + s.sbB + "/rules", "/_sandbox/" + s.sbB + "/inspect", "/_sandbox/" + s.sbA + "/claim", "/nothing"} {
				before := len(s.callerKeysSeen())
				code, body := send(t, "POST", s.control+p, h)
				if code != 401 || !strings.Contains(body, `"status":401`) || len(s.callerKeysSeen()) != before {
					t.Errorf("%s with %v: %d %q (and %d requests reached a stand-in)", p, h, code, body, len(s.callerKeysSeen())-before)
				}
			}
		}
	})

	t.Run("the control key never reaches an agent", func(t *testing.T) {
		if code, body := send(t, "POST", s.control+"/_sandbox/"+s.sbA+"/echo-headers", control); code != 200 {
			t.Fatalf("%d %q", code, body)
		}
		if got := s.lastHeaders().Get("X-Affido-Control-Key"); got != "" {
			t.Fatalf("the agent saw the control key %q", got)
		}
	})

	// Issue 30: however warm the path, the edge takes no decision the
	// manager no longer gives. These pass with forward_auth asking the
	// manager every time; a decision cache at the edge must keep them.
	// warmThen sends 20 requests for user (each answered by sandbox A),
	// calls change, and wants the next request answered want by the
	// manager alone: no sandbox reached.
	warmThen := func(t *testing.T, user string, hdr map[string]string, change func(), want int) {
		t.Helper()
		s.setEndpoint(user, s.sbA)
		for i := range 20 {
			if code, body := get(t, s.user+"/u/"+user+"/health", hdr); code != 200 || !strings.HasPrefix(body, "sandbox A") {
				t.Fatalf("warm request %d: %d %q", i, code, body)
			}
		}
		change()
		before := len(s.callerKeysSeen())
		if code, body := get(t, s.user+"/u/"+user+"/health", hdr); code != want || strings.Contains(body, "sandbox") {
			t.Fatalf("the next request: %d %q, want %d", code, body, want)
		}
		if seen := s.callerKeysSeen(); len(seen) != before+1 {
			t.Fatalf("%d requests reached a stand-in, want the manager's one", len(seen)-before)
		}
	}
	t.Run("warm GETs are answered from the kept decision, writes ask the manager every time", func(t *testing.T) {
		s.decisions.Forget("alice")
		before := len(s.resolveCalls())
		for i := range 10 {
			if code, body := get(t, s.user+"/u/alice/health", alice); code != 200 || !strings.HasPrefix(body, "sandbox A") {
				t.Fatalf("GET %d: %d %q", i, code, body)
			}
		}
		if n := len(s.resolveCalls()) - before; n != 1 {
			t.Fatalf("10 warm GETs asked the manager %d times, want once", n)
		}
		before = len(s.resolveCalls())
		for i := range 3 {
			if code, body := send(t, "POST", s.user+"/u/alice/health", alice); code != 200 || !strings.HasPrefix(body, "sandbox A") {
				t.Fatalf("POST %d: %d %q", i, code, body)
			}
		}
		if n := len(s.resolveCalls()) - before; n != 3 {
			t.Fatalf("3 POSTs asked the manager %d times, want every time", n)
		}
		// A Connection header naming a header drops it before the manager
		// sees it: the headers as sent are not what was decided on.
		before = len(s.resolveCalls())
		for range 3 {
			get(t, s.user+"/u/alice/health", map[string]string{"Cookie": alice["Cookie"], "Authorization": "Bearer junk", "Connection": "Authorization"})
		}
		if n := len(s.resolveCalls()) - before; n != 3 {
			t.Fatalf("3 GETs naming a header in Connection asked the manager %d times, want every time", n)
		}
	})
	t.Run("a revoked credential is refused on the next request, however warm", func(t *testing.T) {
		warmThen(t, "carol", map[string]string{"Cookie": "better-auth.session_token=c-token"}, func() { s.revoke("c-token") }, 401)
	})
	t.Run("a sandbox the manager stops serving or moves is never dialled from a stale decision", func(t *testing.T) {
		dave := map[string]string{"Cookie": "better-auth.session_token=d-token"}
		// Paused, stopped or removed, and not brought back.
		warmThen(t, "dave", dave, func() { s.setEndpoint("dave", "") }, 503)
		s.setEndpoint("dave", s.sbB) // brought back at another address
		if code, body := get(t, s.user+"/u/dave/health", dave); code != 200 || !strings.HasPrefix(body, "sandbox B") {
			t.Fatalf("the next request after the move: %d %q", code, body)
		}
	})

	// Profiles show what Caddy does with every user's requests: only the
	// manager's key opens them, on the control listener; a client (the user
	// listener) and a sandbox (the gateway listener, the only one on a user
	// network) get nothing.
	t.Run("profiles answer the manager's key on the control listener only", func(t *testing.T) {
		for _, p := range []string{"/_profile/cpu?seconds=1", "/_profile/trace?seconds=1", "/debug/pprof/", "/debug/pprof/profile?seconds=1"} {
			for _, c := range []struct {
				base string
				hdr  map[string]string
				want int
			}{
				{s.user, control, 404},
				{s.gateway, control, 404},
				{s.control, nil, 401},
				{s.control, map[string]string{"X-Affido-Control-Key": "guess"}, 401},
			} {
				if code, body := get(t, c.base+p, c.hdr); code != c.want {
					t.Errorf("%s%s with %v: %d %.100q, want %d", c.base, p, c.hdr, code, body, c.want)
				}
			}
		}
		code, body := get(t, s.control+"/_profile/block?seconds=1", control)
		if code != 200 || len(body) == 0 {
			t.Fatalf("the manager's key: %d %.100q", code, body)
		}
		if code, _ := get(t, s.control+"/debug/pprof/", control); code != 404 {
			t.Errorf("/debug/pprof/ on the control listener: %d, want 404", code)
		}
	})
}
