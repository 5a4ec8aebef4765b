package server

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"unicode/utf8"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/notes"
	"github.com/affido/affido/internal/problem"
)

// The notes routes: GET and PUT /notes are the owner's notes, one set
// every agent allowed them shares (kept in main's store); GET and PUT
// /agents/<name>/notes are that agent's work notes.

// notesBody is a PUT of a set of notes. Version is the version the text
// was edited from: a write over a newer one is refused (409), so the owner
// never silently undoes what an agent wrote meanwhile. Without it the
// text replaces whatever is stored.
type notesBody struct {
	Text    *string `json:"text"`
	Version *int64  `json:"version"`
}

func (s *Server) ownerNotes(w http.ResponseWriter, r *http.Request) error {
	rt, err := s.host.Runtime(r.Context(), agents.Main)
	if err != nil {
		return err
	}
	n, err := rt.Harness.Store().Note(r.Context(), notes.Owner)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, n)
	return nil
}

func (s *Server) ownerNotesPut(w http.ResponseWriter, r *http.Request) error {
	var body notesBody
	if err := decodeNotes(w, r, &body); err != nil {
		return err
	}
	rt, err := s.host.Runtime(r.Context(), agents.Main)
	if err != nil {
		return err
	}
	return s.writeNotes(w, r, rt.Harness, notes.Owner, body)
}

// workNotesOf returns the harness that keeps the work notes of the agent
// the path names (the worker keeps none).
func (s *Server) workNotesOf(r *http.Request) (*durable.Harness, agents.Agent, error) {
	a, err := s.host.Agent(r.Context(), r.PathValue("name"))
	if err != nil {
		return nil, a, err
	}
	if a.Kind == agents.KindWorker {
		return nil, a, problem.New(http.StatusBadRequest, "bad-notes", "the worker keeps no notes: it reads the web and holds none of the owner's data")
	}
	rt, err := s.host.Runtime(r.Context(), a.Name)
	if err != nil {
		return nil, a, err
	}
	return rt.Harness, a, nil
}

func (s *Server) workNotes(w http.ResponseWriter, r *http.Request) error {
	h, a, err := s.workNotesOf(r)
	if err != nil {
		return err
	}
	n, err := h.Store().Note(r.Context(), notes.Work)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"agent": a.Name, "owner_notes": a.OwnerNotes, "work": n})
	return nil
}

func (s *Server) workNotesPut(w http.ResponseWriter, r *http.Request) error {
	var body notesBody
	if err := decodeNotes(w, r, &body); err != nil {
		return err
	}
	h, _, err := s.workNotesOf(r)
	if err != nil {
		return err
	}
	return s.writeNotes(w, r, h, notes.Work, body)
}

func (s *Server) writeNotes(w http.ResponseWriter, r *http.Request, h *durable.Harness, name string, body notesBody) error {
	version := int64(-1)
	if body.Version != nil {
		version = *body.Version
	}
	n, err := notes.Write(r.Context(), h, name, *body.Text, notes.ByOwner, version)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, n)
	return nil
}

// decodeNotes reads a PUT of notes: JSON in valid UTF-8 (the JSON decoder
// would quietly replace what is not), with a text within the bounds and a
// version that is not negative. Nothing is written otherwise.
func decodeNotes(w http.ResponseWriter, r *http.Request, body *notesBody) error {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxJSONBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return problem.Errorf(http.StatusRequestEntityTooLarge, "too-large", "bodies are limited to %d bytes", MaxJSONBody)
	case err != nil:
		return problem.New(http.StatusBadRequest, "bad-json", "the body could not be read")
	case !utf8.Valid(raw):
		return problem.New(http.StatusBadRequest, "bad-notes", "the body is not valid UTF-8")
	}
	if err := decodeJSON(bytes.NewReader(raw), body); err != nil {
		return err
	}
	switch {
	case body.Text == nil:
		return problem.New(http.StatusBadRequest, "bad-notes", "text is required (send \"\" to empty the notes)")
	case body.Version != nil && *body.Version < 0:
		return problem.New(http.StatusBadRequest, "bad-notes", "version is the version the text was edited from: 0 or more")
	}
	return notes.Check(*body.Text)
}
