// Package problem writes RFC 7807 problem responses, the error body of every
// Affido HTTP API.
package problem

import (
	"encoding/json"
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
}

// Write sends a problem with status; kind becomes the type URI's last part.
func Write(w http.ResponseWriter, status int, kind, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{
		Type:   "https://affido.dev/problems/" + kind,
		Title:  strings.ReplaceAll(kind, "-", " "),
		Status: status,
		Detail: detail,
	})
}

// RetryAfter sends a problem with a Retry-After header in seconds.
func RetryAfter(w http.ResponseWriter, status, seconds int, kind, detail string) {
	w.Header().Set("Retry-After", strconv.Itoa(seconds))
	Write(w, status, kind, detail)
}
