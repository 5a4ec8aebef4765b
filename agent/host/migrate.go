package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/affido/affido/agent/agents"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
	"github.com/affido/affido/internal/atomicfile"
	"github.com/affido/affido/internal/sandboxapi"
)

// Where the agents' databases live: SQLite files on the data volume, or
// Config.Storage (the user's Postgres).
const (
	KindSQLite   = sandboxapi.StorageSQLite
	KindPostgres = sandboxapi.StoragePostgres
)

// storageFile records, in the data directory, where the agents' databases
// live once they are anywhere but SQLite files: written before the first
// open on Postgres and by MigrateStorage, so a stack whose default changes
// never opens a user's agents on an empty storage beside their data.
const storageFile = "storage.json"

// ErrNoStorage is the answer for agents whose databases live on a storage
// this process cannot reach (no Config.Storage).
var ErrNoStorage = errors.New("the agents' databases are on a storage this sandbox cannot reach")

// StorageKind says where the agents' databases live: storage.json if it
// is there; else SQLite when a session database is on the volume (a user
// from before a stack moved to Postgres keeps theirs until migrated); else
// the stack's default (Config.UseStorage). An unreadable storage.json is
// an error, never a guess.
func (s *Host) StorageKind() (string, error) {
	kind, _, err := s.storageKind()
	return kind, err
}

// storageKind is StorageKind, and whether storage.json says it.
func (s *Host) storageKind() (kind string, recorded bool, err error) {
	b, err := os.ReadFile(filepath.Join(s.DataDir(), storageFile))
	switch {
	case err == nil:
		var rec struct{ Kind string }
		if json.Unmarshal(b, &rec) != nil || (rec.Kind != KindSQLite && rec.Kind != KindPostgres) {
			return "", false, fmt.Errorf("%s holds no storage kind: %q", storageFile, b)
		}
		return rec.Kind, true, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", false, fmt.Errorf("read %s: %w", storageFile, err)
	}
	if _, err := os.Stat(s.cfg.SessionDB); err == nil {
		return KindSQLite, false, nil
	}
	if s.cfg.Storage != nil && s.cfg.UseStorage {
		return KindPostgres, false, nil
	}
	return KindSQLite, false, nil
}

// writeStorageKind records kind in storage.json (a temporary file, synced,
// renamed over it).
func (s *Host) writeStorageKind(kind string) error {
	b, _ := json.Marshal(map[string]string{"kind": kind})
	return atomicfile.Write(filepath.Join(s.DataDir(), storageFile), b, 0o600)
}

// openDBOn opens agent a's database on kind's storage.
func (s *Host) openDBOn(ctx context.Context, kind string, a agents.Agent) (durable.DB, error) {
	if kind == KindPostgres {
		if s.cfg.Storage == nil {
			return nil, ErrNoStorage
		}
		return s.cfg.Storage.Open(ctx, a)
	}
	path := s.dbPath(a)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("make the storage of agent %s: %w", a.Name, err)
	}
	return sqlite.Open(ctx, path)
}

// MigrateStorage moves every agent's database to the storage of kind to:
// it closes storage, copies each agent's store (main first, whose registry
// names the others) into the other storage, verified table by table
// (durable.Copy), and only then records the new place; storage opens
// there on the next call. The source is left as it was, no longer read.
// Moving to where they are already is a no-op (Agents 0).
func (s *Host) MigrateStorage(ctx context.Context, to string) (sandboxapi.MigrateStorageAnswer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ans := sandboxapi.MigrateStorageAnswer{To: to}
	if to != KindSQLite && to != KindPostgres {
		return ans, fmt.Errorf("%w: no storage %q", ErrBadStorage, to)
	}
	from, err := s.StorageKind()
	if err != nil {
		return ans, err
	}
	ans.From = from
	if from == to {
		return ans, nil
	}
	if s.cfg.Storage == nil {
		return ans, ErrNoStorage
	}
	s.migrating.Store(true)
	defer s.migrating.Store(false)
	if _, err := s.closeStorage(ctx); err != nil {
		return ans, err
	}
	// Where they are now, on record before anything is copied: creating
	// the target's files (a SQLite session database) must never make a
	// failed move read as done.
	if err := s.writeStorageKind(from); err != nil {
		return ans, fmt.Errorf("record the storage: %w", err)
	}
	// The source stores stay open, holding their leases, until the new
	// place is on record: no other process writes to them meanwhile.
	var sources []*durable.Store
	defer func() {
		for _, st := range sources {
			st.Close()
		}
	}()
	main := agents.Agent{Name: agents.Main, ID: agents.Main, Kind: agents.KindOwner}
	var list []agents.Agent
	src, rows, err := s.copyAgent(ctx, from, to, main, func(st *durable.Store) (err error) {
		list, err = s.registry.List(ctx, st)
		return err
	})
	if src != nil {
		sources = append(sources, src)
	}
	if err != nil {
		return ans, err
	}
	ans.Agents, ans.Rows = 1, rows
	for _, a := range list {
		if a.ID == agents.Main {
			continue
		}
		src, n, err := s.copyAgent(ctx, from, to, a, nil)
		if src != nil {
			sources = append(sources, src)
		}
		if err != nil {
			return ans, err
		}
		ans.Agents++
		ans.Rows += n
	}
	if err := s.writeStorageKind(to); err != nil {
		return ans, fmt.Errorf("record the new storage: %w", err)
	}
	s.cfg.Log.Info("storage migrated", "from", from, "to", to, "agents", ans.Agents, "rows", ans.Rows)
	for _, st := range sources {
		st.Close()
	}
	sources = nil
	// Open on the new side now: its work resumes and its wake times are
	// set, as after any open.
	if err := s.openAll(ctx); err != nil {
		return ans, fmt.Errorf("%w: after the move: %w", ErrUnavailable, err)
	}
	return ans, nil
}

// copyAgent copies agent a's store from one storage to the other; read,
// if set, reads the source store first. It returns the source store, open
// (the caller closes it), whenever it opened.
func (s *Host) copyAgent(ctx context.Context, from, to string, a agents.Agent, read func(*durable.Store) error) (*durable.Store, int, error) {
	open := func(kind string) (durable.DB, *durable.Store, error) {
		db, err := s.openDBOn(ctx, kind, a)
		if err != nil {
			return nil, nil, err
		}
		st, err := durable.OpenStore(ctx, db)
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return db, st, nil
	}
	srcDB, src, err := open(from)
	if err != nil {
		return nil, 0, fmt.Errorf("open agent %s on %s: %w", a.Name, from, err)
	}
	if read != nil {
		if err := read(src); err != nil {
			return src, 0, err
		}
	}
	dstDB, dst, err := open(to)
	if err != nil {
		return src, 0, fmt.Errorf("open agent %s on %s: %w", a.Name, to, err)
	}
	defer dst.Close()
	n, err := durable.Copy(ctx, srcDB, dstDB)
	if err != nil {
		return src, 0, fmt.Errorf("copy agent %s: %w", a.Name, err)
	}
	return src, n, nil
}

// ErrBadStorage is MigrateStorage's answer for an unknown storage kind.
var ErrBadStorage = errors.New("bad storage kind")
