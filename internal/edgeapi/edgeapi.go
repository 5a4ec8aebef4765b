// Package edgeapi is the contract between the manager and Caddy for the
// edge's decision cache (issue 30's warm path): Caddy keeps a 200 of the
// manager's /v1/resolve for a short time, and the manager tells it, before
// it answers a revoke or takes a sandbox down, to forget what it keeps.
//
// Caddy polls the manager (POST PollPath with the control key). Each poll
// carries what Caddy has applied (Acked) and the users it answered from its
// cache since the last one (Touched); the manager holds it until something
// is to be forgotten or Hold passes, and answers what to forget and a
// lease. Caddy applies the forgets, then keeps its decisions until the time
// it sent that poll plus the lease; without a fresh lease it asks the
// manager every time. The manager's Forget returns once every Caddy has
// acknowledged it or the last lease it gave that Caddy has run out, so a
// Caddy that cannot be reached holds nothing stale past it.
package edgeapi

import "time"

// EndpointHeader carries the sandbox endpoint back to Caddy on a 200 of
// /v1/resolve.
const EndpointHeader = "X-Sandbox-Endpoint"

// RetryHeader marks a 503 of /v1/resolve that Caddy asks again for: the
// manager stopped before the answer was known, and the next one gives it.
const RetryHeader = "X-Affido-Retry"

// PollPath is the manager's route for Caddy's polls (its listener on the
// control network; the control key in sandboxapi.HeaderControlKey).
const PollPath = "/v1/edge/poll"

// TTLHeader, on a 200 of /v1/resolve, is how long (milliseconds) Caddy may
// answer the same request from its cache. The manager sets it only on what
// may be kept: a GET or HEAD, while the manager holds leases out.
const TTLHeader = "X-Affido-Decision-Ttl"

// Lease is how long a poll's answer lets Caddy keep decisions, counted from
// when Caddy sent the poll.
const Lease = 2 * time.Second

// Hold is the longest the manager holds a poll with nothing to forget.
const Hold = 250 * time.Millisecond

// Poll is Caddy's poll.
type Poll struct {
	// Caddy names this Caddy process (random at its start).
	Caddy string `json:"caddy"`
	// Epoch is the manager process Acked counts in ("" at first).
	Epoch string `json:"epoch,omitempty"`
	// Acked is the last Seq whose forgets Caddy has applied.
	Acked uint64 `json:"acked"`
	// Touched are the users Caddy answered from its cache since its last
	// poll: activity, as a resolve is.
	Touched []Touch `json:"touched,omitempty"`
}

// Touch is one user answered from the cache.
type Touch struct {
	User string `json:"user"`
	// Active: at least one of the requests counts as activity
	// (sandboxapi.Activating).
	Active bool `json:"active,omitempty"`
	// Tokens are the hex sha256 of the API tokens used, for their last use.
	Tokens []string `json:"tokens,omitempty"`
}

// Answer is the manager's answer to a poll.
type Answer struct {
	// Epoch names the manager process; a new one means forget everything.
	Epoch string `json:"epoch"`
	// Seq is the last forget this answer includes: Caddy's next Acked.
	Seq uint64 `json:"seq"`
	// All: forget every decision.
	All bool `json:"all,omitempty"`
	// Forget lists the users whose decisions to forget.
	Forget []string `json:"forget,omitempty"`
	// LeaseMS is the lease in milliseconds from when the poll was sent.
	LeaseMS int64 `json:"lease_ms"`
}
