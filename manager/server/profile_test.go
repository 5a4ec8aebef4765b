package server

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The manager's profiles are on the admin socket alone: the public
// handler, which Caddy and through its gateway listener every sandbox
// reaches, serves none of them.
func TestProfilesOnlyOnTheAdminSocket(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	public := (&Server{EdgeDeps: EdgeDeps{Auth: fakeAuth{}, Resolver: &fakeResolver{}}, Log: log}).Handler()
	for _, p := range []string{"/admin/profile/cpu?seconds=1", "/debug/pprof/", "/debug/pprof/profile?seconds=1", "/v1/gateway/../debug/pprof/"} {
		w := httptest.NewRecorder()
		public.ServeHTTP(w, httptest.NewRequest("GET", p, nil))
		if w.Code == http.StatusOK {
			t.Errorf("public %s: %d %.100q", p, w.Code, w.Body.String())
		}
	}
	admin := (&Admin{Log: log}).Handler()
	w := httptest.NewRecorder()
	admin.ServeHTTP(w, httptest.NewRequest("GET", "/admin/profile/allocs?seconds=1", nil))
	if w.Code != http.StatusOK || w.Body.Len() == 0 {
		t.Fatalf("admin allocs: %d %.100q", w.Code, w.Body.String())
	}
}
