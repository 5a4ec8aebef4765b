// Package problem writes RFC 7807 problem responses, the error body of every
// Affido HTTP API, and maps a handler's error to one (Respond): an *Error
// answers as it says; anything else is a 500 that tells the client only a
// request id, under which the error is logged.
package problem

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
)

// Problem is an RFC 7807 problem detail.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// RequestID names the log line of a server-side failure (also sent as
	// HeaderRequestID).
	RequestID string `json:"request_id,omitempty"`
}

// HeaderRequestID carries the request id of a server-side failure.
const HeaderRequestID = "X-Request-Id"

// Write sends a problem with status; kind becomes the type URI's last part.
func Write(w http.ResponseWriter, status int, kind, detail string) {
	write(w, Problem{Status: status, Detail: detail}, kind)
}

func write(w http.ResponseWriter, p Problem, kind string) {
	p.Type = "https://affido.dev/problems/" + kind
	p.Title = strings.ReplaceAll(kind, "-", " ")
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_ = json.NewEncoder(w).Encode(p)
}

// RetryAfter sends a problem with a Retry-After header in seconds.
func RetryAfter(w http.ResponseWriter, status, seconds int, kind, detail string) {
	w.Header().Set("Retry-After", strconv.Itoa(seconds))
	Write(w, status, kind, detail)
}

// Error is an error a handler returns to answer with a problem. Status,
// Kind and Detail are shown to the client; Err, the cause, never is: a
// server-side Error (status 500 and up) is logged with it.
type Error struct {
	Status int
	Kind   string // the type URI's last part; its words are the title
	Detail string
	// RetryAfter, in seconds, is sent as Retry-After when positive.
	RetryAfter int
	Err        error
}

// New returns the problem status, kind, detail.
func New(status int, kind, detail string) *Error {
	return &Error{Status: status, Kind: kind, Detail: detail}
}

// Errorf is New with a formatted detail.
func Errorf(status int, kind, format string, a ...any) *Error {
	return New(status, kind, fmt.Sprintf(format, a...))
}

// Because returns e with its cause, logged and never shown.
func (e *Error) Because(err error) *Error {
	c := *e
	c.Err = err
	return &c
}

// Retry returns e with a Retry-After of seconds.
func (e *Error) Retry(seconds int) *Error {
	c := *e
	c.RetryAfter = seconds
	return &c
}

func (e *Error) Error() string {
	s := e.Kind + ": " + e.Detail
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Respond answers err. A *Error in err's chain answers as it says; any
// other error is a 500 "internal" problem. A server-side answer carries a
// fresh request id (in the body and in HeaderRequestID) and is logged to
// log with it and the whole error; nothing of the error reaches the client
// but an *Error's own detail.
func Respond(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Status: http.StatusInternalServerError, Kind: "internal",
			Detail: "the server failed; the request id names the failure in its log", Err: err}
	}
	p := Problem{Status: e.Status, Detail: e.Detail}
	if e.Status >= 500 {
		p.RequestID = NewRequestID()
		w.Header().Set(HeaderRequestID, p.RequestID)
		if log == nil {
			log = slog.Default()
		}
		log.Error("request failed", "request_id", p.RequestID, "method", r.Method, "path", r.URL.Path,
			"status", e.Status, "problem", e.Kind, "err", err)
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	write(w, p, e.Kind)
}

// NewRequestID returns a fresh request id, for a failure answered without
// Respond (a stream whose headers are sent).
func NewRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "req-" + hex.EncodeToString(b[:])
}
