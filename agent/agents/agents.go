// Package agents keeps a sandbox's named agents: who they are (a registry
// kept in the main agent's store, every change committed with a trace
// entry), and the tools by which one agent reaches another: send_message
// to an agent it may message, and delegate to the worker, an agent with
// web tools and none of the owner's data. Whatever comes back is outside
// text; a chain of messages stops at MaxHops.
//
// Each agent has a durable store of its own (conversations, tasks,
// reminders, jobs, rules, usage); the host (agent/server) opens them and
// delivers messages between them (Hub).
package agents

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/affido/affido/agent/durable"
)

// The built-in agents: main exists from the start and is the one today's
// routes mean; worker answers delegated tasks.
const (
	Main   = "main"
	Worker = "worker"
)

// Kinds of agents.
const (
	KindOwner  = "owner"  // works for the owner: the workspace, the corpus, the owner's tools
	KindWorker = "worker" // reads the web for the owner's agents: web tools only, none of the owner's data
)

// MaxHops is the longest chain of messages: a fourth hop is refused, so
// two agents cannot loop.
const MaxHops = 3

// MaxAgents bounds the named agents of one sandbox.
const MaxAgents = 32

// Errors callers branch on.
var (
	ErrInvalid    = errors.New("invalid agent")
	ErrExists     = errors.New("agent exists")
	ErrNoAgent    = errors.New("no such agent")
	ErrBuiltin    = errors.New("built-in agent")
	ErrNotAllowed = errors.New("not allowed to message that agent")
	ErrHopLimit   = errors.New("hop limit reached")
)

var validName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// ValidName reports whether name is a well-formed agent name.
func ValidName(name string) bool { return validName.MatchString(name) }

// Agent is one named agent.
type Agent struct {
	Name string `json:"name"`
	// ID names the agent's storage; it never changes, so a rename moves
	// nothing and a new agent with an old name starts with nothing.
	ID         string   `json:"id"`
	Kind       string   `json:"kind"`
	Model      string   `json:"model,omitempty"` // its default model; empty: the sandbox's
	MayMessage []string `json:"may_message"`     // agents it may send_message to
	// CompactTokens, if set, is the context size (estimated tokens) past
	// which this agent's conversations are summarized, instead of the sandbox's.
	CompactTokens int `json:"compact_tokens,omitempty"`
	// Instructions are the agent's job in the owner's words, sent at the
	// start of every model request (after the platform's own prompt).
	Instructions string `json:"instructions,omitempty"`
	// OwnerNotes says whether the agent gets the notes about the owner
	// (in its prompt and through read_notes; default true). The worker,
	// which holds none of the owner's data, never does.
	OwnerNotes bool      `json:"owner_notes"`
	CreatedAt  time.Time `json:"created_at"`
}

// UnmarshalJSON reads an agent, with owner_notes true when it is absent
// (agents stored before there were notes).
func (a *Agent) UnmarshalJSON(b []byte) error {
	type plain Agent
	p := plain{OwnerNotes: true}
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*a = Agent(p)
	return nil
}

// Builtin reports whether a is main or the worker (neither is deleted or renamed).
func (a Agent) Builtin() bool { return a.ID == Main || a.ID == Worker }

// builtins are the agents every sandbox has.
func builtins() []Agent {
	return []Agent{
		{Name: Main, ID: Main, Kind: KindOwner, MayMessage: []string{}, OwnerNotes: true},
		{Name: Worker, ID: Worker, Kind: KindWorker, MayMessage: []string{}},
	}
}

// registryKey is the main store's setting that holds the registry.
const registryKey = "agents.registry"

// Registry keeps the agents in the main agent's store. Changes go through
// one Registry at a time.
type Registry struct {
	mu sync.Mutex
}

// List returns every agent, main and worker first.
func (r *Registry) List(ctx context.Context, main *durable.Store) ([]Agent, error) {
	v, err := main.Setting(ctx, registryKey)
	if err != nil {
		return nil, fmt.Errorf("read agents: %w", err)
	}
	list := builtins()
	if v == "" {
		return list, nil
	}
	var stored []Agent
	if err := json.Unmarshal([]byte(v), &stored); err != nil {
		return nil, fmt.Errorf("decode agents: %w", err)
	}
	for _, a := range stored {
		if a.Kind == KindWorker {
			a.OwnerNotes = false // stored before there were notes, it read as true
		}
		if i := slices.IndexFunc(list, func(b Agent) bool { return b.ID == a.ID }); i >= 0 {
			list[i] = a // a built-in with settings of its own
		} else {
			list = append(list, a)
		}
	}
	return list, nil
}

// Get returns the agent called name, or ErrNoAgent.
func (r *Registry) Get(ctx context.Context, main *durable.Store, name string) (Agent, error) {
	list, i, err := r.find(ctx, main, name)
	if err != nil {
		return Agent{}, err
	}
	return list[i], nil
}

// Patch is a change to an agent; nil fields stay.
type Patch struct {
	Name          *string   `json:"name"`
	Model         *string   `json:"model"`
	MayMessage    *[]string `json:"may_message"`
	CompactTokens *int      `json:"compact_tokens"`
	Instructions  *string   `json:"instructions"`
	OwnerNotes    *bool     `json:"owner_notes"`
}

// MaxInstructions bounds an agent's instructions, in bytes.
const MaxInstructions = 8 << 10

func checkInstructions(s string) error {
	if len(s) > MaxInstructions || !utf8.ValidString(s) {
		return fmt.Errorf("%w: instructions are at most %d bytes of UTF-8", ErrInvalid, MaxInstructions)
	}
	return nil
}

// Compaction bounds for CompactTokens.
const (
	MinCompactTokens = 500
	MaxCompactTokens = 1_000_000
)

// Spec is what a new agent is made from.
type Spec struct {
	Name          string   `json:"name"`
	Model         string   `json:"model"`
	MayMessage    []string `json:"may_message"`
	CompactTokens int      `json:"compact_tokens"`
	Instructions  string   `json:"instructions"`
	OwnerNotes    *bool    `json:"owner_notes"` // nil: true
}

// Create adds an owner agent (validated) and records it in the trace of
// main's root conversation, in one commit.
func (r *Registry) Create(ctx context.Context, main *durable.Harness, spec Spec) (Agent, error) {
	name, model, mayMessage := spec.Name, spec.Model, spec.MayMessage
	r.mu.Lock()
	defer r.mu.Unlock()
	list, err := r.List(ctx, main.Store())
	if err != nil {
		return Agent{}, err
	}
	if !ValidName(name) {
		return Agent{}, fmt.Errorf("%w: a name is 1 to 32 of a-z, 0-9 and -, starting with a letter, not %q", ErrInvalid, name)
	}
	if slices.ContainsFunc(list, func(a Agent) bool { return a.Name == name }) {
		return Agent{}, fmt.Errorf("agent %q: %w", name, ErrExists)
	}
	if len(list) >= MaxAgents {
		return Agent{}, fmt.Errorf("%w: a sandbox has at most %d agents", ErrInvalid, MaxAgents)
	}
	if mayMessage == nil {
		mayMessage = []string{}
	}
	if err := checkTargets(list, name, mayMessage); err != nil {
		return Agent{}, err
	}
	if err := checkCompact(spec.CompactTokens); err != nil {
		return Agent{}, err
	}
	if err := checkInstructions(spec.Instructions); err != nil {
		return Agent{}, err
	}
	a := Agent{Name: name, ID: newID(), Kind: KindOwner, Model: model, MayMessage: mayMessage, CompactTokens: spec.CompactTokens,
		Instructions: spec.Instructions, OwnerNotes: spec.OwnerNotes == nil || *spec.OwnerNotes, CreatedAt: main.Now()}
	return a, r.commit(ctx, main, append(list, a), fmt.Sprintf("agent %s created", name), map[string]any{"created": a})
}

// Update applies p to the agent called name. Main and the worker keep
// their names.
func (r *Registry) Update(ctx context.Context, main *durable.Harness, name string, p Patch) (Agent, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	list, i, err := r.find(ctx, main.Store(), name)
	if err != nil {
		return Agent{}, err
	}
	before, a := list[i], list[i]
	if p.Name != nil && *p.Name != a.Name {
		switch {
		case a.Builtin():
			return Agent{}, fmt.Errorf("%w: %s keeps its name", ErrBuiltin, a.Name)
		case !ValidName(*p.Name):
			return Agent{}, fmt.Errorf("%w: a name is 1 to 32 of a-z, 0-9 and -, starting with a letter, not %q", ErrInvalid, *p.Name)
		case slices.ContainsFunc(list, func(b Agent) bool { return b.Name == *p.Name }):
			return Agent{}, fmt.Errorf("agent %q: %w", *p.Name, ErrExists)
		}
		// Lists that named the old name follow the rename.
		for j := range list {
			for k, m := range list[j].MayMessage {
				if m == a.Name {
					list[j].MayMessage[k] = *p.Name
				}
			}
		}
		a = list[i]
		a.Name = *p.Name
		list[i] = a // the list checks below see the new name
	}
	if p.Model != nil {
		a.Model = *p.Model
	}
	if p.CompactTokens != nil {
		if err := checkCompact(*p.CompactTokens); err != nil {
			return Agent{}, err
		}
		a.CompactTokens = *p.CompactTokens
	}
	if p.Instructions != nil {
		if err := checkInstructions(*p.Instructions); err != nil {
			return Agent{}, err
		}
		a.Instructions = *p.Instructions
	}
	if p.OwnerNotes != nil {
		if a.Kind == KindWorker && *p.OwnerNotes {
			return Agent{}, fmt.Errorf("%w: the worker holds none of the owner's data, so it gets no owner notes", ErrInvalid)
		}
		a.OwnerNotes = *p.OwnerNotes
	}
	if p.MayMessage != nil {
		if a.Kind == KindWorker && len(*p.MayMessage) > 0 {
			return Agent{}, fmt.Errorf("%w: the worker messages no agent", ErrInvalid)
		}
		if err := checkTargets(list, a.Name, *p.MayMessage); err != nil {
			return Agent{}, err
		}
		a.MayMessage = append([]string{}, *p.MayMessage...)
	}
	list[i] = a
	return a, r.commit(ctx, main, list, fmt.Sprintf("agent %s changed", before.Name), map[string]any{"before": before, "after": a})
}

// Delete removes the agent called name from the registry (the caller
// removes its storage); the trace keeps only the entry recording it.
func (r *Registry) Delete(ctx context.Context, main *durable.Harness, name string) (Agent, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	list, i, err := r.find(ctx, main.Store(), name)
	if err != nil {
		return Agent{}, err
	}
	a := list[i]
	if a.Builtin() {
		return Agent{}, fmt.Errorf("%w: %s cannot be deleted", ErrBuiltin, a.Name)
	}
	rest := slices.Delete(slices.Clone(list), i, i+1)
	for j := range rest {
		rest[j].MayMessage = slices.DeleteFunc(slices.Clone(rest[j].MayMessage), func(m string) bool { return m == name })
	}
	return a, r.commit(ctx, main, rest, fmt.Sprintf("agent %s deleted", name), map[string]any{"deleted": Agent{Name: a.Name, ID: a.ID, Kind: a.Kind, CreatedAt: a.CreatedAt}})
}

// checkTargets refuses a may_message list naming an unknown agent, the
// agent itself or the worker (reached through delegate only).
func checkTargets(list []Agent, self string, targets []string) error {
	if len(targets) > MaxAgents {
		return fmt.Errorf("%w: may_message names at most %d agents", ErrInvalid, MaxAgents)
	}
	for _, t := range targets {
		i := slices.IndexFunc(list, func(a Agent) bool { return a.Name == t })
		switch {
		case t == self:
			return fmt.Errorf("%w: an agent does not message itself", ErrInvalid)
		case i < 0:
			return fmt.Errorf("%w: may_message names %q, which is no agent", ErrInvalid, t)
		case list[i].Kind == KindWorker:
			return fmt.Errorf("%w: the worker is reached through delegate, not send_message", ErrInvalid)
		}
	}
	return nil
}

// find returns the registry and the index of the agent called name in it.
func (r *Registry) find(ctx context.Context, main *durable.Store, name string) ([]Agent, int, error) {
	list, err := r.List(ctx, main)
	if err != nil {
		return nil, 0, err
	}
	i := slices.IndexFunc(list, func(a Agent) bool { return a.Name == name })
	if i < 0 {
		return nil, 0, fmt.Errorf("agent %q: %w", name, ErrNoAgent)
	}
	return list, i, nil
}

func checkCompact(n int) error {
	if n != 0 && (n < MinCompactTokens || n > MaxCompactTokens) {
		return fmt.Errorf("%w: compact_tokens is 0 (the sandbox's) or %d to %d", ErrInvalid, MinCompactTokens, MaxCompactTokens)
	}
	return nil
}

func (r *Registry) commit(ctx context.Context, main *durable.Harness, list []Agent, text string, data any) error {
	stored := slices.Clone(list)
	sort.SliceStable(stored, func(i, j int) bool { return stored[i].CreatedAt.Before(stored[j].CreatedAt) })
	raw, _ := json.Marshal(stored)
	d, _ := json.Marshal(data)
	id, err := main.Store().MintID()
	if err != nil {
		return err
	}
	return main.Commit(ctx, durable.Writes{
		Settings: map[string]string{registryKey: string(raw)},
		Entries: []durable.Entry{{ID: id, ConversationID: durable.RootConversation, Kind: durable.AgentEntry, Text: text,
			At: main.Now(), Data: d}},
	})
}

func newID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms.
	return "a" + hex.EncodeToString(b)
}
