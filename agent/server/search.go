package server

import (
	"net/http"
	"strconv"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/internal/problem"
)

// maxQuery bounds a search's text.
const maxQuery = 200

// search finds messages and replies across the agent's conversations
// (GET /search?q=…&limit=…): newest first, each with its conversation's
// title and a snippet.
func (s *Server) search(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query().Get("q")
	if len(q) > maxQuery {
		return problem.New(http.StatusBadRequest, "bad-query", "q is at most 200 bytes")
	}
	limit := 20
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return problem.New(http.StatusBadRequest, "bad-limit", "limit is 1 to 100")
		}
		limit = n
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	hits, err := h.Store().Search(r.Context(), q, limit)
	if err != nil {
		return err
	}
	type result struct {
		durable.Hit
		Title string `json:"title"`
	}
	titles := map[int64]string{}
	out := make([]result, 0, len(hits))
	for _, hit := range hits {
		conv := hit.Entry.ConversationID
		if _, ok := titles[conv]; !ok {
			c, err := h.Store().Conversation(r.Context(), conv)
			if err != nil {
				return err
			}
			titles[conv] = c.Title
		}
		out = append(out, result{hit, titles[conv]})
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": out})
	return nil
}
