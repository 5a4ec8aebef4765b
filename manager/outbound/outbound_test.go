package outbound_test

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/affido/affido/manager/outbound"
)

func TestGuardRefusesInwardAddresses(t *testing.T) {
	g := outbound.NewGuard(outbound.Config{
		Deny:  []netip.Prefix{netip.MustParsePrefix("11.0.0.0/16"), netip.MustParsePrefix("2a00:1::/32")}, // a pool in public space
		Allow: []netip.Prefix{netip.MustParsePrefix("10.99.0.7/32")},
	})
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1", false}, {"127.8.9.10", false}, {"::1", false},
		{"10.212.0.10", false}, {"172.16.0.1", false}, {"192.168.1.1", false},
		{"169.254.169.254", false}, {"fe80::1", false}, {"100.64.0.1", false},
		{"224.0.0.1", false}, {"ff02::1", false}, {"0.0.0.0", false}, {"::", false},
		{"fc00::1", false}, {"255.255.255.255", false},
		{"::ffff:127.0.0.1", false}, {"::ffff:10.212.0.10", false}, // IPv4-mapped: unmapped first
		{"11.0.3.4", false}, {"2a00:1::5", false}, // the configured pool
		{"10.99.0.7", true}, {"::ffff:10.99.0.7", true}, {"10.99.0.8", false}, // explicitly allowed, and only that
		{"8.8.8.8", true}, {"2606:4700::1111", true},
	} {
		err := g.Check(netip.MustParseAddr(tc.addr))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want allowed=%v", tc.addr, err, tc.ok)
		}
		if err != nil && !errors.Is(err, outbound.ErrRefused) {
			t.Errorf("%s: error %v does not wrap ErrRefused", tc.addr, err)
		}
	}
}

// server counts the requests it gets.
func server(t *testing.T, addr string, h http.HandlerFunc) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h(w, r)
	}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("listen on %s: %v", addr, err)
	}
	s.Listener = ln
	s.Start()
	t.Cleanup(s.Close)
	return s, &n
}

func ok(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }

func TestClientRefusesLoopbackByDefault(t *testing.T) {
	s, hits := server(t, "127.0.0.1:0", ok)
	c := outbound.NewClient(outbound.Config{})
	for _, u := range []string{s.URL, fmt.Sprintf("http://[::ffff:127.0.0.1]:%d", s.Listener.Addr().(*net.TCPAddr).Port)} {
		_, err := c.Post(u, "text/plain", nil)
		if !errors.Is(err, outbound.ErrRefused) {
			t.Errorf("POST %s: %v, want refused", u, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the refused server got %d requests", hits.Load())
	}
}

func TestClientChecksEveryRedirect(t *testing.T) {
	// Only 127.0.0.1 is allowed; a redirect to 127.0.0.2 (another loopback
	// address, as an admin API or a control listener would be) is refused.
	inner, innerHits := server(t, "127.0.0.2:0", ok)
	outer, _ := server(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner.URL+"/admin/session?user=victim&token=chosen", http.StatusTemporaryRedirect)
	})
	c := outbound.NewClient(outbound.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	_, err := c.Post(outer.URL, "text/plain", nil)
	if !errors.Is(err, outbound.ErrRefused) {
		t.Fatalf("redirect inward: %v, want refused", err)
	}
	if innerHits.Load() != 0 {
		t.Fatal("the redirect target was reached")
	}
}

func TestClientFollowsAtMostFiveRedirects(t *testing.T) {
	var s *httptest.Server
	s, _ = server(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		var left int
		fmt.Sscanf(r.URL.Path, "/%d", &left)
		if left == 0 {
			fmt.Fprint(w, "arrived")
			return
		}
		http.Redirect(w, r, fmt.Sprintf("%s/%d", s.URL, left-1), http.StatusFound)
	})
	c := outbound.NewClient(outbound.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	resp, err := c.Get(s.URL + "/5")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("five redirects: %v", err)
	}
	resp.Body.Close()
	if _, err := c.Get(s.URL + "/6"); !errors.Is(err, outbound.ErrTooManyRedirects) {
		t.Fatalf("six redirects: %v, want ErrTooManyRedirects", err)
	}
}

func TestClientIgnoresProxyEnvironment(t *testing.T) {
	proxy, proxyHits := server(t, "127.0.0.1:0", ok)
	target, targetHits := server(t, "127.0.0.1:0", ok)
	t.Setenv("HTTP_PROXY", proxy.URL)
	t.Setenv("http_proxy", proxy.URL)
	c := outbound.NewClient(outbound.Config{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	resp, err := c.Get(target.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if proxyHits.Load() != 0 || targetHits.Load() != 1 {
		t.Fatalf("proxy %d, target %d requests", proxyHits.Load(), targetHits.Load())
	}
}

func TestCheckURL(t *testing.T) {
	g := outbound.NewGuard(outbound.Config{Allow: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}})
	for _, c := range []struct {
		url  string
		want error
	}{
		{"http://192.0.2.7:9999/topic", nil},
		{"https://[2001:4860:4860::8888]/x", nil},
		{"http://127.0.0.1/x", outbound.ErrRefused},
		{"http://localhost/x", outbound.ErrRefused},
		{"http://10.0.0.1/x", outbound.ErrRefused},
		{"http://[::ffff:127.0.0.1]/x", outbound.ErrRefused},
		{"ftp://192.0.2.7/x", outbound.ErrBadURL},
		{"/relative", outbound.ErrBadURL},
		{"http:///nohost", outbound.ErrBadURL},
	} {
		err := g.CheckURL(t.Context(), c.url)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.url, err, c.want)
		}
	}
}
