package server

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/markdown"
)

// Limits of POST /api/render: texts per request, and the body.
const (
	MaxRenderTexts = 64
	MaxRenderBody  = 1 << 20
)

// render answers {"texts": [...]} with {"html": [...]}, each text rendered
// by markdown.Render, in the same order. It is authenticated as POST
// /api/tokens is: the session cookie, which must pass the cross-site check,
// or an API token.
func (s *Server) render(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.owner(w, r); err != nil {
		return err
	}
	var body struct {
		Texts []string `json:"texts"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRenderBody))
	dec.DisallowUnknownFields()
	var tooLarge *http.MaxBytesError
	switch err := dec.Decode(&body); {
	case errors.As(err, &tooLarge):
		return problem.Errorf(http.StatusRequestEntityTooLarge, "too-large", "the body is limited to %d bytes", MaxRenderBody)
	case err != nil || dec.More() || body.Texts == nil:
		return problem.New(http.StatusBadRequest, "bad-json", `send {"texts": ["…", …]}`)
	}
	if len(body.Texts) > MaxRenderTexts {
		return problem.Errorf(http.StatusBadRequest, "too-many-texts", "at most %d texts at once, not %d", MaxRenderTexts, len(body.Texts))
	}
	out := make([]string, len(body.Texts))
	for i, text := range body.Texts {
		out[i] = markdown.Render(text)
	}
	writeJSONStatus(w, http.StatusOK, map[string]any{"html": out})
	return nil
}
