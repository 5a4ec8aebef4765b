package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/spend"
)

// spendOwner authenticates the owner of a spend route (the manager's own
// routes get the method as the client sent it), which needs the ledger.
func (s *Server) spendOwner(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.SpendOwner == nil {
		problem.Write(w, http.StatusNotFound, "not-found", "spend is not tracked here")
		return "", false
	}
	user, _, ok := s.authorize(w, r, "", r.Method, r.URL.Path)
	return user, ok
}

// spendReport answers GET /api/spend: today's and this month's spend by
// model, and the limits, in micro-dollars.
func (s *Server) spendReport(w http.ResponseWriter, r *http.Request) {
	user, ok := s.spendOwner(w, r)
	if !ok {
		return
	}
	rep, err := s.SpendOwner.Spend(r.Context(), user, s.SpendLimits)
	if err != nil {
		problem.RetryAfter(w, http.StatusServiceUnavailable, 2, "unavailable", "the registry is unavailable")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(rep)
}

// anotherDay answers POST /api/spend/another-day: today's limit doubles,
// once a day (409 the second time).
func (s *Server) anotherDay(w http.ResponseWriter, r *http.Request) {
	user, ok := s.spendOwner(w, r)
	if !ok {
		return
	}
	err := s.SpendOwner.AllowAnotherDay(r.Context(), user)
	switch {
	case errors.Is(err, spend.ErrAlreadyRaised):
		problem.Write(w, http.StatusConflict, "already-raised", "today's limit was raised once already; it resets tomorrow")
		return
	case err != nil:
		problem.RetryAfter(w, http.StatusServiceUnavailable, 2, "unavailable", "the registry is unavailable")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"another_day_allowed_today": true})
}

// spendLimitReached tells the owner, once a day, that a call was refused
// for spend (through the notification path; the key makes it once).
func (s *Server) spendLimitReached(user string) {
	if s.Notifications == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	day := time.Now().UTC().Format("2006-01-02")
	text := fmt.Sprintf("Your agent stopped: its spend limit was reached on %s. Raise today's limit once with POST /api/spend/another-day.", day)
	if _, err := s.Notifications.EnqueueNotification(ctx, user, "spend-limit-"+day, text, nil, 1<<30); err != nil {
		s.Log.Warn("spend limit: owner not notified", "user", user, "err", err)
		return
	}
	if s.Kick != nil {
		s.Kick()
	}
}
