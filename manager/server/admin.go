package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/profiling"
	"github.com/affido/affido/internal/sandboxapi"
	"github.com/affido/affido/manager/account"
	"github.com/affido/affido/manager/lifecycle"
	"github.com/affido/affido/manager/registry"
	"github.com/affido/affido/manager/spend"
)

// Admin serves the operator API behind `affido admin`. It listens on the
// manager's loopback only (reach it with docker exec), never on a network.
type Admin struct {
	Manager *lifecycle.Manager
	Store   AdminStore
	// SpendLimits are the default limits a user's own limits replace.
	SpendLimits spend.Limits
	// Credentials is the public Server's cache, told of what an admin
	// change ends (a new password ends the user's sessions).
	Credentials *CredentialCache
	// Metrics are the manager's Prometheus metrics, served here alone
	// (GET /admin/metrics): no network reaches them.
	Metrics *lifecycle.Metrics
	// Archiver takes and restores sandboxes' archives (nil: the backup
	// and restore calls answer 501).
	Archiver Archiver
	// Mover moves a user's agents' databases between SQLite and Postgres
	// (nil: the call answers 501).
	Mover StorageMover
	Maker StorageMaker
	// Log records the failures the API answers with a request id
	// (default slog.Default).
	Log *slog.Logger
}

// Handler returns the admin API.
func (a *Admin) Handler() http.Handler {
	mux := http.NewServeMux()
	if a.Metrics != nil {
		mux.Handle("GET /admin/metrics", promhttp.HandlerFor(prometheus.Gatherers{a.Metrics.Registry, prometheus.DefaultGatherer}, promhttp.HandlerOpts{}))
	}
	// Go profiles over a window (affido bench --profile), on this socket
	// alone like the metrics.
	mux.Handle("GET /admin/profile/", http.StripPrefix("/admin/profile", profiling.Handler()))
	mux.HandleFunc("GET /admin/sandboxes", a.serve(func(w http.ResponseWriter, r *http.Request) error {
		list, err := a.Manager.Sandboxes(r.Context())
		if err != nil {
			return problem.New(http.StatusServiceUnavailable, "unavailable", "the sandboxes could not be listed").Because(err)
		}
		writeJSON(w, list)
		return nil
	}))
	mux.HandleFunc("GET /admin/pool", func(w http.ResponseWriter, r *http.Request) {
		size, ready := a.Manager.PoolSize()
		writeJSON(w, map[string]int{"size": size, "ready": ready})
	})
	mux.HandleFunc("POST /admin/pool", a.serve(func(w http.ResponseWriter, r *http.Request) error {
		size, _ := a.Manager.PoolSize()
		if v := r.URL.Query().Get("size"); v != "" && v != "-1" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1000 {
				return problem.New(http.StatusBadRequest, "bad-size", "size is the number of warm-pool sandboxes, 0 to 1000")
			}
			size = n
		}
		drain := r.URL.Query().Get("drain") == "1"
		if err := a.Manager.SetPool(r.Context(), size, drain); err != nil {
			return adminFailed(fmt.Errorf("set the pool to %d: %w", size, err))
		}
		writeJSON(w, map[string]any{"size": size, "drained": drain})
		return nil
	}))
	mux.HandleFunc("POST /admin/capacity", a.serve(func(w http.ResponseWriter, r *http.Request) error {
		n, err := strconv.Atoi(r.URL.Query().Get("max"))
		if err != nil || n < 0 {
			return problem.New(http.StatusBadRequest, "bad-capacity", "max is how many sandboxes may run at once, 0 for no limit")
		}
		a.Manager.SetMaxRunning(n)
		writeJSON(w, map[string]any{"max_running": n})
		return nil
	}))
	mux.HandleFunc("POST /admin/evict", a.withUser(func(w http.ResponseWriter, r *http.Request, user string) error {
		to := lifecycle.State(cmp.Or(r.URL.Query().Get("to"), string(lifecycle.Removed)))
		err := a.Manager.EvictTo(r.Context(), user, to)
		if errors.Is(err, lifecycle.ErrNotATier) {
			return problem.New(http.StatusBadRequest, "bad-tier", "to is paused, stopped or removed (the default)")
		}
		return err
	}))
	mux.HandleFunc("GET /admin/backup", a.withUser(a.withArchiver(a.backup)))
	mux.HandleFunc("POST /admin/restore", a.withUser(a.withArchiver(a.restore)))
	mux.HandleFunc("POST /admin/migrate-storage", a.withUser(a.migrateStorage))
	mux.HandleFunc("POST /admin/reset", a.withUser(func(w http.ResponseWriter, r *http.Request, user string) error {
		return a.Manager.Reset(r.Context(), user)
	}))
	mux.HandleFunc("POST /admin/token", a.withUser(func(w http.ResponseWriter, r *http.Request, user string) error {
		tok, err := a.Store.CreateAPIToken(r.Context(), user)
		if err != nil {
			return err
		}
		writeJSON(w, map[string]string{"user": user, "token": tok})
		return nil
	}))
	mux.HandleFunc("POST /admin/spend", a.withUser(func(w http.ResponseWriter, r *http.Request, user string) error {
		usd := func(key string) (*int64, error) {
			v := r.URL.Query().Get(key)
			if v == "" {
				return nil, nil
			}
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, problem.New(http.StatusBadRequest, "bad-limit", key+" is a non-negative amount of USD such as 2.50")
			}
			m := spend.USD(f)
			return &m, nil
		}
		daily, err := usd("daily")
		if err != nil {
			return err
		}
		monthly, err := usd("monthly")
		if err != nil {
			return err
		}
		if daily != nil || monthly != nil {
			if err := a.Store.SetSpendLimits(r.Context(), user, daily, monthly); err != nil {
				return err
			}
		}
		rep, err := a.Store.Spend(r.Context(), user, a.SpendLimits)
		if err != nil {
			return err
		}
		writeJSON(w, rep)
		return nil
	}))
	mux.HandleFunc("POST /admin/notify", a.withUser(func(w http.ResponseWriter, r *http.Request, user string) error {
		u := r.URL.Query().Get("url")
		if u != "" {
			parsed, err := url.Parse(u)
			if err != nil || (parsed.Scheme != "http" && parsed.Scheme != "https") || parsed.Host == "" {
				return problem.New(http.StatusBadRequest, "bad-url", "the notify URL must be an http(s) URL")
			}
		}
		return a.Store.SetNotifyURL(r.Context(), user, u)
	}))
	mux.HandleFunc("POST /admin/session", a.withUser(func(w http.ResponseWriter, r *http.Request, user string) error {
		tok := r.URL.Query().Get("token")
		if tok == "" {
			tok = registry.NewToken()
		}
		ttl := 30 * 24 * time.Hour
		if s := r.URL.Query().Get("ttl"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return problem.New(http.StatusBadRequest, "bad-ttl", "ttl must be a positive Go duration such as 720h")
			}
			ttl = d
		}
		err := a.Store.PutSession(r.Context(), user, tok, time.Now().Add(ttl))
		a.Credentials.ForgetSession(tok) // the token may have been another user's, or had another expiry
		a.Credentials.ForgetEdge("")     // whose it was is not known here
		if err != nil {
			return err
		}
		writeJSON(w, map[string]string{"user": user, "token": tok})
		return nil
	}))
	mux.HandleFunc("POST /admin/invite", a.withUser(func(w http.ResponseWriter, r *http.Request, user string) error {
		ttl := 72 * time.Hour
		if s := r.URL.Query().Get("ttl"); s != "" {
			d, err := time.ParseDuration(s)
			if err != nil || d <= 0 {
				return problem.New(http.StatusBadRequest, "bad-ttl", "ttl must be a positive Go duration such as 72h")
			}
			ttl = d
		}
		code, err := a.Store.CreateInvite(r.Context(), user, ttl)
		if err != nil {
			return err
		}
		writeJSON(w, map[string]string{"user": user, "invite": code, "expires_at": time.Now().Add(ttl).UTC().Format(time.RFC3339)})
		return nil
	}))
	// The CLI hashes the password itself; only the hash crosses the socket.
	mux.HandleFunc("POST /admin/password", a.withUser(func(w http.ResponseWriter, r *http.Request, user string) error {
		hash := r.URL.Query().Get("hash")
		if _, err := account.Verify("", hash); err != nil {
			return problem.New(http.StatusBadRequest, "bad-hash", "hash must be an argon2id PHC string")
		}
		err := a.Store.SetPassword(r.Context(), user, hash)
		a.Credentials.ForgetUser(user) // even on an error: the transaction may have committed
		return err
	}))
	return mux
}

// AdminStore is the registry as the admin API changes it.
type AdminStore interface {
	CreateAPIToken(ctx context.Context, user string) (string, error)
	SetSpendLimits(ctx context.Context, user string, daily, monthly *int64) error
	Spend(ctx context.Context, user string, def spend.Limits) (registry.SpendReport, error)
	SetNotifyURL(ctx context.Context, user, url string) error
	// PutSession stores token as user's session until expires, replacing
	// whatever session had that token.
	PutSession(ctx context.Context, user, token string, expires time.Time) error
	CreateInvite(ctx context.Context, user string, ttl time.Duration) (string, error)
	// SetPassword sets user's password hash and ends the user's sessions.
	SetPassword(ctx context.Context, user, hash string) error
}

var _ AdminStore = (*registry.Store)(nil)

// withUser runs fn for the user the query names; an error fn returns
// that is no problem of the client's is an admin failure (500).
func (a *Admin) withUser(fn func(http.ResponseWriter, *http.Request, string) error) http.HandlerFunc {
	return a.serve(func(w http.ResponseWriter, r *http.Request) error {
		user := r.URL.Query().Get("user")
		if !sandboxapi.ValidUser(user) {
			return problem.New(http.StatusBadRequest, "bad-user-id", "user ids are 1 to 64 characters of A-Z, a-z, 0-9, _ and -")
		}
		if err := fn(w, r, user); err != nil {
			if problemOf(err) != nil {
				return err
			}
			return adminFailed(fmt.Errorf("%s for %s: %w", r.URL.Path, user, err))
		}
		if w.Header().Get("Content-Type") == "" {
			writeJSON(w, map[string]string{"user": user, "status": "done"})
		}
		return nil
	})
}

// withArchiver answers 501 when the manager has no Archiver.
func (a *Admin) withArchiver(fn func(http.ResponseWriter, *http.Request, string) error) func(http.ResponseWriter, *http.Request, string) error {
	return func(w http.ResponseWriter, r *http.Request, user string) error {
		if a.Archiver == nil {
			return problem.New(http.StatusNotImplemented, "no-archiver", "this manager takes no backups")
		}
		return fn(w, r, user)
	}
}

func (a *Admin) serve(h handlerFunc) http.HandlerFunc { return handle(a.Log, h) }

// adminFailed is the 500 of an admin call that failed; the operator finds
// why in the manager's log under the request id.
func adminFailed(err error) error {
	return problem.New(http.StatusInternalServerError, "admin-failed", "the call failed; the manager's log has why, under the request id").Because(err)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
