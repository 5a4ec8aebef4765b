// Package server is the agent's HTTP API inside its sandbox container
// (ARCHITECTURE.md section 4): routes, decoding and encoding, the checks of
// who may call, and the mapping of errors to problems. The agents
// themselves, their storage and their messages are the host's
// (agent/host); storage opens on the first request to a route that needs
// it. /health, /claim, /status, /ingest, /pause and the workspace file
// routes never open it, and /status answers from the host's status cache.
// Until the manager has bound the sandbox to its user (POST /claim) only
// /health and /claim answer.
package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/corpus"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/host"
	"github.com/affido/affido/agent/identity"
	"github.com/affido/affido/agent/policy"
	"github.com/affido/affido/agent/skills"
	"github.com/affido/affido/agent/workspace"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
)

// Host is what the API asks of the agents' host (agent/host).
type Host interface {
	// Runtime opens storage and returns the runtime of the agent called
	// name: agents.ErrNoAgent for none, an error wrapping
	// host.ErrUnavailable when storage does not open.
	Runtime(ctx context.Context, name string) (*host.Runtime, error)
	Agents(ctx context.Context) ([]agents.Agent, error)
	Agent(ctx context.Context, name string) (agents.Agent, error)
	CreateAgent(ctx context.Context, spec agents.Spec) (agents.Agent, error)
	UpdateAgent(ctx context.Context, name string, p agents.Patch) (agents.Agent, error)
	DeleteAgent(ctx context.Context, name string) (agents.Agent, error)
	// Subscribe streams the reply deltas of one conversation of one agent.
	Subscribe(agentID string, conv int64) (<-chan host.Delta, func())
	Status(ctx context.Context) host.Status
	// Pause closes storage; with idle set it refuses with a
	// *host.BusyError while idle reports false or work goes on.
	Pause(ctx context.Context, idle func() bool) (time.Time, error)
	Wake(ctx context.Context) (time.Time, error)
	// DataDir is the directory of the agents' storage; HasData reports
	// whether storage is open or a session database exists there.
	DataDir() string
	HasData() bool
	// Snapshot opens storage and writes a consistent copy of every agent's
	// database under a new directory in dir, which it returns.
	Snapshot(ctx context.Context, dir string) (string, error)
	// Restore runs put (which moves restored files into place) and opens
	// storage: host.ErrHasData while there is data, unless force.
	Restore(ctx context.Context, force bool, put func() error) (time.Time, error)
	// MigrateStorage moves every agent's database to the storage named to.
	MigrateStorage(ctx context.Context, to string) (sandboxapi.MigrateStorageAnswer, error)
	Close() error
}

var _ Host = (*host.Host)(nil)

// Config is what the server needs.
type Config struct {
	// Identity is whom the sandbox belongs to (required); POST /claim sets it.
	Identity     *identity.Store
	SessionDB    string       // the SQLite file; its directory also holds the status cache and the corpus
	Storage      host.Storage // if set, where the agents' databases may live instead of SQLite files (the user's Postgres)
	UseStorage   bool         // Storage is the default for a sandbox that holds no databases yet
	Workspace    string
	Model        durable.Model
	DefaultModel string
	// Models lists the models the gateway serves (to refuse an unknown one
	// before anything is written). Nil accepts any.
	Models  func(ctx context.Context) ([]string, error)
	Harness durable.Options // Model and DefaultModel are filled from above
	Skills  *skills.Installer
	// Repair gives the owner's file routes back what the model's tools
	// closed (the tool runner; nil outside privilege separation).
	Repair workspace.Repairer
	Log    *slog.Logger
	// Quota caps the bytes of the workspace and the corpus together (0: none).
	Quota int64
	// WorkerTools and WorkerSystem are the worker agent's tools (web tools:
	// none of the owner's data) and system prompt.
	WorkerTools  []durable.Tool
	WorkerSystem string
	// AgentTools, if set, gives the tools of one of the owner's agents that
	// come and go (its connectors, which the manager holds): the harness's
	// MoreTools. The worker gets none.
	AgentTools func(agent string) func(ctx context.Context) ([]durable.Tool, error)
	// OwnAgentTools, if set, are more tools of one of the owner's agents,
	// made for it by name (the browser's), which its rules may name.
	OwnAgentTools func(agent string) []durable.Tool
	// OnApproval returns tasks to commit with a new approval of agent
	// (the owner's notification).
	OnApproval func(agent string, a durable.Approval, proposal *policy.Rule) []durable.Task
	// OnAnswer returns tasks to commit with a run's answer of agent (the
	// owner hears of a scheduled job's result).
	OnAnswer func(agent string, in durable.Input, answer durable.Entry) []durable.Task
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
	// Host hosts the agents; nil makes a host.Host of SessionDB, Model,
	// DefaultModel, Harness, WorkerTools, WorkerSystem, AgentTools,
	// OwnAgentTools, OnApproval and MessageTimeout.
	Host Host
}

// Server is the agent's HTTP server.
type Server struct {
	cfg    Config
	ws     workspace.Workspace
	corpus *corpus.Corpus
	host   Host

	inflight atomic.Int64
}

// New returns a server over cfg.Host, or over a host.Host made of cfg (if
// its status cache says storage was open when the process last stopped, a
// crash, storage opens at once so unfinished work resumes).
func New(cfg Config) *Server {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	corpusDir := filepath.Join(filepath.Dir(cfg.SessionDB), "corpus")
	s := &Server{cfg: cfg, ws: workspace.Workspace{Dir: cfg.Workspace, Quota: cfg.Quota, Also: []string{corpusDir}, Repair: cfg.Repair},
		corpus: &corpus.Corpus{Dir: corpusDir}, host: cfg.Host}
	if s.host == nil {
		s.host = host.New(host.Config{User: cfg.Identity.User, SessionDB: cfg.SessionDB, Storage: cfg.Storage, UseStorage: cfg.UseStorage, Model: cfg.Model,
			DefaultModel: cfg.DefaultModel, Harness: cfg.Harness, Log: cfg.Log, Corpus: s.corpus,
			WorkerTools: cfg.WorkerTools, WorkerSystem: cfg.WorkerSystem, OnApproval: cfg.OnApproval, OnAnswer: cfg.OnAnswer,
			MessageTimeout: cfg.MessageTimeout, AgentTools: cfg.AgentTools, OwnAgentTools: cfg.OwnAgentTools})
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
	handle("POST /session/archive", s.sessionArchive)
	handle("POST /session/delete", s.sessionDelete)
	handle("GET /search", s.search)
	handle("GET /activity", s.activity)
	handle("GET /reminders", s.reminderList)
	handle("POST /reminders/{id}/cancel", s.reminderCancel)
	handle("POST /reset", s.reset)
	handle("GET /inspect", s.inspect)
	handle("GET /entry", s.entry)
	handle("GET /files", s.files)
	handle("GET /file", s.file)
	handle("DELETE /files", s.fileDelete)
	handle("POST /prompt", s.prompt)
	handle("POST /runs/{id}/stop", s.stop)
	handle("POST "+sandboxapi.PausePath, s.pause)
	handle("POST "+sandboxapi.WakePath, s.wake)
	handle("GET "+sandboxapi.BackupPath, s.backup)
	handle("POST "+sandboxapi.RestorePath, s.restore)
	handle("POST "+sandboxapi.MigrateStoragePath, s.migrateStorage)
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
	handle("GET /notes", s.ownerNotes)
	handle("PUT /notes", s.ownerNotesPut)
	handle("GET /agents/{name}/notes", s.workNotes)
	handle("PUT /agents/{name}/notes", s.workNotesPut)
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

// Close closes storage (on shutdown).
func (s *Server) Close() error { return s.host.Close() }

// handlers that never open storage

func (s *Server) health(w http.ResponseWriter, r *http.Request) error {
	user, _, claimed := s.cfg.Identity.Current()
	writeJSON(w, http.StatusOK, sandboxapi.Health{Status: "ok", Claimed: claimed, User: user})
	return nil
}

// status answers from the host's status cache (which opens nothing).
func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, s.host.Status(r.Context()))
	return nil
}

// pause closes storage. With if_idle=1 (the manager's call) it answers 409
// while another request is in flight or any task is ready or running.
// next_wake_at is the earliest stored deadline; null when nothing sleeps.
func (s *Server) pause(w http.ResponseWriter, r *http.Request) error {
	var idle func() bool
	if r.URL.Query().Get(sandboxapi.IfIdle) == "1" {
		idle = func() bool { return s.inflight.Load() <= 1 }
	}
	due, err := s.host.Pause(r.Context(), idle)
	if err != nil {
		return err
	}
	// Storage is closed and the process is about to be frozen: give the
	// heap's free pages back to the kernel, so a paused agent holds only
	// what it uses (memory at rest is what density is made of).
	debug.FreeOSMemory()
	writeJSON(w, http.StatusOK, sandboxapi.PauseAnswer{NextWakeAt: timeOrNil(due)})
	return nil
}

// wake reopens storage and runs due work (the manager calls it at wake_at).
func (s *Server) wake(w http.ResponseWriter, r *http.Request) error {
	due, err := s.host.Wake(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sandboxapi.WakeAnswer{Woken: true, PauseAnswer: sandboxapi.PauseAnswer{NextWakeAt: timeOrNil(due)}})
	return nil
}

func timeOrNil(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// helpers

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
	return rt.Harness, nil
}

// runtime opens storage and returns the request's agent's runtime: a 404
// problem for no such agent, a 503 one when storage does not open.
func (s *Server) runtime(r *http.Request) (*host.Runtime, error) {
	name := agentOf(r)
	rt, err := s.host.Runtime(r.Context(), name)
	if errors.Is(err, agents.ErrNoAgent) {
		return nil, problem.Errorf(http.StatusNotFound, "unknown-agent", "no agent %q; GET /agents lists them", name)
	}
	return rt, err // host.ErrUnavailable: 503 (fail)
}
