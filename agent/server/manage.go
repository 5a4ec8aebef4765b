package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/host"
	"github.com/affido/affido/agent/reminders"
	"github.com/affido/affido/internal/problem"
)

// The owner's housekeeping routes the web client uses (curl can too):
// delete a workspace file, rename a conversation, list and cancel
// reminders, browse the skills marketplace.

func (s *Server) fileDelete(w http.ResponseWriter, r *http.Request) error {
	p := r.URL.Query().Get("path")
	if p == "" {
		return problem.New(http.StatusBadRequest, "missing-path", "path is required")
	}
	if err := s.ws.Delete(p); err != nil {
		return pathError(err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": p})
	return nil
}

func (s *Server) sessionRename(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		ID    int64  `json:"id"`
		Title string `json:"title"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	if len(body.Title) > 200 {
		return problem.New(http.StatusBadRequest, "bad-title", "titles are at most 200 bytes")
	}
	return s.changeConversation(w, r, body.ID, func(st *durable.Store) error {
		return st.RenameConversation(r.Context(), body.ID, body.Title)
	})
}

// changeConversation makes change to conversation id and answers with the
// conversation as it is afterwards (404 when there is no such one).
func (s *Server) changeConversation(w http.ResponseWriter, r *http.Request, id int64, change func(*durable.Store) error) error {
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	err = change(h.Store())
	switch {
	case errors.Is(err, durable.ErrNotFound):
		return problem.New(http.StatusNotFound, "unknown-conversation", fmt.Sprintf("no conversation %d", id))
	case err != nil:
		return err
	default:
		return s.writeConversation(w, r, h, id)
	}
}

// sessionArchive puts a conversation away ({"id", "archived": true}) or
// back (false); GET /sessions lists only those not archived unless
// ?archived=1, which lists only the archived.
func (s *Server) sessionArchive(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		ID       int64 `json:"id"`
		Archived *bool `json:"archived"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	if body.Archived == nil {
		return problem.New(http.StatusBadRequest, "missing-archived", "archived (true or false) is required")
	}
	return s.changeConversation(w, r, body.ID, func(st *durable.Store) error {
		return st.ArchiveConversation(r.Context(), body.ID, *body.Archived)
	})
}

// sessionDelete deletes a conversation and all of it ({"id"}): 409 while
// anything of it is in flight, 400 for the root conversation. The agent's
// current conversation, if it was this one, becomes the root.
func (s *Server) sessionDelete(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		ID int64 `json:"id"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	err = h.Store().DeleteConversation(r.Context(), body.ID)
	switch {
	case errors.Is(err, durable.ErrNotFound):
		return problem.New(http.StatusNotFound, "unknown-conversation", fmt.Sprintf("no conversation %d", body.ID))
	case errors.Is(err, durable.ErrLiveWork):
		return problem.New(http.StatusConflict, "conversation-busy", err.Error())
	case errors.Is(err, durable.ErrRootConversation):
		return problem.New(http.StatusBadRequest, "root-conversation", err.Error())
	case err != nil:
		return err
	}
	if cur, err := host.CurrentConversation(r.Context(), h); err == nil && cur == body.ID {
		if err := host.SetCurrentConversation(r.Context(), h, durable.RootConversation); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": body.ID})
	return nil
}

func (s *Server) reminderList(w http.ResponseWriter, r *http.Request) error {
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	list, err := reminders.Pending(r.Context(), h.Store())
	if err != nil {
		return err
	}
	ended, err := reminders.Ended(r.Context(), h.Store(), 20)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"reminders": list, "ended": ended})
	return nil
}

func (s *Server) reminderCancel(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return problem.New(http.StatusBadRequest, "bad-id", "a reminder id is a positive integer")
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	var text string
	_, err = h.Update(r.Context(), id, func(t durable.Task) (*durable.Task, error) {
		c, txt, err := reminders.Cancelled(t, time.Now().UTC())
		text = txt
		return &c, err
	})
	switch {
	case errors.Is(err, reminders.ErrReminderDone):
		return problem.New(http.StatusConflict, "reminder-done", fmt.Sprintf("reminder %d: %v", id, reminders.ErrReminderDone))
	case errors.Is(err, reminders.ErrNoReminder) || errors.Is(err, durable.ErrNotFound):
		return problem.New(http.StatusNotFound, "unknown-reminder", fmt.Sprintf("reminder %d: %v", id, reminders.ErrNoReminder))
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"cancelled": id, "text": text})
	return nil
}

func (s *Server) skillsMarketplace(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Skills == nil {
		return problem.New(http.StatusNotFound, "no-skills", "skills are not configured")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	idx, err := s.cfg.Skills.Marketplace(ctx)
	if err != nil {
		return unavailable(http.StatusBadGateway, "marketplace", "the marketplace could not be read", err)
	}
	writeJSON(w, http.StatusOK, idx)
	return nil
}
