package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/outbound"
	"github.com/affido/affido/manager/registry"
)

// Owners is what the owner's manager-side pages read and set: the
// sandbox's life, notifications, where notifications go.
type Owners interface {
	Activity(ctx context.Context, user string, limit int) (registry.Activity, error)
	// Sandbox returns registry.ErrNotFound before the first request.
	Sandbox(ctx context.Context, user string) (registry.Sandbox, error)
	NotifyURL(ctx context.Context, user string) (string, error)
	SetNotifyURL(ctx context.Context, user, url string) error
}

// URLChecker refuses a destination before it is saved (manager/outbound).
type URLChecker interface {
	CheckURL(ctx context.Context, raw string) error
}

func (s *Server) ownerRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/activity", s.ownerRead(s.activity))
	mux.HandleFunc("GET /api/sandbox", s.serve(s.sandbox))
	mux.HandleFunc("POST /api/sandbox/resume", s.serve(s.resume))
	mux.HandleFunc("GET /api/notify", s.ownerRead(s.notifyURL))
	mux.HandleFunc("PUT /api/notify", s.serve(s.setNotifyURL))
	mux.HandleFunc("GET /api/events", s.serve(s.liveEvents))
}

func (s *Server) activity(r *http.Request, user string) (any, error) {
	return s.Owners.Activity(r.Context(), user, 200)
}

// sandbox answers the sandbox's state and next wake, without waking it.
func (s *Server) sandbox(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	sb, err := s.Owners.Sandbox(r.Context(), user)
	if errors.Is(err, registry.ErrNotFound) {
		writeJSONStatus(w, http.StatusOK, map[string]any{"state": "none", "detail": "no sandbox yet: the first request makes one"})
		return nil
	} else if err != nil {
		return registryDown(err)
	}
	writeJSONStatus(w, http.StatusOK, map[string]any{"state": sb.State, "last_active_at": sb.LastActiveAt,
		"wake_at": sb.WakeAt, "reported_wake_at": sb.ReportedWakeAt, "created_at": sb.CreatedAt})
	return nil
}

// resume brings the sandbox up now (unpause, start or recreate).
func (s *Server) resume(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), 40*time.Second)
	defer cancel()
	if _, err := s.Resolver.Resolve(ctx, user, true); err != nil {
		return problem.New(http.StatusServiceUnavailable, "unavailable", "the sandbox could not be resumed; try again shortly").Retry(2).Because(err)
	}
	writeJSONStatus(w, http.StatusOK, map[string]any{"state": registry.StateRunning})
	return nil
}

func (s *Server) notifyURL(r *http.Request, user string) (any, error) {
	u, err := s.Owners.NotifyURL(r.Context(), user)
	return map[string]any{"url": u}, err
}

// setNotifyURL sets where notifications go; the guard refuses, now, a URL
// that leads inward (it refuses it again at every delivery).
func (s *Server) setNotifyURL(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	var body struct {
		URL string `json:"url"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil || len(body.URL) > 2048 {
		return problem.New(http.StatusBadRequest, "bad-json", `send {"url": "https://…"} ("" for none)`)
	}
	if body.URL != "" && s.URLCheck != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		err := s.URLCheck.CheckURL(ctx, body.URL)
		cancel()
		switch {
		case errors.Is(err, outbound.ErrBadURL), errors.Is(err, outbound.ErrRefused):
			return err
		case err != nil: // the client's host: its resolver's answer is the client's to read
			return problem.New(http.StatusBadRequest, "url-unresolved", "the URL's host does not resolve: "+err.Error())
		}
	}
	if err := s.Owners.SetNotifyURL(r.Context(), user, body.URL); err != nil {
		return registryDown(err)
	}
	writeJSONStatus(w, http.StatusOK, map[string]any{"url": body.URL})
	return nil
}
