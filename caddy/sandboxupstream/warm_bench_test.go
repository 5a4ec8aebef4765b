package sandboxupstream_test

import (
	"io"
	"net/http"
	"testing"
)

// BenchmarkWarmRoute splits the warm request's cost at the edge, in
// process, with stand-ins that answer at once: straight to the sandbox;
// through Caddy's control listener, one reverse_proxy pass through this
// module and no resolve; through the user listener with the manager's
// answer kept (caddy/resolve, the warm path); and through the user
// listener asking the manager every time (a POST is never kept): the
// resolve pass plus the same sandbox pass. The difference between the
// last two is what asking the manager costs Caddy itself, before any work
// in the manager (BenchmarkResolveWarm in manager/server).
func BenchmarkWarmRoute(b *testing.B) {
	s := startStack(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, c := range []struct {
		name, url string
		hdr       map[string]string
	}{
		{"straight", "http://" + s.sbA + "/health", nil},
		{"caddy_one_pass", s.control + "/_sandbox/" + s.sbA + "/health", control},
		{"caddy_kept", s.user + "/u/alice/health", map[string]string{"Cookie": "better-auth.session_token=a-token"}},
		{"caddy_asks_manager", s.user + "/u/alice/health", map[string]string{"Cookie": "better-auth.session_token=a-token", "X-Post": "1"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			method := "GET"
			if c.hdr["X-Post"] != "" {
				method = "POST"
			}
			req, _ := http.NewRequest(method, c.url, nil)
			for k, v := range c.hdr {
				req.Header.Set(k, v)
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("%s: %d", c.url, resp.StatusCode)
				}
			}
		})
	}
}
