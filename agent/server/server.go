// Package server is the agent's HTTP API inside its sandbox container.
//
// This is the first slice of ARCHITECTURE.md section 4: liveness, cached
// status, and the pause/wake handshake with the manager. The durable runtime
// (agent/durable) and the storage-opening routes land on top of it.
package server

import (
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/affido/affido/internal/problem"
)

// Server is the agent's HTTP server.
type Server struct {
	User      string
	Workspace string
	SessionDB string
	Started   time.Time

	inflight atomic.Int64 // requests being served, this one excluded where it asks

	mu     sync.Mutex
	paused bool // storage closed at the manager's request
}

// Handler returns the agent's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", s.health)
	mux.HandleFunc("GET /status", s.status)
	mux.HandleFunc("POST /pause", s.pause)
	mux.HandleFunc("POST /wake", s.wake)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem.Write(w, http.StatusNotFound, "not-found", "no such route: "+r.URL.Path)
	})
	return s.track(mux)
}

// track counts in-flight requests so /pause?if_idle=1 can refuse while busy.
func (s *Server) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		next.ServeHTTP(w, r)
	})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	paused := s.paused
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"user":           s.User,
		"storage_closed": paused,
		"uptime_seconds": int(time.Since(s.Started).Seconds()),
	})
}

// pause closes storage. With if_idle=1 (the manager's call) it answers 409
// while any other request is in flight. next_wake_at is the earliest stored
// deadline; null while nothing sleeps.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("if_idle") == "1" && s.inflight.Load() > 1 {
		problem.Write(w, http.StatusConflict, "busy", "a request is in flight")
		return
	}
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"next_wake_at": nil})
}

// wake reopens storage and runs due work.
func (s *Server) wake(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.paused = false
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"woken": true})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
