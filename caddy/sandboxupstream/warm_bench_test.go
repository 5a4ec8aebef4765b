package sandboxupstream_test

import (
	"io"
	"net/http"
	"testing"
)

// BenchmarkWarmRoute splits the warm request's cost at the edge, in
// process, with stand-ins that answer at once: straight to the sandbox;
// through Caddy's control listener, one reverse_proxy pass through this
// module and no forward_auth; and through the user listener, the
// forward_auth pass to the manager plus the same sandbox pass. The
// difference between the last two is what forward_auth costs Caddy
// itself, before any work in the manager (BenchmarkResolveWarm in
// manager/server).
func BenchmarkWarmRoute(b *testing.B) {
	s := startStack(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, c := range []struct {
		name, url string
		hdr       map[string]string
	}{
		{"straight", "http://" + s.sbA + "/health", nil},
		{"caddy_one_pass", s.control + "/_sandbox/" + s.sbA + "/health", control},
		{"caddy_forward_auth", s.user + "/u/alice/health", map[string]string{"Cookie": "better-auth.session_token=a-token"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			req, _ := http.NewRequest("GET", c.url, nil)
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
