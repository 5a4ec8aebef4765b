package browser

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/affido/affido/manager/outbound"
)

// proxyConn serves one proxy connection from a page's browser and returns
// the browser's end of it.
func proxyConn(t *testing.T, s *Service, u *userState) (net.Conn, *bufio.Reader) {
	t.Helper()
	browserEnd, managerEnd := net.Pipe()
	go s.serveProxy(context.Background(), "alice", u, managerEnd)
	t.Cleanup(func() { browserEnd.Close() })
	_ = browserEnd.SetDeadline(time.Now().Add(10 * time.Second))
	return browserEnd, bufio.NewReader(browserEnd)
}

func testService(allow ...string) *Service {
	var cfg outbound.Config
	for _, a := range allow {
		cfg.Allow = append(cfg.Allow, netip.MustParsePrefix(a))
	}
	g := outbound.NewGuard(cfg)
	return New(Config{Dial: g.DialContext, Transport: g.Transport(5 * time.Second), Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

// What a page makes the browser ask for goes through the guard: a tunnel
// (https, WebSockets) or a plain request to a private or loopback address
// is refused with 403 and counted; a redirect is handed back to the
// browser, not followed, so its target meets the guard on its own.
func TestProxyRefusesWhatTheGuardRefuses(t *testing.T) {
	inner := "10.255.255.1"
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://"+inner+"/admin", http.StatusFound)
			return
		}
		fmt.Fprint(w, "public page")
	}))
	defer site.Close()
	s := testService("127.0.0.1/32") // the test site stands in for the public web
	u := s.user("alice")

	// The attacks: a tunnel to a private address, and one to loopback v6.
	for _, target := range []string{inner + ":443", "[::1]:443"} {
		c, r := proxyConn(t, s, u)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		// Refused by the guard before any packet left, not by the network.
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), outbound.ErrRefused.Error()) {
			t.Fatalf("CONNECT %s: %d %s, want 403 from the guard", target, resp.StatusCode, body)
		}
	}
	// A plain request whose redirect points inward: the redirect comes
	// back unfollowed, and the request the browser then makes is refused.
	c, r := proxyConn(t, s, u)
	fmt.Fprintf(c, "GET %s/redirect HTTP/1.1\r\nHost: %s\r\n\r\n", site.URL, strings.TrimPrefix(site.URL, "http://"))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "http://"+inner+"/admin" {
		t.Fatalf("redirect: %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	fmt.Fprintf(c, "GET http://%s/admin HTTP/1.1\r\nHost: %s\r\n\r\n", inner, inner)
	resp, err = http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), outbound.ErrRefused.Error()) {
		t.Fatalf("the redirect's target: %d %s, want 403 from the guard", resp.StatusCode, body)
	}
	if n, list := u.refused.since(0); n != 3 || !strings.Contains(strings.Join(list, " "), inner) {
		t.Fatalf("refusals recorded: %d %v", n, list)
	}

	// A tunnel to a port pages have no business with (mail) is refused
	// before any dial.
	c, r = proxyConn(t, s, u)
	fmt.Fprint(c, "CONNECT smtp.example.org:25 HTTP/1.1\r\nHost: smtp.example.org:25\r\n\r\n")
	if resp, err = http.ReadResponse(r, nil); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("CONNECT to port 25: %v %v", resp, err)
	}

	// What the guard allows works, tunnelled or not.
	host := strings.TrimPrefix(site.URL, "http://")
	_, port, _ := net.SplitHostPort(host)
	s.cfg.TunnelPorts = map[string]bool{port: true}
	c, r = proxyConn(t, s, u)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", host, host)
	resp, err = http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT to the site: %v %v", resp, err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	resp, err = http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if string(body) != "public page" {
		t.Fatalf("through the tunnel: %q", body)
	}
}

// Bad browser requests are refused before a sandbox is made.
func TestBadRequestsMakeNothing(t *testing.T) {
	eng := &countingEngine{}
	s := New(Config{Engine: eng})
	for _, req := range []struct{ action, url, sel string }{
		{"open", "file:///etc/passwd", ""},
		{"open", "javascript:alert(1)", ""},
		{"open", "", ""},
		{"click", "https://example.org/", ""},
		{"type", "https://example.org/", ""},
		{"fly", "https://example.org/", "#a"},
	} {
		_, err := s.Do(context.Background(), "alice", browserReq(req.action, req.url, req.sel))
		if err == nil || !strings.Contains(err.Error(), "bad browser request") {
			t.Fatalf("%+v: %v", req, err)
		}
	}
	if eng.ups != 0 {
		t.Fatalf("bad requests brought the sandbox up %d times", eng.ups)
	}
}

// The attack from a compromised sandbox: a request head of megabytes. The
// proxy stops reading at maxHead and drops the connection, and makes no
// connection for it.
func TestProxyBoundsARequestHead(t *testing.T) {
	s := testService()
	u := s.user("alice")
	c, r := proxyConn(t, s, u)
	go func() {
		fmt.Fprint(c, "GET http://example.org/ HTTP/1.1\r\nHost: example.org\r\nX-Big: ")
		chunk := strings.Repeat("a", 64<<10)
		for range 64 { // 4 MiB, never ended
			if _, err := io.WriteString(c, chunk); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(r, nil)
	if err == nil {
		t.Fatalf("a 4 MiB head was answered: %d", resp.StatusCode)
	}
	// The proxy hung up; it did not wait for the head's end.
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("the proxy kept reading: %v", err)
	}
	if n, _ := u.refused.since(0); n != 0 {
		t.Fatalf("%d refusals recorded for a request never read", n)
	}
}
