package server

import (
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// ErrCrossSite is returned for a state-changing request that carries the
// session cookie but may have been sent by another site's page.
var ErrCrossSite = errors.New("cross-site request")

// crossOrigin is Go's own check (net/http.CrossOriginProtection): safe
// methods pass; otherwise Sec-Fetch-Site must be same-origin or none, or,
// without it, an Origin header must name the host the request came to. A
// request with neither header is not from a browser and passes.
var crossOrigin = http.NewCrossOriginProtection()

// checkCookieWrite decides whether a request authenticated by the session
// cookie may run. Caddy's forward_auth sends every request to /v1/resolve as
// a GET, with the original method in X-Forwarded-Method and the original
// host in X-Forwarded-Host; the client's own headers (Origin, Sec-Fetch-Site,
// Content-Type) pass through unchanged. A state-changing request must come
// from this origin and, unless it uploads bytes (PUT /uploads/…, POST
// /ingest), say Content-Type: application/json, which no HTML form can send.
// Bearer-token requests never reach this check: no other site can make a
// browser attach that header. method is the client's: X-Forwarded-Method on
// /v1/resolve (forwardedMethod), the request's own on the manager's routes.
func checkCookieWrite(r *http.Request, method, agentPath string) error {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	orig := &http.Request{Method: method, Host: requestHost(r), Header: r.Header}
	if err := crossOrigin.Check(orig); err != nil {
		return fmt.Errorf("%w: %v", ErrCrossSite, err)
	}
	upload := (method == http.MethodPut && strings.HasPrefix(agentPath, "/uploads/")) ||
		(method == http.MethodPost && agentPath == "/ingest")
	if upload {
		return nil
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return fmt.Errorf("%w: a %s authenticated by the session cookie must send Content-Type: application/json", ErrCrossSite, method)
	}
	return nil
}

// forwardedMethod is the method of the request Caddy's forward_auth asks
// about (it sends every check as a GET).
func forwardedMethod(r *http.Request) string {
	if m := r.Header.Get("X-Forwarded-Method"); m != "" {
		return m
	}
	return http.MethodGet
}

// requestHost is the host the client asked for: Caddy's X-Forwarded-Host
// (it passes the client's Host on), else the request's own.
func requestHost(r *http.Request) string {
	if h := r.Header.Get("X-Forwarded-Host"); h != "" {
		return h
	}
	return r.Host
}
