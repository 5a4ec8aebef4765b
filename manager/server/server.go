// Package server is the manager's HTTP edge: the forward_auth target
// (/v1/resolve), health and metrics, the gateway routes sandboxes reach
// through Caddy, and the local admin API behind `affido admin`.
package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/affido/affido/internal/edgeapi"
	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/agentdb"
	"github.com/affido/affido/manager/connectors"
	"github.com/affido/affido/manager/edge"
	"github.com/affido/affido/manager/gateway"
	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/spend"
	"github.com/affido/affido/manager/web"
)

// SessionCookie is the web client's session cookie.
const SessionCookie = "better-auth.session_token"

// EndpointHeader and RetryHeader are the resolve's answers to Caddy
// (internal/edgeapi).
const (
	EndpointHeader = edgeapi.EndpointHeader
	RetryHeader    = edgeapi.RetryHeader
)

// A sandbox hands its owner at most NotifyBurst notifications at once,
// then one every NotifyEvery (120 an hour).
const (
	NotifyBurst = 30
	NotifyEvery = 30 * time.Second
)

// SourceIPHeader is set by Caddy's gateway listener to the caller's address.
const SourceIPHeader = "X-Affido-Source-Ip"

// Authenticator maps credentials to a user id. Both methods return
// registry.ErrUnauthenticated for unknown or expired credentials and any
// other error when the store cannot answer. UserForSession also says when
// the session expires; UserForAPIToken only reads (TokenUse records the use).
type Authenticator interface {
	UserForSession(ctx context.Context, token string) (user string, expires time.Time, err error)
	UserForAPIToken(ctx context.Context, token string) (string, error)
}

// Resolver brings a user's sandbox up and returns its endpoint.
type Resolver interface {
	Resolve(ctx context.Context, user string, activating bool) (netip.AddrPort, error)
	// Touch records a request Caddy answered from its kept decision, as
	// Resolve records one (activity, the pause held off).
	Touch(user string, activating bool)
}

// Health reports readiness of the manager's dependencies.
type Health interface {
	Ping(ctx context.Context) error
	EventsUp() bool
}

// SandboxAuth finds the sandbox a gateway token belongs to.
type SandboxAuth interface {
	SandboxForToken(ctx context.Context, token string) (registry.Sandbox, error)
}

// Server is the manager's public HTTP edge. Its dependencies come in three
// groups, one per area it serves; the handlers reach them as s.Auth,
// s.Provider, s.Accounts and so on.
type Server struct {
	EdgeDeps
	GatewayDeps
	OwnerDeps
	Log *slog.Logger

	authGuard        authGuard
	resolveObservers sync.Map // result -> prometheus.Observer
	live             liveHub
	notifyRateOnce   sync.Once
	notifyRate       *authThrottle // per user: notifications a sandbox hands over
	signInState
}

// EdgeDeps serve forward_auth (/v1/resolve) and /healthz; Metrics are
// observed here and served on the admin socket (Admin).
type EdgeDeps struct {
	Auth     Authenticator
	Resolver Resolver
	Health   Health
	Metrics  *lifecycle.Metrics
	// AuthTimeout bounds credential lookups so a Postgres outage answers 503 quickly.
	AuthTimeout time.Duration
	// Credentials caches what Auth answers (AFFIDO_AUTH_CACHE_TTL); nil
	// asks Auth every time. TokenUse records API token use for a batched
	// write; nil records none.
	Credentials *CredentialCache
	TokenUse    *TokenUse
	// Decisions, if set, lets Caddy keep a resolve's 200 for up to
	// EdgeTTL (AFFIDO_EDGE_TTL) and answers its polls, authenticated by
	// ControlKey (manager/edge).
	Decisions  *edge.Decisions
	EdgeTTL    time.Duration
	ControlKey string
	// Handoff ends, when it is done, the resolves still waiting for a
	// sandbox: the manager is stopping, and they answer 503 with
	// RetryHeader so that Caddy asks the next manager. Nil: never.
	Handoff context.Context
}

// GatewayDeps serve the routes sandboxes reach through Caddy's gateway
// listener: models, web tools, the marketplace, notifications and wake
// reports.
type GatewayDeps struct {
	Gateway SandboxAuth
	// Provider answers the gateway's chat completions (fake or openrouter).
	Provider gateway.Provider
	Usage    gateway.UsageRecorder
	// Spend control of the gateway (see gateway.Handler); SpendLimits are
	// also the defaults the owner's /api/spend shows.
	Prices      map[string]spend.Price
	FreeModels  map[string]bool
	Ledger      spend.Ledger
	SpendLimits spend.Limits
	// WebPrices and WebPerMinute charge and limit web_search and fetch_url
	// (see gateway.Web) on the same Ledger.
	WebPrices    spend.WebPrices
	WebPerMinute int
	// BrowserPrice is what a minute of the agents' browser actions costs,
	// in micro-dollars, on the same Ledger (0: not charged).
	BrowserPrice int64
	// Notifications stores notifications sandboxes hand over; Kick starts delivery.
	Notifications interface {
		// EnqueueNotification stores a notification (its Key, Text, DueAt,
		// Kind and Agent) once per key; with max pending ones queued
		// already it returns registry.ErrQueueFull.
		EnqueueNotification(ctx context.Context, user string, n registry.Notification, max int) (bool, error)
	}
	Kick func()
	// NotifyQueueMax caps a user's pending notifications (default 100).
	NotifyQueueMax int
	// Wakes keeps each agent's reported next due time.
	Wakes interface {
		ReportWake(ctx context.Context, user string, at *time.Time) error
	}
	// FetchClient is the guarded outbound client fetch_url uses; Search
	// answers web_search. Without a FetchClient neither route is served.
	FetchClient *http.Client
	Search      gateway.Searcher
	// MarketplaceDir holds the built marketplace served to sandboxes.
	MarketplaceDir string
	// Connectors, if set, serves the owner's connectors (remote MCP
	// servers): the agents' tool list and calls through the gateway, and
	// the owner's /api/connectors with Accounts. Wire its Notify to
	// ConnectorNotice.
	Connectors *connectors.Service
	// Browser, if set, runs the agents' browser actions: a browser
	// sandbox per user (manager/browser). nil: no browser route.
	Browser Browser
	// AgentStorage hands a sandbox its user's Postgres storage credential
	// and relays its connections to that database alone (manager/agentdb):
	// for agents on Postgres (AFFIDO_AGENT_STORAGE=postgres, or moved
	// there by admin migrate-storage). nil: no storage routes.
	AgentStorage interface {
		Credential(ctx context.Context, user string) (gatewayapi.StorageCredential, error)
		Connect(w http.ResponseWriter, r *http.Request, user string) error
	}
}

// OwnerDeps serve the owner's routes: sign-in and sign-up, sessions and
// API tokens, the sandbox and notification settings, Web Push, spend.
type OwnerDeps struct {
	// Accounts, if set, serves sign-in, sign-up and the owner's sessions
	// and API tokens; OpenSignUp lets anyone sign up without an invite.
	Accounts   Accounts
	Owners     Owners     // with Accounts: the owner's activity, sandbox and notification URL
	URLCheck   URLChecker // refuses a notification URL that leads inward
	OpenSignUp bool
	// SecureCookies marks the session cookie Secure (the site is https).
	SecureCookies bool
	SessionTTL    time.Duration  // default DefaultSessionTTL
	HashParams    account.Params // default account.DefaultParams
	// Push, if set with Accounts, serves the owner's Web Push routes;
	// PushKey is the VAPID public key (base64url) browsers subscribe with.
	Push    PushSubscriptions
	PushKey string
	// PushPlainHTTP are the ranges whose addresses may be plain-http push
	// endpoints (the operator's explicit outbound allow list).
	PushPlainHTTP []netip.Prefix
	// SpendOwner is the owner's view of spend (/api/spend), served with a Provider.
	SpendOwner interface {
		Spend(ctx context.Context, user string, def spend.Limits) (registry.SpendReport, error)
		AllowAnotherDay(ctx context.Context, user string) error
	}
}

// Handler returns the public handler (reached from Caddy on the control network).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/resolve", s.serve(s.resolve))
	mux.HandleFunc("GET /healthz", s.serve(s.healthz))
	if s.Decisions != nil {
		mux.HandleFunc("POST "+edgeapi.PollPath, s.serve(s.edgePoll))
	}
	mux.HandleFunc("GET "+gatewayapi.Prefix+gatewayapi.WhoamiPath, s.serve(s.whoami))
	mux.HandleFunc("POST "+gatewayapi.Prefix+gatewayapi.NotifyPath, s.serve(s.notify))
	mux.HandleFunc("POST "+gatewayapi.Prefix+gatewayapi.WakeAtPath, s.serve(s.wakeAt))
	if s.AgentStorage != nil {
		mux.HandleFunc("GET "+gatewayapi.Prefix+gatewayapi.StoragePath, s.serve(s.storageCredential))
		mux.HandleFunc("GET "+gatewayapi.Prefix+gatewayapi.StorageConnectPath, s.serve(s.storageConnect))
	}
	if s.FetchClient != nil {
		search := s.Search
		if search == nil {
			search = gateway.ScriptedSearch{}
		}
		(&gateway.Web{Caller: s.caller, Client: s.FetchClient, Search: search, Log: s.Log, Ledger: s.Ledger, Limits: s.SpendLimits,
			Prices: s.WebPrices, PerMinute: s.WebPerMinute, OnLimit: s.spendLimitReached}).Register(mux)
	}
	if s.Connectors != nil {
		s.connectorGatewayRoutes(mux)
	}
	if s.Browser != nil {
		mux.HandleFunc("POST "+gatewayapi.Prefix+gatewayapi.BrowserPath, s.serve(s.browserAction))
	}
	if s.MarketplaceDir != "" {
		(&gateway.Marketplace{Dir: s.MarketplaceDir, Caller: s.caller}).Register(mux)
	}
	if s.Provider != nil {
		(&gateway.Handler{Caller: s.caller, Provider: s.Provider, Usage: s.Usage, Log: s.Log,
			Prices: s.Prices, Free: s.FreeModels, Ledger: s.Ledger, Limits: s.SpendLimits, OnLimit: s.spendLimitReached}).Register(mux)
		mux.HandleFunc("GET /api/spend", s.serve(s.spendReport))
		mux.HandleFunc("POST /api/spend/another-day", s.serve(s.anotherDay))
	}
	mux.HandleFunc(gatewayapi.Prefix+"/", s.serve(func(w http.ResponseWriter, r *http.Request) error {
		return problem.New(http.StatusNotFound, "not-found", "no such gateway route")
	}))
	if s.Accounts != nil {
		s.authRoutes(mux)
		mux.HandleFunc("POST /api/render", s.serve(s.render))
		if s.Owners != nil {
			s.ownerRoutes(mux)
		}
		if s.Push != nil {
			s.pushRoutes(mux)
		}
		if s.Connectors != nil {
			s.connectorOwnerRoutes(mux)
		}
		if s.Browser != nil {
			s.browserOwnerRoutes(mux)
		}
		(&web.Handler{Sessions: webSessions{s}, Cookie: SessionCookie, Log: s.Log}).Register(mux)
	} else {
		mux.HandleFunc("GET /app/", s.app)
	}
	mux.HandleFunc("/auth/", s.serve(notFound))
	mux.HandleFunc("/api/", s.serve(notFound))
	mux.HandleFunc("/", s.serve(func(w http.ResponseWriter, r *http.Request) error {
		return problem.New(http.StatusNotFound, "not-found", "no such route")
	}))
	return mux
}

func notFound(w http.ResponseWriter, r *http.Request) error {
	return problem.New(http.StatusNotFound, "not-found", "no such route: "+r.Method+" "+r.URL.Path)
}

// app answers /app/ when there are no accounts to sign in with (tests).
func (s *Server) app(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte("<!doctype html><title>Affido</title><h1>Affido</h1><p>No accounts are configured here. Use the HTTP API under <code>/u/&lt;user&gt;/</code>.</p>\n"))
}

// credentials returns the session token or bearer token of r.
func credentials(r *http.Request) (session, bearer string) {
	if c, err := r.Cookie(SessionCookie); err == nil {
		session = c.Value
	}
	if h := r.Header.Get("Authorization"); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		bearer = strings.TrimSpace(h[7:])
	}
	return session, bearer
}

// throttledError refuses a credential without looking it up, while a
// failed-auth throttle it counts against has no failure left.
type throttledError struct{ wait time.Duration }

func (e *throttledError) Error() string { return fmt.Sprintf("throttled for %s", e.wait) }

// authenticate returns the user session or bearer (the request's
// credentials, presented from address src for user's resources, "" for
// the owner's own) belongs to, from the cache or, within AuthTimeout, from
// Auth; fresh skips the cache's answer.
//
// A credential that authenticated here lately (knownCredentials) is looked
// up whatever the throttles say. Any other counts, before its lookup,
// against the failed-auth throttles of src, of src and user, and of
// itself, and gets *throttledError, with no lookup, while one has no failure
// left; a success gives the counts back. A known credential that is
// refused (revoked, expired) is forgotten and its failure counted.
func (s *Server) authenticate(ctx context.Context, src, user, session, bearer string, fresh bool) (string, error) {
	kind, token := sessionCred, session
	if bearer != "" {
		kind, token = apiTokenCred, bearer
	}
	if token == "" {
		return "", registry.ErrUnauthenticated
	}
	g := s.guard()
	k := keyOf(kind, token)
	limits := g.limits(src, user, k)
	known := g.known.has(k)
	var reserved []reservation
	if !known {
		var wait time.Duration
		var ok bool
		if reserved, wait, ok = reserveAll(limits...); !ok {
			// A burst of a new credential's first requests: while the
			// same credential is being looked up, its answer decides, not
			// the count of attempts in flight.
			if !g.known.has(k) && (!g.flights.wait(ctx, k, s.authTimeout()) || !g.known.has(k)) {
				return "", &throttledError{wait}
			}
			known = true
		}
	}
	if !known {
		done := g.flights.start(k)
		defer done()
	}
	var owner string
	var err error
	if kind == apiTokenCred {
		owner, err = s.userForAPIToken(ctx, token, fresh)
	} else {
		owner, err = s.userForSession(ctx, token, fresh)
	}
	switch {
	case err == nil:
		cancelAll(reserved)
		g.known.add(k)
	case errors.Is(err, registry.ErrUnauthenticated):
		if known {
			g.known.forget(k)
			for _, l := range limits {
				l.thr.failed(l.key)
			}
		}
	default: // the registry's failure, not the client's
		cancelAll(reserved)
	}
	return owner, err
}

func (s *Server) authTimeout() time.Duration {
	if s.AuthTimeout <= 0 {
		return 2 * time.Second
	}
	return s.AuthTimeout
}

func (s *Server) userForSession(ctx context.Context, token string, fresh bool) (string, error) {
	return s.Credentials.lookup(keyOf(sessionCred, token), fresh, func() (string, time.Time, error) {
		ctx, cancel := s.authContext(ctx)
		defer cancel()
		return s.Auth.UserForSession(ctx, token)
	})
}

func (s *Server) userForAPIToken(ctx context.Context, token string, fresh bool) (string, error) {
	k := keyOf(apiTokenCred, token)
	user, err := s.Credentials.lookup(k, fresh, func() (string, time.Time, error) {
		ctx, cancel := s.authContext(ctx)
		defer cancel()
		user, err := s.Auth.UserForAPIToken(ctx, token)
		return user, time.Time{}, err
	})
	if err == nil {
		s.TokenUse.record(k.sum)
	}
	return user, err
}

// authContext bounds one credential lookup in the registry.
func (s *Server) authContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.authTimeout())
}

// webSessions gives the web pages the cached session lookup, throttled
// like the account routes'.
type webSessions struct{ s *Server }

func (w webSessions) UserForSession(r *http.Request, token string) (string, error) {
	return w.s.authenticate(r.Context(), sourceAddr(r), "", token, "", false)
}

// resolve is Caddy's forward_auth target. The user id comes only from the
// query Caddy builds from the cleaned path; X-Forwarded-Uri and any client
// X-Sandbox-Endpoint are ignored. Only a 200 carries an endpoint.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request) error {
	start := time.Now()
	result := "ok"
	defer func() { s.observeResolve(result, time.Since(start)) }()
	q := r.URL.Query()
	user, path := q.Get("user"), q.Get("path")
	if !sandboxapi.ValidUser(user) {
		result = "bad_request"
		return problem.New(http.StatusBadRequest, "bad-user-id", "user ids are 1 to 64 characters of A-Z, a-z, 0-9, _ and -")
	}
	var err error
	if _, result, err = s.authorize(w, r, user, forwardedMethod(r), path); err != nil {
		return err
	}
	ctx := r.Context()
	if s.Handoff != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(s.Handoff, cancel)()
	}
	ep, err := s.Resolver.Resolve(ctx, user, sandboxapi.Activating(path))
	var queued *lifecycle.QueuedError
	switch {
	case err != nil && s.Handoff != nil && s.Handoff.Err() != nil:
		result = "handoff"
		w.Header().Set(RetryHeader, "1")
		return problem.New(http.StatusServiceUnavailable, "manager-restarting", "the manager is restarting; ask again").Retry(1)
	case errors.Is(err, lifecycle.ErrCapacity):
		result = "capacity"
		return problem.New(http.StatusTooManyRequests, "over-capacity", "every sandbox slot is busy; try again shortly").Retry(5)
	case errors.As(err, &queued):
		result = "queued"
		return problem.New(http.StatusServiceUnavailable, "sandbox-starting", "your sandbox is being started; it goes on, so ask again after Retry-After seconds").Retry(int(queued.RetryAfter.Seconds() + 0.999))
	case err != nil:
		result = "unavailable"
		return problem.New(http.StatusServiceUnavailable, "sandbox-unavailable", "the sandbox could not be started; try again shortly").Retry(2).
			Because(fmt.Errorf("resolve the sandbox of %s: %w", user, err))
	}
	w.Header().Set(EndpointHeader, ep.String())
	if ttl := s.keepFor(r); ttl > 0 {
		w.Header().Set(edgeapi.TTLHeader, strconv.FormatInt(ttl.Milliseconds(), 10))
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// observeResolve records one resolve's latency by result; the observer of
// each result is looked up once.
func (s *Server) observeResolve(result string, d time.Duration) {
	if s.Metrics == nil {
		return
	}
	o, ok := s.resolveObservers.Load(result)
	if !ok {
		o, _ = s.resolveObservers.LoadOrStore(result, s.Metrics.Resolve.WithLabelValues(result))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// authorize authenticates r (the session cookie or an API token), for
// user's resources or, with user "", anyone's. It applies the failed-auth
// throttles (see authenticate) and, to a write (method) authenticated by
// the cookie, the cross-site rule; it returns every refusal as a problem.
// result names the outcome for the resolve metric ("ok" when err is nil).
//
// Only forward_auth (user set) takes the credential cache's answer. The
// account routes (user "") always ask Postgres: a credential revoked in
// another manager, still cached here, must not mint a token or session
// that outlives it, nor read or change the owner's settings.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, user, method, path string) (owner, result string, err error) {
	session, bearer := credentials(r)
	owner, err = s.authenticate(r.Context(), sourceAddr(r), user, session, bearer, user == "")
	var throttled *throttledError
	switch {
	case errors.As(err, &throttled):
		return "", "throttled", problem.New(http.StatusTooManyRequests, "too-many-failures",
			"too many failed authentications like this one from this address; try again later").Retry(int(throttled.wait.Seconds() + 0.999))
	case errors.Is(err, registry.ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", `Bearer realm="affido"`)
		return "", "unauthenticated", problem.New(http.StatusUnauthorized, "unauthenticated", "send the better-auth.session_token cookie or an Authorization: Bearer API token")
	case err != nil:
		return "", "unavailable", problem.New(http.StatusServiceUnavailable, "unavailable", "the registry is unavailable; try again shortly").Retry(2).
			Because(fmt.Errorf("authenticate for %q: %w", user, err))
	case user != "" && owner != user:
		return "", "forbidden", problem.New(http.StatusForbidden, "forbidden", "these credentials belong to another user")
	}
	if bearer == "" {
		if err := checkCookieWrite(r, method, path); err != nil {
			return "", "cross_site", err
		}
	}
	return owner, "ok", nil
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), time.Second)
	defer cancel()
	if err := s.Health.Ping(ctx); err != nil {
		return problem.New(http.StatusServiceUnavailable, "unhealthy", "postgres does not answer").Because(err)
	}
	if !s.Health.EventsUp() {
		return problem.New(http.StatusServiceUnavailable, "unhealthy", "docker event stream is down")
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"status":"ok"}` + "\n"))
	return nil
}

// sandboxOf authenticates a gateway call: the bearer token must be a
// sandbox's token and the source address Caddy saw must be that sandbox's.
func (s *Server) sandboxOf(r *http.Request) (registry.Sandbox, int, string) {
	_, bearer := credentials(r)
	if bearer == "" {
		return registry.Sandbox{}, http.StatusUnauthorized, "missing sandbox token"
	}
	sb, err := s.Gateway.SandboxForToken(r.Context(), bearer)
	if errors.Is(err, registry.ErrUnauthenticated) {
		return sb, http.StatusUnauthorized, "unknown sandbox token"
	}
	if err != nil {
		return sb, http.StatusServiceUnavailable, "registry unavailable"
	}
	src, err := netip.ParseAddr(r.Header.Get(SourceIPHeader))
	ep, eerr := netip.ParseAddrPort(sb.Endpoint)
	if err != nil || eerr != nil || src.Unmap() != ep.Addr() {
		return sb, http.StatusForbidden, "token used from another address"
	}
	return sb, 0, ""
}

func (s *Server) caller(r *http.Request) (string, int, string) {
	sb, status, why := s.sandboxOf(r)
	return sb.UserID, status, why
}

func (s *Server) whoami(w http.ResponseWriter, r *http.Request) error {
	sb, status, why := s.sandboxOf(r)
	if status != 0 {
		return problem.New(status, "gateway-auth", why)
	}
	writeJSONStatus(w, http.StatusOK, gatewayapi.Whoami{User: sb.UserID})
	return nil
}

// storageCredential answers a sandbox's ask for its user's storage
// credential, making the role and database the first time.
func (s *Server) storageCredential(w http.ResponseWriter, r *http.Request) error {
	user, status, why := s.caller(r)
	if status != 0 {
		return problem.New(status, "gateway-auth", why)
	}
	c, err := s.AgentStorage.Credential(r.Context(), user)
	if errors.Is(err, agentdb.ErrNotOffered) {
		return err
	}
	if err != nil {
		return problem.New(http.StatusServiceUnavailable, "unavailable", "the agents' database is unavailable").Retry(2).Because(err)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSONStatus(w, http.StatusOK, c)
	return nil
}

// storageConnect relays a sandbox's connection to its user's database.
func (s *Server) storageConnect(w http.ResponseWriter, r *http.Request) error {
	user, status, why := s.caller(r)
	if status != 0 {
		return problem.New(status, "gateway-auth", why)
	}
	return s.AgentStorage.Connect(w, r, user)
}

// wakeAt takes an agent's report of its next due time.
func (s *Server) wakeAt(w http.ResponseWriter, r *http.Request) error {
	user, status, why := s.caller(r)
	if status != 0 {
		return problem.New(status, "gateway-auth", why)
	}
	var body gatewayapi.WakeAt
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return problem.New(http.StatusBadRequest, "bad-json", err.Error())
	}
	if s.Wakes == nil {
		return problem.New(http.StatusNotFound, "not-found", "wake reports are not configured")
	}
	if err := s.Wakes.ReportWake(r.Context(), user, body.At); err != nil {
		return registryDown(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// notify takes a notification from a sandbox (a reminder that fired) and
// queues it for delivery; the same key twice is stored once.
func (s *Server) notify(w http.ResponseWriter, r *http.Request) error {
	user, status, why := s.caller(r)
	if status != 0 {
		return problem.New(status, "gateway-auth", why)
	}
	var body gatewayapi.Notification
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	if err := dec.Decode(&body); err != nil {
		return problem.New(http.StatusBadRequest, "bad-json", err.Error())
	}
	// Spend stops and connector notices are the manager's to tell, under
	// keys of its own: a sandbox can neither send one nor take its key
	// first (which would silence the real one).
	for _, prefix := range []string{SpendStopKeyPrefix, ConnectorKeyPrefix} {
		if strings.HasPrefix(body.Key, prefix) {
			return problem.Errorf(http.StatusBadRequest, gatewayapi.ProblemBadNotification, "keys starting %q are the manager's", prefix)
		}
	}
	if !body.Valid() || body.Kind == gatewayapi.KindSpend {
		return problem.Errorf(http.StatusBadRequest, gatewayapi.ProblemBadNotification,
			"key (1-%d bytes) and text (1-%d bytes) are required; kind is reminder, approval, job or none, agent an agent's name or none",
			gatewayapi.MaxNotifyKey, gatewayapi.MaxNotifyText)
	}
	if s.Notifications == nil {
		return problem.New(http.StatusNotFound, "not-found", "notifications are not configured")
	}
	// A sandbox cannot flood its owner's devices: a token bucket per user
	// (NotifyBurst at once, one more every NotifyEvery).
	s.notifyRateOnce.Do(func() { s.notifyRate = newAuthThrottle(NotifyEvery, NotifyBurst) })
	if _, wait, ok := s.notifyRate.reserve(user); !ok {
		return problem.Errorf(http.StatusTooManyRequests, gatewayapi.ProblemQueueFull,
			"more than %d notifications in a short time; one more may go every %s", NotifyBurst, NotifyEvery).Retry(int(wait.Seconds() + 0.999))
	}
	max := s.NotifyQueueMax
	if max <= 0 {
		max = 100
	}
	created, err := s.Notifications.EnqueueNotification(r.Context(), user, registry.Notification{
		Key: body.Key, Text: body.Text, DueAt: body.DueAt, Kind: body.Kind, Agent: body.Agent}, max)
	if errors.Is(err, registry.ErrQueueFull) {
		return problem.Errorf(http.StatusTooManyRequests, gatewayapi.ProblemQueueFull, "%d notifications are already waiting to be delivered", max).Retry(60)
	}
	if err != nil {
		return registryDown(err)
	}
	if s.Kick != nil {
		s.Kick()
	}
	if created {
		s.live.publish(user, LiveNotice{Kind: cmp.Or(body.Kind, noticeKind(body.Key)), Agent: body.Agent, Text: body.Text, At: time.Now().UTC()})
	}
	writeJSONStatus(w, http.StatusAccepted, gatewayapi.Queued{Key: body.Key, Queued: created})
	return nil
}
