package server

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/affido/affido/internal/gatewayapi"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
)

// StorageMover asks a sandbox's agent to move its agents' databases.
type StorageMover interface {
	MigrateStorage(ctx context.Context, ep netip.AddrPort, to string) (sandboxapi.MigrateStorageAnswer, error)
}

// StorageMaker makes a user's Postgres storage before their agents move
// there (manager/agentdb).
type StorageMaker interface {
	Make(ctx context.Context, user string) (gatewayapi.StorageCredential, error)
}

// migrateStorage moves USER's agents' databases to another storage (POST
// /admin/migrate-storage?user=&to=sqlite|postgres): the sandbox is brought
// up if it is not running, and its agent, its storage closed meanwhile,
// copies every store and checks every table before it switches.
func (a *Admin) migrateStorage(w http.ResponseWriter, r *http.Request, user string) error {
	if a.Mover == nil {
		return problem.New(http.StatusNotImplemented, "no-mover", "this manager moves no storage")
	}
	to := r.URL.Query().Get("to")
	if to != sandboxapi.StorageSQLite && to != sandboxapi.StoragePostgres {
		return problem.Errorf(http.StatusBadRequest, "bad-storage", "to is %s or %s, not %q", sandboxapi.StorageSQLite, sandboxapi.StoragePostgres, to)
	}
	if to == sandboxapi.StoragePostgres && a.Maker != nil {
		if _, err := a.Maker.Make(r.Context(), user); err != nil {
			return fmt.Errorf("make the user's Postgres storage: %w", err)
		}
	}
	ep, err := a.Manager.Resolve(r.Context(), user, true)
	if err != nil {
		return fmt.Errorf("bring the sandbox up: %w", err)
	}
	ans, err := a.Mover.MigrateStorage(r.Context(), ep, to)
	if err != nil {
		return err
	}
	writeJSON(w, map[string]any{"user": user, "from": ans.From, "to": ans.To, "agents": ans.Agents, "rows": ans.Rows})
	return nil
}
