package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/spend"
)

// spendOwner authenticates the owner of a spend route (the manager's own
// routes get the method as the client sent it), which needs the ledger.
func (s *Server) spendOwner(w http.ResponseWriter, r *http.Request) (string, error) {
	if s.SpendOwner == nil {
		return "", problem.New(http.StatusNotFound, "not-found", "spend is not tracked here")
	}
	user, _, err := s.authorize(w, r, "", r.Method, r.URL.Path)
	return user, err
}

// spendReport answers GET /api/spend: today's and this month's spend by
// model, and the limits, in micro-dollars.
func (s *Server) spendReport(w http.ResponseWriter, r *http.Request) error {
	user, err := s.spendOwner(w, r)
	if err != nil {
		return err
	}
	rep, err := s.SpendOwner.Spend(r.Context(), user, s.SpendLimits)
	if err != nil {
		return registryDown(err)
	}
	// With each model's prices (USD per million tokens), so a page can say
	// what one call cost from its tokens.
	prices := map[string]map[string]float64{}
	for m, p := range s.Prices {
		prices[m] = map[string]float64{"input_per_million": p.Input, "output_per_million": p.Output}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		registry.SpendReport
		Prices map[string]map[string]float64 `json:"prices"`
	}{rep, prices})
	return nil
}

// anotherDay answers POST /api/spend/another-day: today's limit doubles,
// once a day (409 the second time).
func (s *Server) anotherDay(w http.ResponseWriter, r *http.Request) error {
	user, err := s.spendOwner(w, r)
	if err != nil {
		return err
	}
	err = s.SpendOwner.AllowAnotherDay(r.Context(), user)
	switch {
	case errors.Is(err, spend.ErrAlreadyRaised):
		return err
	case err != nil:
		return registryDown(err)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"another_day_allowed_today": true})
	return nil
}

// SpendStopKeyPrefix begins the keys of the manager's spend-stop notices
// (one a day); the gateway refuses it from a sandbox.
const SpendStopKeyPrefix = "spend-limit-"

// spendLimitReached tells the owner, once a day, that a call was refused
// for spend (through the notification path; the key makes it once).
func (s *Server) spendLimitReached(user string) {
	if s.Notifications == nil {
		return
	}
	day := time.Now().UTC().Format("2006-01-02")
	text := fmt.Sprintf("Your agent stopped: its spend limit was reached on %s. Raise today's limit once with POST /api/spend/another-day.", day)
	s.tellOwner(context.Background(), user, registry.Notification{Key: SpendStopKeyPrefix + day, Text: text, Kind: gatewayapi.KindSpend})
}

// tellOwner hands the owner one of the manager's own notices: through the
// notification path (its key makes it once) and, when new, on the live
// stream.
func (s *Server) tellOwner(ctx context.Context, user string, n registry.Notification) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	created, err := s.Notifications.EnqueueNotification(ctx, user, n, 1<<30)
	if err != nil {
		s.Log.Warn("owner not notified", "user", user, "kind", n.Kind, "err", err)
		return
	}
	if created {
		s.live.publish(user, LiveNotice{Kind: n.Kind, Agent: n.Agent, Text: n.Text, At: time.Now().UTC()})
	}
	if s.Kick != nil {
		s.Kick()
	}
}
