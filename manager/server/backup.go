package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/affido/affido/internal/sandboxapi"
)

// Archiver takes and restores a sandbox's archive over the control path
// (agentclient.Client). Backup's stream is closed by the caller; Restore
// returns the agent's refusals (409, 422) as *problem.Error.
type Archiver interface {
	Backup(ctx context.Context, ep netip.AddrPort) (io.ReadCloser, error)
	Restore(ctx context.Context, ep netip.AddrPort, archive io.Reader, force bool) (sandboxapi.RestoreAnswer, error)
}

// backup streams USER's archive (GET /admin/backup?user=): the sandbox is
// brought up first if it is not running; the request in flight keeps the
// agent from being paused under it.
func (a *Admin) backup(w http.ResponseWriter, r *http.Request, user string) error {
	ep, err := a.Manager.Resolve(r.Context(), user, true)
	if err != nil {
		return fmt.Errorf("bring the sandbox up: %w", err)
	}
	body, err := a.Archiver.Backup(r.Context(), ep)
	if err != nil {
		return err
	}
	defer body.Close()
	w.Header().Set("Content-Type", "application/x-tar")
	if _, err := io.Copy(w, body); err != nil {
		log := a.Log
		if log == nil {
			log = slog.Default()
		}
		log.Error("backup cut short", "user", user, "err", err)
		panic(http.ErrAbortHandler) // the client must see a cut stream as cut
	}
	return nil
}

// restore brings USER back from the archive in the body (POST
// /admin/restore?user=[&force=1]): onto their sandbox, made fresh if they
// have none. The restored agent's next due time is stored at once, so its
// reminders and jobs wake it even if it is paused before it reports.
func (a *Admin) restore(w http.ResponseWriter, r *http.Request, user string) error {
	ep, err := a.Manager.Resolve(r.Context(), user, true)
	if err != nil {
		return fmt.Errorf("bring the sandbox up: %w", err)
	}
	ans, err := a.Archiver.Restore(r.Context(), ep, r.Body, r.URL.Query().Get(sandboxapi.Force) == "1")
	if err != nil {
		return err
	}
	if err := a.Manager.ReportWake(r.Context(), user, ans.NextWakeAt); err != nil {
		return fmt.Errorf("store the restored wake time: %w", err)
	}
	out := map[string]any{"user": user, "files": ans.Files}
	if ans.NextWakeAt != nil {
		out["next_wake_at"] = ans.NextWakeAt.UTC().Format(time.RFC3339)
	}
	writeJSON(w, out)
	return nil
}
