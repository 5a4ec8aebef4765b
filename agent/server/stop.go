package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/internal/problem"
)

// stop ends a run at the owner's word (POST /runs/<id>/stop): the Stop
// button of the web client. The run ends aborted, durably, with a
// "stopped" entry in its conversation; a model call in flight is
// abandoned. 404 for an id that is no run, 409 for a run already ended.
func (s *Server) stop(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return problem.New(http.StatusBadRequest, "bad-id", "a run id is a positive integer")
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	t, err := h.Stop(r.Context(), id)
	switch {
	case errors.Is(err, durable.ErrNotFound):
		return problem.New(http.StatusNotFound, "unknown-run", fmt.Sprintf("no run %d", id))
	case errors.Is(err, durable.ErrRunEnded):
		return problem.New(http.StatusConflict, "run-ended", fmt.Sprintf("run %d has already ended", id))
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"run_id": t.ID, "conversation_id": t.ConversationID, "status": "stopped"})
	return nil
}
