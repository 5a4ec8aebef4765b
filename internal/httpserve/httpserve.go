// Package httpserve builds the HTTP servers of the manager and the agent
// with every limit a neighbour's slow client could otherwise exhaust: a
// header deadline, an idle deadline, and a deadline for reading a request
// body.
//
// http.Server.ReadTimeout is deliberately not used: it stays armed after the
// body is read, and when it fires during a long handler (a model stream, a
// prompt that runs for minutes) net/http cancels the request's context.
// BodyDeadline arms a read deadline only while a body is being read.
package httpserve

import (
	"errors"
	"io"
	"net/http"
	"time"
)

// Limits of every server built here.
const (
	HeaderTimeout = 10 * time.Second
	BodyTimeout   = 60 * time.Second
	IdleTimeout   = 2 * time.Minute
)

// New returns a server for h with the limits above; a non-zero body
// overrides BodyTimeout.
func New(h http.Handler, body time.Duration) *http.Server {
	if body <= 0 {
		body = BodyTimeout
	}
	return &http.Server{
		Handler:           BodyDeadline(h, body),
		ReadHeaderTimeout: HeaderTimeout,
		IdleTimeout:       IdleTimeout,
	}
}

// BodyDeadline gives a request with a body d to deliver all of it; a read
// past that fails, and the handler answers as it does for any broken body.
// Once the body has been read to its end the deadline is lifted, so the
// handler may then run as long as it needs.
func BodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			h.ServeHTTP(w, r) // not a real connection (tests): nothing to arm
			return
		}
		r.Body = &liftOnEOF{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		h.ServeHTTP(w, r)
	})
}

type liftOnEOF struct {
	io.ReadCloser
	lift   func()
	lifted bool
}

func (b *liftOnEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.lifted {
		b.lifted = true
		b.lift()
	}
	return n, err
}
