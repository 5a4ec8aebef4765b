package server

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// An evict to something that is no idle tier is the caller's mistake,
// said before anything is touched.
func TestAdminEvictToANonTier(t *testing.T) {
	h := (&Admin{}).Handler()
	for _, to := range []string{"running", "pool", "nowhere"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/admin/evict?user=alice&to="+to, nil))
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "bad-tier") {
			t.Fatalf("evict to %s: %d %s", to, w.Code, w.Body)
		}
	}
}
