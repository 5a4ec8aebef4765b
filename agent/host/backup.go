package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/affido/affido/agent/agents"
)

// ErrHasData is Restore's refusal, without force, on a sandbox whose
// storage is open or holds a session database.
var ErrHasData = errors.New("the sandbox already has data")

// DataDir is the directory of the session database: the agents' storage,
// the corpus, the skill records, the identity and the status cache.
func (s *Host) DataDir() string { return filepath.Dir(s.cfg.SessionDB) }

// Snapshot opens storage and writes a consistent copy of every agent's
// database into a new directory under dir, laid out as the data directory
// lays them out (session.db, agents/<id>/session.db); it returns that
// directory, which the caller removes. Agents keep running meanwhile.
func (s *Host) Snapshot(ctx context.Context, dir string) (string, error) {
	if _, err := s.Runtime(ctx, agents.Main); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rts := s.runtimes()
	if rts == nil {
		return "", ErrClosedMeanwhile
	}
	out, err := os.MkdirTemp(dir, ".backup-")
	if err != nil {
		return "", err
	}
	for _, rt := range rts {
		rel, err := filepath.Rel(s.DataDir(), s.dbPath(rt.Agent))
		if err == nil {
			err = os.MkdirAll(filepath.Dir(filepath.Join(out, rel)), 0o700)
		}
		if err == nil {
			err = rt.Harness.Store().Snapshot(ctx, filepath.Join(out, rel))
		}
		if err != nil {
			os.RemoveAll(out)
			return "", fmt.Errorf("snapshot agent %s: %w", rt.Agent.Name, err)
		}
	}
	return out, nil
}

// HasData reports whether storage is open, a session database exists, or
// the agents' databases are on Postgres (storage.json).
func (s *Host) HasData() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hasData()
}

func (s *Host) hasData() bool {
	if s.runtimes() != nil {
		return true
	}
	if _, err := os.Stat(filepath.Join(s.DataDir(), storageFile)); err == nil {
		return true // the agents' databases are elsewhere (Postgres)
	}
	_, err := os.Stat(s.cfg.SessionDB)
	return err == nil
}

// Restore puts a restored data directory in place and opens storage: it
// refuses with ErrHasData while there is data, unless force, which closes
// storage and removes the agents' databases, the corpus and the skill
// records first. put moves the restored files into place. Opening storage
// reports the next due time of the restored work (OnScheduled), which
// Restore returns as well.
func (s *Host) Restore(ctx context.Context, force bool, put func() error) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hasData() {
		if !force {
			return time.Time{}, ErrHasData
		}
		if _, err := s.closeStorage(ctx); err != nil {
			return time.Time{}, err
		}
		s.dues.clear() // the replaced agents' times must not outlive them
		for _, name := range []string{filepath.Base(s.cfg.SessionDB), filepath.Base(s.cfg.SessionDB) + "-wal",
			filepath.Base(s.cfg.SessionDB) + "-shm", "agents", "corpus", "skills", storageFile} {
			if err := os.RemoveAll(filepath.Join(s.DataDir(), name)); err != nil {
				return time.Time{}, fmt.Errorf("remove %s before the restore: %w", name, err)
			}
		}
	}
	if err := put(); err != nil {
		return time.Time{}, err
	}
	if err := s.openAll(ctx); err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	for _, rt := range s.runtimes() {
		rt.Harness.Wake()
	}
	return s.nextDueAt(ctx)
}
