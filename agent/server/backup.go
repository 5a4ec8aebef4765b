package server

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"
	"time"

	"github.com/affido/affido/agent/backup"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/host"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/internal/sandboxapi"
)

// Backups and restores are the manager's (affido admin backup, restore):
// only through the control path.
func (s *Server) onlyControl(r *http.Request, what string) error {
	if r.Header.Get(sandboxapi.HeaderControl) != "1" {
		return problem.New(http.StatusForbidden, sandboxapi.ProblemNotControl, what+" only by the manager, through the control path")
	}
	return nil
}

// notArchived is what of the data directory a backup leaves out: the
// databases (their snapshots go instead), their lock and journal files,
// the identity (a restored sandbox keeps the one its manager gave it), the
// status cache, where the databases live (an archive's are SQLite), and
// snapshots and restores in progress.
func notArchived(rel string, isDir bool) bool {
	base := path.Base(rel)
	return strings.HasPrefix(base, "session.db") || strings.HasPrefix(base, ".backup-") ||
		rel == "identity.json" || rel == "status.json" || rel == "storage.json" || rel == backup.StagingDir
}

// backup streams the sandbox's archive (GET /backup): every agent's
// database as a consistent snapshot taken while the agents run, the rest
// of the data directory and the workspace, then the manifest. A failure
// once the archive has begun cuts the stream, and a cut archive has no
// manifest, so it is never restored.
func (s *Server) backup(w http.ResponseWriter, r *http.Request) error {
	if err := s.onlyControl(r, "a backup is taken"); err != nil {
		return err
	}
	h := s.host
	snap, err := h.Snapshot(r.Context(), h.DataDir())
	if err != nil {
		return err
	}
	defer os.RemoveAll(snap)
	files, err := backup.Tree(backup.DataRoot, snap, nil)
	if err != nil {
		return err
	}
	data, err := backup.Tree(backup.DataRoot, h.DataDir(), notArchived)
	if err != nil {
		return fmt.Errorf("list the data directory: %w", err)
	}
	var ws []backup.Source
	err = s.ws.Reopen(".", func() (err error) {
		ws, err = backup.Tree(backup.WorkspaceRoot, s.cfg.Workspace, func(rel string, _ bool) bool { return rel == backup.StagingDir })
		return err
	})
	if err != nil {
		return fmt.Errorf("list the workspace: %w", err)
	}
	for i := range ws {
		rel := strings.TrimPrefix(ws[i].Name, backup.WorkspaceRoot+"/")
		ws[i].Open = func() (*os.File, error) { return s.ws.Open(rel) }
	}
	files = append(append(files, data...), ws...)
	user, _, _ := s.cfg.Identity.Current()
	now := time.Now().UTC()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="affido-%s-%s.tar"`, user, now.Format("20060102T150405Z")))
	m := backup.Manifest{User: user, CreatedAt: now, SchemaVersion: durable.SchemaVersion}
	if err := backup.Write(w, m, files); err != nil {
		s.cfg.Log.Error("backup cut short", "err", err)
		panic(http.ErrAbortHandler) // the client must not take a cut archive for a whole one
	}
	return nil
}

// refused is what an archive may not restore, whoever wrote its manifest.
func refused(name string) bool {
	rel, ok := strings.CutPrefix(name, backup.DataRoot+"/")
	return ok && (rel == "identity.json" || rel == "status.json" || rel == "storage.json" || strings.HasSuffix(rel, ".lock") ||
		strings.HasSuffix(rel, "-wal") || strings.HasSuffix(rel, "-shm") || strings.HasPrefix(path.Base(rel), ".backup-"))
}

// restore brings a sandbox back from an archive (POST /restore, the body
// the archive): 409 when the sandbox has data, unless force=1; 422 when
// the archive is damaged, cut, edited or of another user, and then nothing
// is written. On success storage opens and the answer carries the next
// due time of the restored work (the manager is told it as well).
func (s *Server) restore(w http.ResponseWriter, r *http.Request) error {
	if err := s.onlyControl(r, "a sandbox is restored"); err != nil {
		return err
	}
	h := s.host
	force := r.URL.Query().Get(sandboxapi.Force) == "1"
	if !force && h.HasData() {
		return problem.New(http.StatusConflict, "has-data", "the sandbox already has data; force=1 replaces it")
	}
	st, err := backup.Stage(r.Body, map[string]string{backup.DataRoot: h.DataDir(), backup.WorkspaceRoot: s.cfg.Workspace}, refused)
	if err != nil {
		return err
	}
	defer st.Discard()
	user, _, _ := s.cfg.Identity.Current()
	if st.Manifest.User != user {
		return problem.Errorf(http.StatusUnprocessableEntity, "bad-archive", "the archive is of user %q, this sandbox is %q's", st.Manifest.User, user)
	}
	if st.Manifest.SchemaVersion > durable.SchemaVersion {
		return problem.Errorf(http.StatusUnprocessableEntity, "bad-archive", "the archive's store is at schema %d, this agent knows up to %d", st.Manifest.SchemaVersion, durable.SchemaVersion)
	}
	due, err := h.Restore(r.Context(), force, func() error {
		return st.Commit(map[string]fs.FileMode{backup.DataRoot: 0o600, backup.WorkspaceRoot: 0o664})
	})
	if errors.Is(err, host.ErrHasData) {
		return problem.New(http.StatusConflict, "has-data", "the sandbox already has data; force=1 replaces it")
	}
	if err != nil {
		return err
	}
	s.cfg.Log.Info("restored", "user", user, "files", len(st.Manifest.Files), "created_at", st.Manifest.CreatedAt)
	writeJSON(w, http.StatusOK, sandboxapi.RestoreAnswer{Files: len(st.Manifest.Files),
		PauseAnswer: sandboxapi.PauseAnswer{NextWakeAt: timeOrNil(due)}})
	return nil
}
