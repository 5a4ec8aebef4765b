package browser

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/affido/affido/manager/outbound"
)

// hopHeaders are a proxied request's headers meant for the proxy alone.
var hopHeaders = []string{"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate", "Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// serveProxy serves one connection Chromium made to its proxy: a CONNECT
// (https and WebSockets) is a tunnel to an address the guard allows; a
// plain http request is sent with the guarded transport, which follows no
// redirect (Chromium follows it, through here again). What the guard
// refuses is answered 403, logged and counted for the user.
func (s *Service) serveProxy(ctx context.Context, user string, u *userState, c net.Conn) {
	defer c.Close()
	// A request's head is bounded (a compromised sandbox could send a
	// header of any size); its body and a tunnel are not.
	lr := &io.LimitedReader{R: c, N: maxHead}
	br := bufio.NewReader(lr)
	for {
		lr.N = maxHead
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		lr.N = math.MaxInt64
		if req.Method == http.MethodConnect {
			s.tunnel(ctx, user, u, c, br, req.Host)
			return
		}
		if _, port, err := net.SplitHostPort(req.URL.Host); err == nil && mailPorts[port] {
			writeStatus(c, http.StatusForbidden, "refused: port "+port)
			return
		}
		if req.URL.Scheme != "http" || req.URL.Host == "" {
			writeStatus(c, http.StatusBadRequest, "the proxy takes absolute http URLs and CONNECT only")
			return
		}
		for _, h := range hopHeaders {
			req.Header.Del(h)
		}
		req.RequestURI = ""
		rctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		resp, err := s.cfg.Transport.RoundTrip(req.WithContext(rctx))
		if err != nil {
			cancel()
			s.refuse(user, u, req.URL.Host, err)
			writeStatus(c, http.StatusForbidden, "refused: "+err.Error())
			return
		}
		for _, h := range hopHeaders {
			resp.Header.Del(h)
		}
		err = resp.Write(c)
		resp.Body.Close()
		cancel()
		if err != nil || req.Close || resp.Close {
			return
		}
	}
}

// maxHead bounds a proxied request's line and headers.
const maxHead = 64 << 10

// tunnelPorts are the ports a CONNECT may reach: https, and the http and
// https alternates pages use for WebSockets.
var tunnelPorts = map[string]bool{"443": true, "80": true, "8443": true, "8080": true}

// mailPorts are refused to plain requests too: an HTTP request sent to a
// mail or shell server is a cross-protocol attack, not a page.
var mailPorts = map[string]bool{"21": true, "22": true, "23": true, "25": true, "110": true, "143": true, "465": true, "587": true, "993": true, "995": true}

func (s *Service) tunnel(ctx context.Context, user string, u *userState, c net.Conn, br *bufio.Reader, target string) {
	_, port, err := net.SplitHostPort(target)
	if err != nil {
		writeStatus(c, http.StatusBadRequest, "CONNECT wants host:port")
		return
	}
	if !tunnelPorts[port] && !s.cfg.TunnelPorts[port] {
		writeStatus(c, http.StatusForbidden, "refused: tunnels go to ports 443, 80, 8443 and 8080 only")
		return
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	up, err := s.cfg.Dial(dctx, "tcp", target)
	cancel()
	if err != nil {
		s.refuse(user, u, target, err)
		writeStatus(c, http.StatusForbidden, "refused: "+err.Error())
		return
	}
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection Established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, br); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// refuse records a connection the proxy did not make. Only the guard's
// refusals (an address the browser may not reach) are counted and logged
// as such, once a second per user at most; a name that does not resolve
// or a site that does not answer is the web's business.
func (s *Service) refuse(user string, u *userState, target string, err error) {
	if !errors.Is(err, outbound.ErrRefused) {
		s.cfg.Log.Debug("browser proxy could not connect", "user", user, "target", target, "err", err)
		return
	}
	addr := target
	if i := strings.Index(err.Error(), outbound.ErrRefused.Error()+": "); i >= 0 {
		addr = strings.Fields(err.Error()[i+len(outbound.ErrRefused.Error())+2:])[0]
	}
	if len(target) > 100 {
		target = target[:100]
	}
	if u.refused.add(addr) {
		s.cfg.Log.Warn("browser proxy refused", "user", user, "target", target, "addr", addr)
	}
}

func writeStatus(c net.Conn, code int, text string) {
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(text), text)
}
