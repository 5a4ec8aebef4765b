package server

import "net/http"

// migrateStorage moves every agent's database to another storage (POST
// /storage/migrate?to=sqlite|postgres, the manager's admin call through the
// control path): storage closes, each store is copied and verified, and it
// opens on the new one at the next call.
func (s *Server) migrateStorage(w http.ResponseWriter, r *http.Request) error {
	if err := s.onlyControl(r, "storage is migrated"); err != nil {
		return err
	}
	ans, err := s.host.MigrateStorage(r.Context(), r.URL.Query().Get("to"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ans)
	return nil
}
