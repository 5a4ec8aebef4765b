package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/backup"
	"github.com/affido/affido/agent/corpus"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/host"
	"github.com/affido/affido/agent/identity"
	"github.com/affido/affido/agent/jobs"
	"github.com/affido/affido/agent/notes"
	"github.com/affido/affido/agent/policy"
	"github.com/affido/affido/agent/skills"
	"github.com/affido/affido/agent/workspace"
	"github.com/affido/affido/internal/problem"
)

// handlerFunc is a route that returns its failure for fail to answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// serve adapts h to net/http: an error it returns is answered by fail.
func (s *Server) serve(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			s.fail(w, r, err)
		}
	}
}

// fail answers err: the one place the agent's errors become problems. A
// *problem.Error answers as it says; the errors of the agent's packages
// that the client caused answer with their own text; anything else is a
// 500 carrying only a request id, under which the error is logged.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if p := problemOf(err); p != nil {
		err = p
	}
	problem.Respond(w, r, s.cfg.Log, err)
}

// clientErrors are the sentinel errors of the agent's packages whose text
// is meant for the caller, with the problem each answers.
var clientErrors = []struct {
	err    error
	status int
	kind   string
}{
	{agents.ErrNoAgent, http.StatusNotFound, "unknown-agent"},
	{backup.ErrInvalid, http.StatusUnprocessableEntity, "bad-archive"},
	{agents.ErrExists, http.StatusConflict, "agent-exists"},
	{agents.ErrBuiltin, http.StatusBadRequest, "built-in-agent"},
	{agents.ErrInvalid, http.StatusBadRequest, "bad-agent"},
	{durable.ErrBadCursor, http.StatusBadRequest, "bad-cursor"},
	{jobs.ErrInvalid, http.StatusBadRequest, "bad-job"},
	{notes.ErrInvalid, http.StatusBadRequest, "bad-notes"},
	{durable.ErrNoteChanged, http.StatusConflict, "notes-changed"},
	{jobs.ErrTooMany, http.StatusConflict, "too-many-jobs"},
	{policy.ErrInvalidRule, http.StatusBadRequest, "bad-rule"},
	{policy.ErrUnconfirmed, http.StatusBadRequest, "unconfirmed-rule"},
	{workspace.ErrBadPath, http.StatusBadRequest, "bad-path"},
	{workspace.ErrTooLarge, http.StatusRequestEntityTooLarge, "too-large"},
	{workspace.ErrQuota, http.StatusInsufficientStorage, "quota"},
	{workspace.ErrNotFile, http.StatusBadRequest, "file-error"},
	{corpus.ErrBadName, http.StatusBadRequest, "bad-document"},
	{corpus.ErrEmpty, http.StatusBadRequest, "bad-document"},
	{corpus.ErrTooLarge, http.StatusRequestEntityTooLarge, "too-large"},
	{corpus.ErrBinary, http.StatusUnsupportedMediaType, "not-text"},
	{corpus.ErrNotFound, http.StatusNotFound, "unknown-document"},
	{skills.ErrUnknown, http.StatusNotFound, "unknown-skill"},
	{identity.ErrInvalid, http.StatusBadRequest, "bad-claim"},
	{host.ErrBadStorage, http.StatusBadRequest, "bad-storage"},
	{host.ErrNoStorage, http.StatusConflict, "no-storage"},
}

// problemOf is the problem err answers with, nil for an internal error.
func problemOf(err error) *problem.Error {
	var p *problem.Error
	var busy *host.BusyError
	var closed *workspace.ClosedError
	switch {
	case errors.As(err, &p):
		return p
	case errors.As(err, &closed) && closed.RepairErr != nil:
		return problem.New(http.StatusServiceUnavailable, "repair-failed", closed.Error()+"; try again").
			Because(fmt.Errorf("%w: %w; repair: %w", closed, closed.Err, closed.RepairErr))
	case errors.As(err, &closed):
		return problem.New(http.StatusConflict, "closed-by-tools", closed.Error()).Because(err)
	case errors.As(err, &busy):
		return problem.New(http.StatusConflict, "busy", busy.Why)
	case durable.Fatal(err): // another process holds the agent's storage, or a commit's outcome is unknown
		return problem.New(http.StatusServiceUnavailable, "storage-lost", "this process no longer holds the agent's storage; try again").Retry(1)
	case errors.Is(err, host.ErrClosedMeanwhile):
		return problem.New(http.StatusServiceUnavailable, "storage-closed", "storage closed meanwhile; try again")
	case errors.Is(err, host.ErrUnavailable):
		return problem.New(http.StatusServiceUnavailable, "storage-unavailable", "the session database could not be opened").Because(err)
	}
	for _, c := range clientErrors {
		if errors.Is(err, c.err) {
			return problem.New(c.status, c.kind, err.Error())
		}
	}
	return nil
}

// pathError is the problem of a workspace path the client named.
func pathError(err error) error {
	switch {
	case errors.Is(err, workspace.ErrBadPath), errors.Is(err, workspace.ErrTooLarge), errors.Is(err, workspace.ErrQuota), errors.Is(err, workspace.ErrNotFile),
		errors.Is(err, workspace.ErrClosed):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return problem.New(http.StatusNotFound, "not-found", "no such file or directory")
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && !filepath.IsAbs(pe.Path) { // relative to the workspace root: the path is the client's
		return problem.Errorf(http.StatusBadRequest, "file-error", "%s %s: %v", pe.Op, pe.Path, pe.Err)
	}
	return fmt.Errorf("workspace: %w", err)
}

// unavailable is the problem of a dependency (the gateway, the
// marketplace) that failed: what was tried is shown, why is logged.
func unavailable(status int, kind, detail string, err error) error {
	return problem.New(status, kind, detail).Because(err)
}

// MaxJSONBody bounds JSON request bodies.
const MaxJSONBody = 1 << 20

// decodeBody reads a JSON body strictly: unknown fields and trailing data
// are errors (400 or 413 problems).
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	return decodeJSON(http.MaxBytesReader(w, r.Body, MaxJSONBody), v)
}

// decodeJSON reads one JSON value strictly from body (see decodeBody).
func decodeJSON(body io.Reader, v any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return problem.Errorf(http.StatusRequestEntityTooLarge, "too-large", "bodies are limited to %d bytes", MaxJSONBody)
		}
		return problem.New(http.StatusBadRequest, "bad-json", "the body is not the expected JSON: "+err.Error())
	}
	if dec.More() {
		return problem.New(http.StatusBadRequest, "bad-json", "the body has data after the JSON object")
	}
	return nil
}
