// Package server is the agent's HTTP API inside its sandbox container
// (ARCHITECTURE.md section 4). Storage (the session database and the
// durable harness over it) opens on the first request to a route that needs
// it; /health, /claim, /status, /ingest, /pause and the workspace file
// routes never open it, and /status answers from a small cache written
// whenever storage opens or closes. Until the manager has bound the sandbox
// to its user (POST /claim) only /health and /claim answer.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/citations"
	"github.com/affido/affido/agent/corpus"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/identity"
	"github.com/affido/affido/agent/policy"
	"github.com/affido/affido/agent/skills"
	"github.com/affido/affido/agent/workspace"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
)

// Config is what the server needs.
type Config struct {
	// Identity is whom the sandbox belongs to (required); POST /claim sets it.
	Identity     *identity.Store
	SessionDB    string // the SQLite file; its directory also holds the status cache and the corpus
	Workspace    string
	Model        durable.Model
	DefaultModel string
	// Models lists the models the gateway serves (to refuse an unknown one
	// before anything is written). Nil accepts any.
	Models  func(ctx context.Context) ([]string, error)
	Harness durable.Options // Model and DefaultModel are filled from above
	Skills  *skills.Installer
	Log     *slog.Logger
	// Quota caps the bytes of the workspace and the corpus together (0: none).
	Quota int64
	// WorkerTools and WorkerSystem are the worker agent's tools (web tools:
	// none of the owner's data) and system prompt.
	WorkerTools  []durable.Tool
	WorkerSystem string
	// OnApproval returns tasks to commit with a new approval of agent
	// (the owner's notification).
	OnApproval func(agent string, a durable.Approval, proposal *policy.Rule) []durable.Task
	// MessageTimeout bounds how long send_message and delegate wait for a
	// reply (default 10 min).
	MessageTimeout time.Duration
	// Caller is the one address allowed to call the API: Caddy's on the
	// user network. Anything else inside the sandbox (a program the model
	// wrote, calling localhost or the container's own address) is refused,
	// except GET /health, which tells no more than whose sandbox it is (the
	// tools work for that user anyway). Zero allows any address
	// (tests, development outside the sandbox).
	Caller netip.Addr
	// CallerKeyHash, when not zero, is the sha256 of the key every request
	// must carry in sandboxapi.HeaderCaller (but GET /health, as above):
	// Caddy sets it where its address is not fixed (Kubernetes). It holds
	// with Caller when both are set.
	CallerKeyHash [sha256.Size]byte
}

// Server is the agent's HTTP server.
type Server struct {
	cfg      Config
	ws       workspace.Workspace
	corpus   *corpus.Corpus
	tools    []durable.Tool // an owner agent's tools: the configured ones and corpus_search
	registry agents.Registry
	deltas   deltaHub // replies as they stream, to the open event streams

	inflight atomic.Int64

	// mu is held while storage opens or closes (all agents at once) and
	// guards wakeTimer. rtMu guards rts alone, so a tool delivering a
	// message never waits on mu, which a closing harness's steps would.
	mu        sync.Mutex
	wakeTimer *time.Timer
	closing   atomic.Bool
	rtMu      sync.RWMutex
	rts       map[string]*runtime // by agent name; nil while storage is closed

	dues dueBoard
}

// New returns a server. If the status cache says storage was open when the
// process last stopped (a crash), storage opens at once so unfinished work
// resumes without waiting for a request.
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	corpusDir := filepath.Join(filepath.Dir(cfg.SessionDB), "corpus")
	s := &Server{cfg: cfg, ws: workspace.Workspace{Dir: cfg.Workspace, Quota: cfg.Quota, Also: []string{corpusDir}},
		corpus: &corpus.Corpus{Dir: corpusDir}}
	if cfg.MessageTimeout <= 0 {
		s.cfg.MessageTimeout = 10 * time.Minute
	}
	s.tools = append(append([]durable.Tool(nil), cfg.Harness.Tools...), citations.Tool(s.corpus))
	s.dues.report = cfg.Harness.OnScheduled
	if st, err := s.readStatus(); err == nil && st.StorageOpen {
		if _, err := s.storage(context.Background(), agents.Main); err != nil {
			cfg.Log.Error("reopen storage after an unclean stop", "err", err)
		}
	}
	return s
}

// Handler returns the agent's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	allowed := map[string][]string{} // path -> methods, for 405 answers
	handle := func(pattern string, h handlerFunc) {
		method, p, _ := strings.Cut(pattern, " ")
		allowed[p] = append(allowed[p], method)
		mux.HandleFunc(pattern, s.serve(h))
	}
	handle("GET "+sandboxapi.HealthPath, s.health)
	handle("POST "+sandboxapi.ClaimPath, s.claim)
	handle("GET /status", s.status)
	handle("POST /ingest", s.ingest)
	handle("GET /raw", s.raw)
	handle("GET /session", s.session)
	handle("GET /sessions", s.sessions)
	handle("GET /models", s.models)
	handle("POST /session/new", s.sessionNew)
	handle("POST /session/switch", s.sessionSwitch)
	handle("POST /session/rename", s.sessionRename)
	handle("GET /reminders", s.reminderList)
	handle("POST /reminders/{id}/cancel", s.reminderCancel)
	handle("POST /reset", s.reset)
	handle("GET /inspect", s.inspect)
	handle("GET /entry", s.entry)
	handle("GET /files", s.files)
	handle("GET /file", s.file)
	handle("DELETE /files", s.fileDelete)
	handle("POST /prompt", s.prompt)
	handle("POST "+sandboxapi.PausePath, s.pause)
	handle("POST "+sandboxapi.WakePath, s.wake)
	handle("PUT /uploads/{path...}", s.upload)
	handle("GET /uploads/{path...}", s.download("uploads"))
	handle("GET /artifacts/{path...}", s.download("artifacts"))
	handle("GET /corpus/citations", s.citations)
	handle("GET /events", s.events)
	handle("GET /approvals", s.approvals)
	handle("POST /approvals/{id}", s.decide)
	handle("GET /rules", s.rules)
	handle("POST /rules", s.ruleAdd)
	handle("DELETE /rules/{id}", s.ruleRemove)
	handle("GET /skills", s.skillsList)
	handle("GET /skills/marketplace", s.skillsMarketplace)
	handle("POST /skills/install", s.skillsInstall)
	handle("DELETE /skills/{name}", s.skillsRemove)
	handle("GET /agents", s.agentsList)
	handle("POST /agents", s.agentCreate)
	handle("GET /agents/{name}", s.agentGet)
	handle("PATCH /agents/{name}", s.agentUpdate)
	handle("DELETE /agents/{name}", s.agentDelete)
	handle("GET /jobs", s.jobList)
	handle("POST /jobs", s.jobCreate)
	handle("POST /jobs/{id}/pause", s.jobPause)
	handle("POST /jobs/{id}/resume", s.jobResume)
	handle("DELETE /jobs/{id}", s.jobDelete)
	mux.HandleFunc("/", s.serve(func(w http.ResponseWriter, r *http.Request) error {
		if methods, ok := allowed[r.URL.Path]; ok {
			w.Header().Set("Allow", strings.Join(methods, ", "))
			return problem.New(http.StatusMethodNotAllowed, "method-not-allowed", r.Method+" is not allowed on "+r.URL.Path)
		}
		return problem.New(http.StatusNotFound, "not-found", "no such route: "+r.Method+" "+r.URL.Path)
	}))
	return s.onlyFromCaller(s.track(s.onlyClaimed(s.byAgent(mux))))
}

// onlyFromCaller refuses requests that do not come from cfg.Caller or do
// not carry the key of cfg.CallerKeyHash, and drops the key from the
// request before anything else sees it.
func (s *Server) onlyFromCaller(next http.Handler) http.Handler {
	byAddr, byKey := s.cfg.Caller.IsValid(), s.cfg.CallerKeyHash != [sha256.Size]byte{}
	if !byAddr && !byKey {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := true
		if byAddr {
			ap, err := netip.ParseAddrPort(r.RemoteAddr)
			ok = err == nil && ap.Addr().Unmap() == s.cfg.Caller
		}
		if byKey {
			keys := r.Header.Values(sandboxapi.HeaderCaller)
			sum := sha256.Sum256([]byte(strings.Join(keys, ",")))
			ok = ok && len(keys) == 1 && subtle.ConstantTimeCompare(sum[:], s.cfg.CallerKeyHash[:]) == 1
			r.Header.Del(sandboxapi.HeaderCaller)
		}
		if !ok && !(r.Method == http.MethodGet && r.URL.Path == sandboxapi.HealthPath) {
			s.fail(w, r, problem.New(http.StatusForbidden, "not-the-owner", "the agent answers only requests that come through Caddy"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// track counts requests in flight so /pause?if_idle=1 can refuse while busy.
func (s *Server) track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.inflight.Add(1)
		defer s.inflight.Add(-1)
		next.ServeHTTP(w, r)
	})
}

// status cache

type statusCache struct {
	User           string     `json:"user"`
	StorageOpen    bool       `json:"storage_open"`
	Model          string     `json:"model"`
	ConversationID int64      `json:"conversation_id,omitempty"`
	EntryCount     int64      `json:"entry_count"`
	NextWakeAt     *time.Time `json:"next_wake_at,omitempty"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

func (s *Server) statusPath() string {
	return filepath.Join(filepath.Dir(s.cfg.SessionDB), "status.json")
}

func (s *Server) readStatus() (statusCache, error) {
	var st statusCache
	b, err := os.ReadFile(s.statusPath())
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// writeStatus records the cache. Caller holds s.mu.
func (s *Server) writeStatus(ctx context.Context, open bool) {
	st := statusCache{User: s.cfg.Identity.User(), StorageOpen: open, Model: s.cfg.DefaultModel, UpdatedAt: time.Now().UTC()}
	if main := s.runtimes()[agents.Main]; main != nil {
		h := main.h
		if conv, err := s.currentConversation(ctx, h); err == nil {
			st.ConversationID = conv
			st.EntryCount, _ = h.Store().EntryCount(ctx, conv)
			if c, err := h.Store().Conversation(ctx, conv); err == nil && c.Settings["model"] != "" {
				st.Model = c.Settings["model"]
			}
		}
		if due, err := s.nextDueAt(ctx); err == nil && !due.IsZero() {
			st.NextWakeAt = &due
		}
	} else if old, err := s.readStatus(); err == nil {
		st.ConversationID, st.EntryCount, st.NextWakeAt = old.ConversationID, old.EntryCount, old.NextWakeAt
	}
	b, _ := json.Marshal(st)
	tmp := s.statusPath() + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err == nil {
		_ = os.Rename(tmp, s.statusPath())
	}
}

// storage

// storage returns the runtime of the agent called name, opening every
// agent's storage first if it is closed (agents.ErrNoAgent for no such agent).
func (s *Server) storage(ctx context.Context, name string) (*runtime, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runtimes() == nil {
		if err := s.openAll(ctx); err != nil {
			return nil, err
		}
	}
	rt := s.runtimes()[name]
	if rt == nil {
		return nil, fmt.Errorf("agent %q: %w", name, agents.ErrNoAgent)
	}
	return rt, nil
}

// closeStorage closes every agent's harness and records the status cache;
// it returns the next due time of the work they leave behind. Caller holds s.mu.
func (s *Server) closeStorage(ctx context.Context) (time.Time, error) {
	rts := s.runtimes()
	if rts == nil {
		st, _ := s.readStatus()
		if st.NextWakeAt != nil {
			return *st.NextWakeAt, nil
		}
		return time.Time{}, nil
	}
	due, err := s.nextDueAt(ctx)
	if err != nil {
		return time.Time{}, err
	}
	s.writeStatus(ctx, true) // counts while still open
	s.closing.Store(true)
	defer s.closing.Store(false)
	var errs []error
	for _, rt := range rts {
		if err := rt.h.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close agent %s: %w", rt.agent.Name, err))
		}
	}
	s.setRuntimes(nil)
	s.writeStatus(ctx, false)
	if err := errors.Join(errs...); err != nil {
		return time.Time{}, err
	}
	s.cfg.Log.Info("storage closed")
	return due, nil
}

// Close closes storage (on shutdown).
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.closeStorage(context.Background())
	return err
}

const currentKey = "current_conversation"

func (s *Server) currentConversation(ctx context.Context, h *durable.Harness) (int64, error) {
	v, err := h.Store().Setting(ctx, currentKey)
	if err != nil {
		return 0, err
	}
	if v == "" {
		return durable.RootConversation, nil
	}
	return strconv.ParseInt(v, 10, 64)
}

// handlers that never open storage

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	user, _, claimed := s.cfg.Identity.Current()
	writeJSON(w, http.StatusOK, sandboxapi.Health{Status: "ok", Claimed: claimed, User: user})
	return nil
}

// status answers from the cache; while storage is open anyway it refreshes
// the cache from it first (that opens nothing).
func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	s.mu.Lock()
	open := s.runtimes() != nil
	if open {
		s.writeStatus(r.Context(), true)
	}
	s.mu.Unlock()
	st, err := s.readStatus()
	if err != nil {
		st = statusCache{User: s.cfg.Identity.User(), Model: s.cfg.DefaultModel}
	}
	st.StorageOpen = open
	writeJSON(w, http.StatusOK, st)
	return nil
}

// pause closes storage. With if_idle=1 (the manager's call) it answers 409
// while another request is in flight or any task is ready or running.
// next_wake_at is the earliest stored deadline; null when nothing sleeps.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) error {
	ifIdle := r.URL.Query().Get(sandboxapi.IfIdle) == "1"
	s.mu.Lock()
	defer s.mu.Unlock()
	if ifIdle {
		if s.inflight.Load() > 1 {
			return problem.New(http.StatusConflict, "busy", "a request is in flight")
		}
		if rts := s.runtimes(); rts != nil {
			due, err := s.nextDueAt(r.Context())
			if err != nil {
				return err
			}
			busy := !due.IsZero() && !due.After(time.Now())
			for _, rt := range rts {
				busy = busy || rt.h.Busy()
			}
			if busy {
				for _, rt := range rts {
					rt.h.Wake() // due work runs now, not at the next re-check
				}
				return problem.New(http.StatusConflict, "busy", "a task is running or due")
			}
		}
	}
	due, err := s.closeStorage(r.Context())
	if err != nil {
		return err
	}
	var next *time.Time
	if !due.IsZero() {
		next = &due
		// If nobody freezes this process, come back on time by ourselves.
		s.wakeTimer = time.AfterFunc(time.Until(due), func() {
			if _, err := s.storage(context.Background(), agents.Main); err != nil {
				s.cfg.Log.Error("reopen storage at the wake time", "err", err)
			}
		})
	}
	writeJSON(w, http.StatusOK, sandboxapi.PauseAnswer{NextWakeAt: next})
	return nil
}

// wake reopens storage and runs due work (the manager calls it at wake_at).
func (s *Server) wake(w http.ResponseWriter, r *http.Request) error {
	if _, err := s.storage(r.Context(), agents.Main); err != nil {
		return err
	}
	for _, rt := range s.runtimes() {
		rt.h.Wake()
	}
	due, _ := s.nextDueAt(r.Context())
	var next *time.Time
	if !due.IsZero() {
		next = &due
	}
	writeJSON(w, http.StatusOK, sandboxapi.WakeAnswer{Woken: true, PauseAnswer: sandboxapi.PauseAnswer{NextWakeAt: next}})
	return nil
}

// helpers

func jsonInto(raw []byte, v any) bool { return len(raw) > 0 && json.Unmarshal(raw, v) == nil }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// harness opens storage and returns the harness of the request's agent.
func (s *Server) harness(r *http.Request) (*durable.Harness, error) {
	rt, err := s.runtime(r)
	if err != nil {
		return nil, err
	}
	return rt.h, nil
}

// runtime opens storage and returns the request's agent's runtime: a 404
// problem for no such agent, a 503 one when storage does not open.
func (s *Server) runtime(r *http.Request) (*runtime, error) {
	name := agentOf(r)
	rt, err := s.storage(r.Context(), name)
	if errors.Is(err, agents.ErrNoAgent) {
		return nil, problem.Errorf(http.StatusNotFound, "unknown-agent", "no agent %q; GET /agents lists them", name)
	}
	if err != nil {
		return nil, problem.New(http.StatusServiceUnavailable, "storage-unavailable", "the session database could not be opened").Because(err)
	}
	return rt, nil
}
