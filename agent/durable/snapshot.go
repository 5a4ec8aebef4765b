package durable

import (
	"context"
	"errors"
	"fmt"
)

// ErrNoSnapshot is Snapshot's answer on a database that cannot write one.
var ErrNoSnapshot = errors.New("this database cannot write a snapshot file")

// Snapshot writes a consistent copy of the store to the new file path
// while the store stays open (SQLite's VACUUM INTO: one read transaction,
// so a commit running meanwhile is in the copy entirely or not at all).
func (s *Store) Snapshot(ctx context.Context, path string) error {
	if s.db.Dialect() != SQLite {
		return ErrNoSnapshot
	}
	if err := s.db.Run(ctx, `VACUUM INTO ?`, path); err != nil {
		return fmt.Errorf("snapshot to %s: %w", path, err)
	}
	return nil
}
