package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/affido/affido/agent/agents"
)

// Agents lists the registered agents, opening storage.
func (s *Host) Agents(ctx context.Context) ([]agents.Agent, error) {
	main, err := s.Runtime(ctx, agents.Main)
	if err != nil {
		return nil, err
	}
	return s.registry.List(ctx, main.Harness.Store())
}

// Agent returns the agent called name (agents.ErrNoAgent for none),
// opening storage.
func (s *Host) Agent(ctx context.Context, name string) (agents.Agent, error) {
	main, err := s.Runtime(ctx, agents.Main)
	if err != nil {
		return agents.Agent{}, err
	}
	return s.registry.Get(ctx, main.Harness.Store(), name)
}

// CreateAgent registers an agent made by spec and opens its storage.
func (s *Host) CreateAgent(ctx context.Context, spec agents.Spec) (agents.Agent, error) {
	main, unlock, err := s.lockOpen(ctx)
	if err != nil {
		return agents.Agent{}, err
	}
	defer unlock()
	a, err := s.registry.Create(ctx, main.Harness, spec)
	if err != nil {
		return agents.Agent{}, err
	}
	rt, err := s.openAgent(ctx, a)
	if err == nil {
		err = rt.Harness.Resume()
	}
	if err != nil {
		return agents.Agent{}, fmt.Errorf("agent %s is registered but its storage did not open: %w", a.Name, err)
	}
	s.swap(func(m map[string]*Runtime) { m[a.Name] = rt })
	return a, nil
}

// UpdateAgent renames an agent, sets its model or whom it may message; the
// agents' harnesses reopen with the change (work in flight resumes, by each
// tool's replay policy).
func (s *Host) UpdateAgent(ctx context.Context, name string, p agents.Patch) (agents.Agent, error) {
	main, unlock, err := s.lockOpen(ctx)
	if err != nil {
		return agents.Agent{}, err
	}
	defer unlock()
	a, err := s.registry.Update(ctx, main.Harness, name, p)
	if err != nil {
		return agents.Agent{}, err
	}
	// Every agent reopens: lists of whom each may message changed, and
	// tools carry their agent's name.
	if _, err := s.closeStorage(ctx); err != nil {
		return agents.Agent{}, err
	}
	if err := s.openAll(ctx); err != nil {
		return agents.Agent{}, err
	}
	return a, nil
}

// DeleteAgent deletes an agent and its storage; main's trace keeps the
// entry recording it.
func (s *Host) DeleteAgent(ctx context.Context, name string) (agents.Agent, error) {
	main, unlock, err := s.lockOpen(ctx)
	if err != nil {
		return agents.Agent{}, err
	}
	defer unlock()
	a, err := s.registry.Delete(ctx, main.Harness, name)
	rts := s.runtimes()
	if err != nil {
		return agents.Agent{}, err
	}
	if rt := rts[name]; rt != nil {
		s.swap(func(m map[string]*Runtime) { delete(m, name) })
		if err := rt.Harness.Close(); err != nil {
			s.cfg.Log.Error("close a deleted agent", "agent", name, "err", err)
		}
	}
	s.dues.forget(a.ID)
	if kind, _ := s.StorageKind(); kind == KindPostgres && s.cfg.Storage != nil {
		if err := s.cfg.Storage.Remove(ctx, a); err != nil {
			s.cfg.Log.Error("remove a deleted agent's storage", "agent", name, "err", err)
		}
	} else if err := os.RemoveAll(filepath.Dir(s.dbPath(a))); err != nil {
		// The next open removes what the registry no longer names.
		s.cfg.Log.Error("remove a deleted agent's storage", "agent", name, "err", err)
	}
	return a, nil
}

// lockOpen opens storage, takes s.mu (so no open or close runs meanwhile)
// and returns main's runtime and the unlock.
func (s *Host) lockOpen(ctx context.Context) (*Runtime, func(), error) {
	if _, err := s.Runtime(ctx, agents.Main); err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	main := s.runtimes()[agents.Main]
	if main == nil {
		s.mu.Unlock()
		return nil, nil, ErrClosedMeanwhile
	}
	return main, s.mu.Unlock, nil
}
