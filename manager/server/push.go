package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/manager/notify"
	"github.com/affido/affido/manager/outbound"
	"github.com/affido/affido/manager/registry"
)

// MaxPushSubscriptions is how many browsers of one user get Web Push; a
// new subscription past it drops the user's oldest (the browser in hand
// is the one that matters, and stale ones are never told they went).
const MaxPushSubscriptions = 20

// PushSubscriptions keeps the owner's Web Push subscriptions (the registry).
type PushSubscriptions interface {
	// PutPushSubscription stores sub for user's web session whose token is
	// session, keeping user's newest max; registry.ErrUnauthenticated when
	// that session is gone.
	PutPushSubscription(ctx context.Context, user, session string, sub registry.PushSubscription, max int) (int64, error)
	// DeletePushSubscription deletes user's subscription of endpoint, if
	// user has it.
	DeletePushSubscription(ctx context.Context, user, endpoint string) error
	PushSubscriptionInfos(ctx context.Context, user, session string) ([]registry.PushSubscriptionInfo, error)
}

func (s *Server) pushRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/push/key", s.ownerRead(s.pushKey))
	mux.HandleFunc("GET /api/push/subscriptions", s.ownerRead(s.pushSubscriptions))
	mux.HandleFunc("POST /api/push/subscriptions", s.serve(s.subscribePush))
	mux.HandleFunc("DELETE /api/push/subscriptions", s.serve(s.unsubscribePush))
}

// pushKey answers the VAPID public key, the applicationServerKey a page
// subscribes with.
func (s *Server) pushKey(r *http.Request, user string) (any, error) {
	return map[string]string{"public_key": s.PushKey}, nil
}

func (s *Server) pushSubscriptions(r *http.Request, user string) (any, error) {
	session, _ := credentials(r)
	list, err := s.Push.PushSubscriptionInfos(r.Context(), user, session)
	return map[string]any{"subscriptions": list}, err
}

// pushSubscriptionBody is a browser's PushSubscription.toJSON().
type pushSubscriptionBody struct {
	Endpoint       string   `json:"endpoint"`
	ExpirationTime *float64 `json:"expirationTime"` // sent by browsers, not used
	Keys           struct {
		P256dh string `json:"p256dh"`
		Auth   string `json:"auth"`
	} `json:"keys"`
}

// subscribePush stores the calling browser's push subscription under its
// web session, which sign-out and revoke end with it. An API token has no
// browser and no session to bind to: refused.
func (s *Server) subscribePush(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	session, bearer := credentials(r)
	if bearer != "" {
		return problem.New(http.StatusForbidden, "push-needs-session",
			"a push subscription belongs to a browser's web session: subscribe from the web client (session cookie), not with an API token")
	}
	var body pushSubscriptionBody
	if err := decodeStrict(w, r, 8<<10, &body); err != nil {
		return problem.New(http.StatusBadRequest, "bad-subscription",
			`send the browser's PushSubscription as JSON: {"endpoint": "https://…", "keys": {"p256dh": "…", "auth": "…"}}`)
	}
	sub, err := notify.ParseSubscription(body.Endpoint, body.Keys.P256dh, body.Keys.Auth, s.PushPlainHTTP...)
	if err != nil {
		return problem.New(http.StatusBadRequest, "bad-subscription", err.Error())
	}
	if s.URLCheck != nil { // refused now what delivery would refuse at every push
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		err := s.URLCheck.CheckURL(ctx, sub.Endpoint)
		cancel()
		switch {
		case errors.Is(err, outbound.ErrRefused):
			return problem.New(http.StatusBadRequest, "url-refused", "the endpoint leads to an address pushes may not reach (loopback, private, the control network, the sandbox pool)")
		case err != nil:
			return problem.New(http.StatusBadRequest, "url-unresolved", "the endpoint's host does not resolve: "+err.Error())
		}
	}
	id, err := s.Push.PutPushSubscription(r.Context(), user, session, sub, MaxPushSubscriptions)
	if errors.Is(err, registry.ErrEndpointTaken) {
		return problem.New(http.StatusConflict, "endpoint-taken", "this push endpoint belongs to another user's subscription")
	}
	if errors.Is(err, registry.ErrUnauthenticated) { // signed out or revoked meanwhile
		return problem.New(http.StatusUnauthorized, "unauthenticated", "the session ended; sign in again")
	}
	if err != nil {
		return registryDown(err)
	}
	writeJSONStatus(w, http.StatusCreated, map[string]any{"id": id})
	return nil
}

// unsubscribePush deletes the caller's subscription of an endpoint (a
// browser unsubscribing); another user's, or none, is left alone and
// answered the same.
func (s *Server) unsubscribePush(w http.ResponseWriter, r *http.Request) error {
	user, err := s.owner(w, r)
	if err != nil {
		return err
	}
	var body struct {
		Endpoint string `json:"endpoint"`
	}
	if err := decodeStrict(w, r, 4<<10, &body); err != nil || body.Endpoint == "" || len(body.Endpoint) > notify.MaxEndpoint {
		return problem.New(http.StatusBadRequest, "bad-json", `send {"endpoint": "https://…"}`)
	}
	if err := s.Push.DeletePushSubscription(r.Context(), user, body.Endpoint); err != nil {
		return registryDown(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// decodeStrict reads one JSON value of at most limit bytes into v: no
// unknown field, nothing after it.
func decodeStrict(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("more than one JSON value")
	}
	return nil
}
