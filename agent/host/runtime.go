package host

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/citations"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/jobs"
	"github.com/affido/affido/agent/notes"
	"github.com/affido/affido/agent/policy"
)

// Runtime is one named agent's open storage: its harness over a database
// of its own, and the rules its tool calls are judged by.
type Runtime struct {
	Agent   agents.Agent
	Harness *durable.Harness
	Book    *policy.Book
}

func (s *Host) runtimes() map[string]*Runtime {
	s.rtMu.RLock()
	defer s.rtMu.RUnlock()
	return s.rts
}

func (s *Host) setRuntimes(m map[string]*Runtime) {
	s.rtMu.Lock()
	s.rts = m
	s.rtMu.Unlock()
}

// swap changes the open runtimes under rtMu. Caller holds s.mu.
func (s *Host) swap(change func(map[string]*Runtime)) {
	s.rtMu.Lock()
	defer s.rtMu.Unlock()
	m := make(map[string]*Runtime, len(s.rts)+1)
	for k, v := range s.rts {
		m[k] = v
	}
	change(m)
	s.rts = m
}

// dbPath is where agent a's session database lives: main's where it always
// was, every other agent's in a directory of its own under agents/.
func (s *Host) dbPath(a agents.Agent) string {
	if a.ID == agents.Main {
		return s.cfg.SessionDB
	}
	return filepath.Join(s.agentsDir(), a.ID, "session.db")
}

func (s *Host) agentsDir() string { return filepath.Join(filepath.Dir(s.cfg.SessionDB), "agents") }

// openAll opens main's storage, reads the registry there, then opens every
// other agent's and removes the storage of agents no longer registered
// (deleted just before a crash). Caller holds s.mu.
func (s *Host) openAll(ctx context.Context) error {
	if s.wakeTimer != nil {
		s.wakeTimer.Stop()
		s.wakeTimer = nil
	}
	main, err := s.openAgent(ctx, agents.Agent{Name: agents.Main, ID: agents.Main, Kind: agents.KindOwner})
	if err != nil {
		return err
	}
	list, err := s.registry.List(ctx, main.Harness.Store())
	if err != nil {
		main.Harness.Close()
		return err
	}
	rts := map[string]*Runtime{}
	closeAll := func() {
		for _, rt := range rts {
			rt.Harness.Close()
		}
	}
	for _, a := range list {
		if a.ID == agents.Main && a.Model == "" && a.CompactTokens == 0 && a.Instructions == "" {
			main.Agent = a
			rts[a.Name] = main
			continue
		}
		if a.ID == agents.Main { // main with settings of its own
			main.Harness.Close()
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
		if err := rt.Harness.Resume(); err != nil {
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
func (s *Host) removeUnregistered(list []agents.Agent) {
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

// openDB opens agent a's database where StorageKind says the agents'
// databases live, recording that in storage.json before the first open (so
// a later change of the stack's default never moves them).
func (s *Host) openDB(ctx context.Context, a agents.Agent) (durable.DB, error) {
	kind, recorded, err := s.storageKind()
	if err != nil {
		return nil, err
	}
	if !recorded {
		if err := s.writeStorageKind(kind); err != nil {
			return nil, fmt.Errorf("record the storage: %w", err)
		}
	}
	return s.openDBOn(ctx, kind, a)
}

// openAgent opens agent a's store and harness (not yet resumed).
func (s *Host) openAgent(ctx context.Context, a agents.Agent) (*Runtime, error) {
	db, err := s.openDB(ctx, a)
	if err != nil {
		return nil, err
	}
	store, err := durable.OpenStore(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	rt := &Runtime{Agent: a}
	opts := s.harnessOptions(rt)
	rt.Book = &policy.Book{Tools: opts.Tools, HoldsNoOwnerData: a.Kind == agents.KindWorker}
	opts.Policy = rt.Book
	if s.cfg.OnAnswer != nil {
		opts.OnAnswer = func(in durable.Input, answer durable.Entry) []durable.Task { return s.cfg.OnAnswer(a.Name, in, answer) }
	}
	if s.cfg.OnApproval != nil {
		opts.OnApproval = func(ap durable.Approval) []durable.Task {
			var proposal *policy.Rule
			if r, err := rt.Book.Proposal(ap); err == nil {
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
	rt.Harness = h
	return rt, nil
}

// harnessOptions are the options of rt's agent: an owner agent has the
// owner's tools plus send_message, delegate and its notes (read_notes,
// write_note, and the notes in its system prompt); the worker has the web
// tools alone.
func (s *Host) harnessOptions(rt *Runtime) durable.Options {
	a := rt.Agent
	opts := s.cfg.Harness
	opts.Model, opts.Log = s.cfg.Model, s.cfg.Log.With("agent", a.Name)
	opts.DefaultModel = cmp.Or(a.Model, s.cfg.DefaultModel)
	switch a.Kind {
	case agents.KindWorker:
		opts.Tools, opts.System = s.cfg.WorkerTools, cmp.Or(s.cfg.WorkerSystem, opts.System)
	default:
		keeper := noteKeeper{s: s, rt: rt}
		opts.Tools = append(slices.Clone(s.tools), agents.SendMessage(a, s), agents.Delegate(a, s))
		if s.cfg.OwnAgentTools != nil {
			opts.Tools = append(opts.Tools, s.cfg.OwnAgentTools(a.Name)...)
		}
		for _, t := range notes.Tools(a.Name, keeper) {
			opts.Tools = append(opts.Tools, s.closingAware(t))
		}
		opts.SystemSuffix = func(ctx context.Context, in durable.Input) (string, error) {
			text, err := notes.Prompt(ctx, keeper, in)
			if err != nil && s.closing.Load() { // main's store closed under this run: it resumes on reopen
				return "", s.closingErr(ctx)
			}
			return text, err
		}
		if s.cfg.AgentTools != nil {
			opts.MoreTools = s.cfg.AgentTools(a.Name)
		}
		opts.Gate = citations.Gate(s.cfg.Corpus)
		// A reply that must carry verified citations is shown once it passed.
		opts.Streams = func(options, settings map[string]string) bool { return !citations.Required(options, settings) }
	}
	opts.System = withInstructions(opts.System, a.Instructions)
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

// withInstructions is the system prompt of an agent with instructions: the
// platform's prompt, then the agent's job in the owner's words. Both stay
// the same from request to request (no time in them), so a provider's
// prompt cache holds.
func withInstructions(system, instructions string) string {
	instructions = strings.TrimSpace(instructions)
	if instructions == "" {
		return system
	}
	return strings.TrimSpace(system + "\n\nYour job, in your owner's words:\n" + instructions)
}

// noteKeeper finds the notes of rt's agent: its work notes in its own
// store, the owner's in main's. Main's store is the one every agent's
// storage opens with and the registry lives in, so one shared set needs no
// store of its own to open, lock and close beside it; and main, the
// owner's first agent, always gets them.
type noteKeeper struct {
	s  *Host
	rt *Runtime
}

func (k noteKeeper) Keep(ctx context.Context, name string, in durable.Input) (*durable.Harness, error) {
	switch {
	case name == notes.Work:
		return k.rt.Harness, nil
	case name != notes.Owner:
		return nil, fmt.Errorf("%w: no notes called %q", notes.ErrInvalid, name)
	case !k.rt.Agent.OwnerNotes || jobs.RunOf(in) != "":
		// A job runs with nobody watching: it gets no owner notes to carry off.
		return nil, fmt.Errorf("agent %s: %w", k.rt.Agent.Name, notes.ErrNotShared)
	}
	main := k.s.runtimes()[agents.Main]
	if main == nil || k.s.closing.Load() {
		return nil, k.s.closingErr(ctx)
	}
	return main.Harness, nil
}

// closingAware makes a tool that reaches another agent's store wait for
// its own step to be cancelled when storage closes under it (that store may
// close first), instead of failing: the call then replays on reopen by its
// replay policy.
func (s *Host) closingAware(t durable.Tool) durable.Tool {
	run := t.Execute
	t.Execute = func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
		res, err := run(ctx, c, args)
		if err != nil && s.closing.Load() {
			return res, s.closingErr(ctx)
		}
		return res, err
	}
	return t
}
