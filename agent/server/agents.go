package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/citations"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
	"github.com/affido/affido/agent/policy"
	"github.com/affido/affido/internal/problem"
)

// runtime is one named agent's open storage: its harness over a database
// of its own, and the rules its tool calls are judged by.
type runtime struct {
	agent agents.Agent
	h     *durable.Harness
	book  *policy.Book
}

func (s *Server) runtimes() map[string]*runtime {
	s.rtMu.RLock()
	defer s.rtMu.RUnlock()
	return s.rts
}

func (s *Server) setRuntimes(m map[string]*runtime) {
	s.rtMu.Lock()
	s.rts = m
	s.rtMu.Unlock()
}

// dbPath is where agent a's session database lives: main's where it always
// was, every other agent's in a directory of its own under agents/.
func (s *Server) dbPath(a agents.Agent) string {
	if a.ID == agents.Main {
		return s.cfg.SessionDB
	}
	return filepath.Join(s.agentsDir(), a.ID, "session.db")
}

func (s *Server) agentsDir() string { return filepath.Join(filepath.Dir(s.cfg.SessionDB), "agents") }

// openAll opens main's storage, reads the registry there, then opens every
// other agent's and removes the storage of agents no longer registered
// (deleted just before a crash). Caller holds s.mu.
func (s *Server) openAll(ctx context.Context) error {
	if s.wakeTimer != nil {
		s.wakeTimer.Stop()
		s.wakeTimer = nil
	}
	main, err := s.openAgent(ctx, agents.Agent{Name: agents.Main, ID: agents.Main, Kind: agents.KindOwner})
	if err != nil {
		return err
	}
	list, err := s.registry.List(ctx, main.h.Store())
	if err != nil {
		main.h.Close()
		return err
	}
	rts := map[string]*runtime{}
	closeAll := func() {
		for _, rt := range rts {
			rt.h.Close()
		}
	}
	for _, a := range list {
		if a.ID == agents.Main && a.Model == "" && a.CompactTokens == 0 {
			main.agent = a
			rts[a.Name] = main
			continue
		}
		if a.ID == agents.Main { // main with settings of its own
			main.h.Close()
		}
		rt, err := s.openAgent(ctx, a)
		switch {
		case err != nil && a.ID == agents.Main:
			closeAll()
			return fmt.Errorf("open agent %s: %w", a.Name, err)
		case err != nil:
			// One agent's storage failing must not take the others (or the
			// route that deletes it) down with it: its routes answer 404.
			s.cfg.Log.Error("open agent: it stays closed", "agent", a.Name, "err", err)
			continue
		}
		rts[a.Name] = rt
	}
	s.removeUnregistered(list)
	// Published before anything runs: a replayed send_message finds its receiver.
	s.setRuntimes(rts)
	for _, rt := range rts {
		if err := rt.h.Resume(); err != nil {
			s.setRuntimes(nil)
			closeAll()
			return err
		}
	}
	s.writeStatus(ctx, true)
	s.cfg.Log.Info("storage opened", "db", s.cfg.SessionDB, "agents", len(rts))
	return nil
}

// removeUnregistered removes agent directories the registry does not name.
func (s *Server) removeUnregistered(list []agents.Agent) {
	dirs, err := os.ReadDir(s.agentsDir())
	if err != nil {
		return
	}
	for _, d := range dirs {
		if !slices.ContainsFunc(list, func(a agents.Agent) bool { return a.ID == d.Name() }) {
			if err := os.RemoveAll(filepath.Join(s.agentsDir(), d.Name())); err != nil {
				s.cfg.Log.Error("remove a deleted agent's storage", "id", d.Name(), "err", err)
			}
		}
	}
}

// openAgent opens agent a's store and harness (not yet resumed).
func (s *Server) openAgent(ctx context.Context, a agents.Agent) (*runtime, error) {
	path := s.dbPath(a)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("make the storage of agent %s: %w", a.Name, err)
	}
	db, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	store, err := durable.OpenStore(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	opts := s.harnessOptions(a)
	rt := &runtime{agent: a, book: &policy.Book{Tools: opts.Tools, HoldsNoOwnerData: a.Kind == agents.KindWorker}}
	opts.Policy = rt.book
	if s.cfg.OnApproval != nil {
		opts.OnApproval = func(ap durable.Approval) []durable.Task {
			var proposal *policy.Rule
			if r, err := rt.book.Proposal(ap); err == nil {
				proposal = &r
			}
			return s.cfg.OnApproval(a.Name, ap, proposal)
		}
	}
	h, err := durable.Open(ctx, store, opts)
	if err != nil {
		store.Close()
		return nil, err
	}
	rt.h = h
	return rt, nil
}

// harnessOptions are agent a's: an owner agent has the owner's tools plus
// send_message and delegate; the worker has the web tools alone.
func (s *Server) harnessOptions(a agents.Agent) durable.Options {
	opts := s.cfg.Harness
	opts.Model, opts.Log = s.cfg.Model, s.cfg.Log.With("agent", a.Name)
	opts.DefaultModel = cmp.Or(a.Model, s.cfg.DefaultModel)
	switch a.Kind {
	case agents.KindWorker:
		opts.Tools, opts.System = s.cfg.WorkerTools, cmp.Or(s.cfg.WorkerSystem, opts.System)
	default:
		opts.Tools = append(slices.Clone(s.tools), agents.SendMessage(a, s), agents.Delegate(a, s))
		opts.Gate = citations.Gate(s.corpus)
		// A reply that must carry verified citations is shown once it passed.
		opts.Streams = func(options, settings map[string]string) bool { return !citations.Required(options, settings) }
	}
	if n := a.CompactTokens; n > 0 {
		opts.Compaction.Threshold = n
		if opts.Compaction.HardCap > 0 && opts.Compaction.HardCap < n {
			opts.Compaction.HardCap = n * 85 / 60 // the sandbox's ratio of cap to threshold
		}
	}
	id := a.ID
	opts.OnDelta = func(conv, run int64, text string) { s.deltas.publish(id, conv, run, text) }
	opts.OnScheduled = func(at time.Time) { s.dues.set(id, at) }
	return opts
}

// nextDueAt is the earliest next due time of every open agent.
func (s *Server) nextDueAt(ctx context.Context) (time.Time, error) {
	var due time.Time
	for _, rt := range s.runtimes() {
		d, err := rt.h.NextDueAt(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if !d.IsZero() && (due.IsZero() || d.Before(due)) {
			due = d
		}
	}
	return due, nil
}

// dueBoard tells the host the earliest of the agents' next due times
// whenever one of them changes.
type dueBoard struct {
	report func(time.Time)
	mu     sync.Mutex
	dues   map[string]time.Time
}

func (b *dueBoard) set(agent string, at time.Time) {
	if b.report == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dues == nil {
		b.dues = map[string]time.Time{}
	}
	b.dues[agent] = at
	var due time.Time
	for _, d := range b.dues {
		if !d.IsZero() && (due.IsZero() || d.Before(due)) {
			due = d
		}
	}
	b.report(due)
}

func (b *dueBoard) forget(agent string) {
	b.mu.Lock()
	delete(b.dues, agent)
	b.mu.Unlock()
}

// Routing: /agents/<name>/<route> is <route> for that agent; the routes
// without it mean main.

type agentKey struct{}

// agentOf is the agent a request is for.
func agentOf(r *http.Request) string {
	if name, ok := r.Context().Value(agentKey{}).(string); ok {
		return name
	}
	return agents.Main
}

// perAgent are the first path segments of the routes each agent has.
var perAgent = map[string]bool{"session": true, "sessions": true, "models": true, "reminders": true, "reset": true,
	"inspect": true, "entry": true, "prompt": true, "corpus": true, "events": true, "approvals": true,
	"rules": true, "jobs": true}

// byAgent rewrites /agents/<name>/<route> to <route> for agent <name>.
func (s *Server) byAgent(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/agents/")
		name, route, nested := strings.Cut(rest, "/")
		if !ok || !nested {
			next.ServeHTTP(w, r)
			return
		}
		first, _, _ := strings.Cut(route, "/")
		if !perAgent[first] {
			s.fail(w, r, problem.Errorf(http.StatusNotFound, "not-found", "no route /agents/%s/%s: an agent has %s", name, route, perAgentList()))
			return
		}
		if !agents.ValidName(name) {
			s.fail(w, r, problem.Errorf(http.StatusNotFound, "unknown-agent", "no agent %q", name))
			return
		}
		r2 := r.Clone(context.WithValue(r.Context(), agentKey{}, name))
		r2.URL.Path, r2.URL.RawPath = "/"+route, ""
		next.ServeHTTP(w, r2)
	})
}

func perAgentList() string {
	var l []string
	for k := range perAgent {
		l = append(l, "/"+k)
	}
	slices.Sort(l)
	return strings.Join(l, ", ")
}

// The agent routes.

func (s *Server) agentsList(w http.ResponseWriter, r *http.Request) error {
	main, err := s.mainRuntime(r)
	if err != nil {
		return err
	}
	list, err := s.registry.List(r.Context(), main.h.Store())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": list, "max_hops": agents.MaxHops})
	return nil
}

func (s *Server) agentGet(w http.ResponseWriter, r *http.Request) error {
	main, err := s.mainRuntime(r)
	if err != nil {
		return err
	}
	a, err := s.registry.Get(r.Context(), main.h.Store(), r.PathValue("name"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

func (s *Server) agentCreate(w http.ResponseWriter, r *http.Request) error {
	var body agents.Spec
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	if err := s.knownModel(r, body.Model); err != nil {
		return err
	}
	main, unlock, err := s.lockOpen(r)
	if err != nil {
		return err
	}
	defer unlock()
	a, err := s.registry.Create(r.Context(), main.h, body)
	if err != nil {
		return err
	}
	rt, err := s.openAgent(r.Context(), a)
	if err == nil {
		err = rt.h.Resume()
	}
	if err != nil {
		return fmt.Errorf("agent %s is registered but its storage did not open: %w", a.Name, err)
	}
	s.swap(func(m map[string]*runtime) { m[a.Name] = rt })
	writeJSON(w, http.StatusCreated, a)
	return nil
}

// agentUpdate renames an agent, sets its model or whom it may message; the
// agent's harness reopens with the change (work in flight resumes, by each
// tool's replay policy).
func (s *Server) agentUpdate(w http.ResponseWriter, r *http.Request) error {
	var p agents.Patch
	if err := decodeBody(w, r, &p); err != nil {
		return err
	}
	if p.Model != nil {
		if err := s.knownModel(r, *p.Model); err != nil {
			return err
		}
	}
	main, unlock, err := s.lockOpen(r)
	if err != nil {
		return err
	}
	defer unlock()
	a, err := s.registry.Update(r.Context(), main.h, r.PathValue("name"), p)
	if err != nil {
		return err
	}
	// Every agent reopens: lists of whom each may message changed, and
	// tools carry their agent's name.
	if _, err := s.closeStorage(r.Context()); err != nil {
		return err
	}
	if err := s.openAll(r.Context()); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a)
	return nil
}

// agentDelete deletes an agent and its storage; main's trace keeps the
// entry recording it.
func (s *Server) agentDelete(w http.ResponseWriter, r *http.Request) error {
	main, unlock, err := s.lockOpen(r)
	if err != nil {
		return err
	}
	defer unlock()
	name := r.PathValue("name")
	a, err := s.registry.Delete(r.Context(), main.h, name)
	rts := s.runtimes()
	if err != nil {
		return err
	}
	if rt := rts[name]; rt != nil {
		s.swap(func(m map[string]*runtime) { delete(m, name) })
		if err := rt.h.Close(); err != nil {
			s.cfg.Log.Error("close a deleted agent", "agent", name, "err", err)
		}
	}
	s.dues.forget(a.ID)
	if err := os.RemoveAll(filepath.Dir(s.dbPath(a))); err != nil {
		// The next open removes what the registry no longer names.
		s.cfg.Log.Error("remove a deleted agent's storage", "agent", name, "err", err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"deleted": a.Name})
	return nil
}

// swap changes the open runtimes under rtMu. Caller holds s.mu.
func (s *Server) swap(change func(map[string]*runtime)) {
	s.rtMu.Lock()
	defer s.rtMu.Unlock()
	m := make(map[string]*runtime, len(s.rts)+1)
	for k, v := range s.rts {
		m[k] = v
	}
	change(m)
	s.rts = m
}

// lockOpen opens storage, takes s.mu (so no open or close runs meanwhile)
// and returns main's runtime and the unlock.
func (s *Server) lockOpen(r *http.Request) (*runtime, func(), error) {
	if _, err := s.mainRuntime(r); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	main := s.runtimes()[agents.Main]
	if main == nil {
		s.mu.Unlock()
		return nil, nil, problem.New(http.StatusServiceUnavailable, "storage-closed", "storage closed meanwhile; try again")
	}
	return main, s.mu.Unlock, nil
}

func (s *Server) mainRuntime(r *http.Request) (*runtime, error) {
	return s.runtime(r.WithContext(context.WithValue(r.Context(), agentKey{}, agents.Main)))
}

// Deliver is the hub of the sandbox's agents (agents.Hub): it admits the
// message into a conversation of its own in the receiver (keyed by the
// delivery, so a replay admits nothing twice) and waits for the reply.
func (s *Server) Deliver(ctx context.Context, d agents.Delivery) (agents.Reply, error) {
	rts := s.runtimes()
	main, to := rts[agents.Main], rts[d.To]
	if main == nil || s.closing.Load() {
		return agents.Reply{}, s.closingErr(ctx)
	}
	// The registry as it is now, not as it was when the sender opened: a
	// list changed since (or an agent deleted and made again) counts.
	from, err := s.registry.Get(ctx, main.h.Store(), d.From)
	switch {
	case err != nil && s.closing.Load():
		return agents.Reply{}, s.closingErr(ctx)
	case err != nil:
		return agents.Reply{}, err
	case to == nil:
		return agents.Reply{}, fmt.Errorf("agent %q: %w", d.To, agents.ErrNoAgent)
	case from.Kind == agents.KindWorker:
		return agents.Reply{}, fmt.Errorf("%w: the worker messages no agent", agents.ErrNotAllowed)
	case d.To == agents.Worker && !strings.HasPrefix(d.Key, "task:"):
		return agents.Reply{}, fmt.Errorf("%w: the worker takes tasks through delegate", agents.ErrNotAllowed)
	case d.To != agents.Worker && !slices.Contains(from.MayMessage, d.To):
		return agents.Reply{}, fmt.Errorf("%w: %s may message %s", agents.ErrNotAllowed, d.From, listOrNone(from.MayMessage))
	}
	h := to.h
	conv, err := s.inbox(ctx, h, d)
	if err == nil {
		var sub durable.Submission
		if sub, err = h.Submit(ctx, conv, durable.Input{Text: d.Text, RequestID: d.Key, From: d.From, Hops: d.Hops}); err == nil {
			return s.awaitReply(ctx, h, d, conv, sub)
		}
	}
	if s.closing.Load() || errors.Is(err, durable.ErrClosed) { // storage closes under the sender too: it replays on reopen
		return agents.Reply{}, s.closingErr(ctx)
	}
	return agents.Reply{}, fmt.Errorf("deliver to %s: %w", d.To, err)
}

// awaitReply waits for the receiver's answer to sub.
func (s *Server) awaitReply(ctx context.Context, h *durable.Harness, d agents.Delivery, conv int64, sub durable.Submission) (agents.Reply, error) {
	wctx, cancel := context.WithTimeout(ctx, s.cfg.MessageTimeout)
	defer cancel()
	sub, err := h.WaitSubmission(wctx, sub.ID)
	switch {
	case ctx.Err() != nil:
		return agents.Reply{}, ctx.Err()
	case errors.Is(err, durable.ErrClosed):
		if s.closing.Load() {
			return agents.Reply{}, s.closingErr(ctx)
		}
		return agents.Reply{}, &agents.NoReplyError{To: d.To, ConversationID: conv, Reason: "the agent was deleted or restarted meanwhile"}
	case wctx.Err() != nil:
		return agents.Reply{}, &agents.NoReplyError{To: d.To, ConversationID: conv, Reason: fmt.Sprintf("no reply within %s; its run goes on", s.cfg.MessageTimeout)}
	case err != nil:
		return agents.Reply{}, err
	case sub.Status != durable.Done:
		return agents.Reply{}, &agents.NoReplyError{To: d.To, ConversationID: conv, Reason: cmp.Or(sub.Reason, string(sub.Status))}
	}
	e, err := h.Store().Entry(ctx, sub.AnswerEntryID)
	if err != nil {
		return agents.Reply{}, fmt.Errorf("read the reply of %s: %w", d.To, err)
	}
	reply := agents.Reply{Text: e.Text, ConversationID: conv, RunID: sub.TaskID}
	if d.To == agents.Worker {
		if reply.Sources, err = sources(ctx, h.Store(), conv, sub.TaskID); err != nil {
			return agents.Reply{}, err
		}
	}
	return reply, nil
}

// closingErr waits for the sender's step to be cancelled by the storage
// closing under it (its tool call then replays on reopen); if storage did
// not close after all within a minute, the delivery fails instead.
func (s *Server) closingErr(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return errors.New("the agents' storage was closing; send again")
	}
}

// inbox returns the receiver's conversation for delivery d, making it on
// the first delivery (the conversation and the key that finds it again in
// one commit).
func (s *Server) inbox(ctx context.Context, h *durable.Harness, d agents.Delivery) (int64, error) {
	key := "inbox." + d.Key
	if v, err := h.Store().Setting(ctx, key); err != nil {
		return 0, err
	} else if v != "" {
		var conv int64
		_, err := fmt.Sscan(v, &conv)
		return conv, err
	}
	id, err := h.Store().MintID()
	if err != nil {
		return 0, err
	}
	title := fmt.Sprintf("message from %s (hop %d)", d.From, d.Hops)
	if d.To == agents.Worker {
		title = "task from " + d.From
	}
	c := durable.Conversation{ID: id, Title: title, CreatedAt: h.Now(), Settings: map[string]string{"from_agent": d.From}}
	if err := h.Commit(ctx, durable.Writes{Conversations: []durable.Conversation{c}, Settings: map[string]string{key: fmt.Sprint(id)}}); err != nil {
		return 0, fmt.Errorf("open a conversation for the message: %w", err)
	}
	return id, nil
}

// sources lists the pages the worker fetched in run.
func sources(ctx context.Context, st *durable.Store, conv, run int64) ([]agents.Source, error) {
	entries, err := st.RunEntries(ctx, conv, run)
	if err != nil {
		return nil, err
	}
	out := []agents.Source{}
	for _, e := range entries {
		var d struct {
			Tool     string `json:"tool"`
			FinalURL string `json:"final_url"`
			SHA256   string `json:"sha256"`
		}
		if e.Kind == durable.OutsideText && jsonInto(e.Data, &d) && d.Tool == "fetch_url" {
			out = append(out, agents.Source{URL: d.FinalURL, SHA256: d.SHA256})
		}
	}
	return out, nil
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "no agent (its may_message list is empty)"
	}
	return "only " + strings.Join(l, ", ")
}

var _ agents.Hub = (*Server)(nil)
