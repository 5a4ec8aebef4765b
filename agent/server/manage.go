package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/reminders"
	"github.com/affido/affido/internal/problem"
)

// The owner's housekeeping routes the web client uses (curl can too):
// delete a workspace file, rename a conversation, list and cancel
// reminders, browse the skills marketplace.

func (s *Server) fileDelete(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		problem.Write(w, http.StatusBadRequest, "missing-path", "path is required")
		return
	}
	if err := s.ws.Delete(p); err != nil {
		s.pathProblem(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": p})
}

func (s *Server) sessionRename(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ID    int64  `json:"id"`
		Title string `json:"title"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	if len(body.Title) > 200 {
		problem.Write(w, http.StatusBadRequest, "bad-title", "titles are at most 200 bytes")
		return
	}
	h := s.storageOr503(w, r)
	if h == nil {
		return
	}
	err := h.Store().RenameConversation(r.Context(), body.ID, body.Title)
	switch {
	case errors.Is(err, durable.ErrNotFound):
		problem.Write(w, http.StatusNotFound, "unknown-conversation", fmt.Sprintf("no conversation %d", body.ID))
	case err != nil:
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
	default:
		s.writeConversation(w, r, h, body.ID)
	}
}

func (s *Server) reminderList(w http.ResponseWriter, r *http.Request) {
	h := s.storageOr503(w, r)
	if h == nil {
		return
	}
	list, err := reminders.Pending(r.Context(), h.Store())
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"reminders": list})
}

func (s *Server) reminderCancel(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		problem.Write(w, http.StatusBadRequest, "bad-id", "a reminder id is a positive integer")
		return
	}
	h := s.storageOr503(w, r)
	if h == nil {
		return
	}
	var text string
	_, err = h.Update(r.Context(), id, func(t durable.Task) (*durable.Task, error) {
		c, txt, err := reminders.Cancelled(t, time.Now().UTC())
		text = txt
		return &c, err
	})
	switch {
	case errors.Is(err, reminders.ErrNoReminder) || errors.Is(err, durable.ErrNotFound):
		problem.Write(w, http.StatusNotFound, "unknown-reminder", fmt.Sprintf("reminder %d: %v", id, reminders.ErrNoReminder))
		return
	case err != nil:
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"cancelled": id, "text": text})
}

func (s *Server) skillsMarketplace(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Skills == nil {
		problem.Write(w, http.StatusNotFound, "no-skills", "skills are not configured")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	idx, err := s.cfg.Skills.Marketplace(ctx)
	if err != nil {
		problem.Write(w, http.StatusBadGateway, "marketplace", "the marketplace could not be read: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, idx)
}
