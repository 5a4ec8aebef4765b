package server

import (
	"net/http"
	"strconv"

	"github.com/affido/affido/internal/problem"
)

// activity lists the agent's newest entries across all its conversations
// (GET /activity?limit=…, 1 to 500, default 100), newest first: the web
// client's Activity page merges every agent's.
func (s *Server) activity(w http.ResponseWriter, r *http.Request) error {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 500 {
			return problem.New(http.StatusBadRequest, "bad-limit", "limit is 1 to 500")
		}
		limit = n
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	entries, err := h.Store().RecentEntries(r.Context(), limit)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"entries": entries})
	return nil
}
