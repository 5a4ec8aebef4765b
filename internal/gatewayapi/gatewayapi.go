// Package gatewayapi is the contract of the gateway's web routes, written
// once for the agent that calls them and the manager that serves them:
// fetch_url and web_search run in the manager (the sandbox has no egress),
// called by the agent with its sandbox token.
package gatewayapi

import "time"

// Paths under the gateway's base URL (…/v1/gateway).
const (
	FetchPath  = "/fetch"
	SearchPath = "/search"
)

// Limits of one fetch.
const (
	FetchTimeout  = 15 * time.Second
	FetchMaxBytes = 2 << 20
	MaxSearchHits = 10
)

// FetchRequest asks the gateway to GET one http or https URL.
type FetchRequest struct {
	URL string `json:"url"`
}

// Page is a fetched page: its provenance and its text (HTML reduced to
// text). SHA256 is of the body bytes as received (up to FetchMaxBytes).
type Page struct {
	URL         string    `json:"url"`
	FinalURL    string    `json:"final_url"` // after redirects
	Status      int       `json:"status"`
	ContentType string    `json:"content_type"`
	FetchedAt   time.Time `json:"fetched_at"`
	SHA256      string    `json:"sha256"`
	Bytes       int       `json:"bytes"`
	Truncated   bool      `json:"truncated,omitempty"` // the body was longer than FetchMaxBytes
	Title       string    `json:"title,omitempty"`
	Text        string    `json:"text"`
}

// SearchRequest asks the gateway's search provider.
type SearchRequest struct {
	Query string `json:"query"`
	Count int    `json:"count,omitempty"` // at most MaxSearchHits (default 5)
}

// SearchResults are one search's hits.
type SearchResults struct {
	Provider   string      `json:"provider"`
	Query      string      `json:"query"`
	SearchedAt time.Time   `json:"searched_at"`
	Hits       []SearchHit `json:"hits"`
}

// SearchHit is one result.
type SearchHit struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Snippet string `json:"snippet"`
}

// Problem types the fetch route answers with (RFC 7807 "type" suffixes),
// so the agent can tell the model what happened without reading prose.
const (
	ProblemRefused   = "fetch-refused"  // the guard refused an address, a scheme or a redirect
	ProblemFailed    = "fetch-failed"   // the site could not be reached or timed out
	ProblemNotText   = "fetch-not-text" // the body is not text
	ProblemBadURL    = "bad-url"        // not an absolute http or https URL
	ProblemBadSearch = "bad-search"     // an empty or over-long query
	ProblemNoSearch  = "search-failed"  // the provider failed
)
