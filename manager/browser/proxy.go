package browser

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
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
	br := bufio.NewReader(c)
	for {
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Minute))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_ = c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			s.tunnel(ctx, user, u, c, br, req.Host)
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

func (s *Service) tunnel(ctx context.Context, user string, u *userState, c net.Conn, br *bufio.Reader, target string) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		writeStatus(c, http.StatusBadRequest, "CONNECT wants host:port")
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

func (s *Service) refuse(user string, u *userState, target string, err error) {
	msg := fmt.Sprintf("%s: %v", target, err)
	if i := strings.LastIndex(msg, ": dial tcp"); i > 0 && len(msg) > 300 {
		msg = msg[:300]
	}
	u.refused.add(msg)
	s.cfg.Log.Warn("browser proxy refused", "user", user, "target", target, "err", err)
}

func writeStatus(c net.Conn, code int, text string) {
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(text), text)
}
