package server

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/affido/affido/agent/durable"
)

// A process that lost its agent's storage (another holds the lease, or a
// commit's outcome is unknown) answers 503, and says to try again: the
// request reaches the new holder.
func TestStorageLostIs503(t *testing.T) {
	for _, cause := range []error{durable.ErrLeaseLost, durable.ErrCommitUnknown} {
		err := fmt.Errorf("submit: harness: %w: %w", durable.ErrClosed, cause)
		p := problemOf(err)
		if p == nil || p.Status != http.StatusServiceUnavailable || p.Kind != "storage-lost" || p.RetryAfter <= 0 {
			t.Errorf("%v: %+v, want 503 storage-lost with Retry-After", cause, p)
		}
	}
}
