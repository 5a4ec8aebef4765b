package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/affido/affido/agent/citations"
	"github.com/affido/affido/agent/corpus"
	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/skills"
	"github.com/affido/affido/agent/workspace"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/marketplace"
)

// conversations

// current opens storage and returns the current conversation, or answers
// with a problem and reports false.
func (s *Server) current(w http.ResponseWriter, r *http.Request) (*durable.Harness, int64, bool) {
	h := s.storageOr503(w, r)
	if h == nil {
		return nil, 0, false
	}
	conv, err := s.currentConversation(r.Context(), h)
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return nil, 0, false
	}
	return h, conv, true
}

// conversationOr404 checks that conversation id exists, or answers 404.
func (s *Server) conversationOr404(w http.ResponseWriter, r *http.Request, h *durable.Harness, id int64) (int64, bool) {
	if _, err := h.Store().Conversation(r.Context(), id); errors.Is(err, durable.ErrNotFound) {
		problem.Write(w, http.StatusNotFound, "unknown-conversation", fmt.Sprintf("no conversation %d", id))
		return 0, false
	} else if err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return 0, false
	}
	return id, true
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) {
	h, conv, ok := s.current(w, r)
	if !ok {
		return
	}
	s.writeConversation(w, r, h, conv)
}

func (s *Server) writeConversation(w http.ResponseWriter, r *http.Request, h *durable.Harness, conv int64) {
	c, err := h.Store().Conversation(r.Context(), conv)
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	n, _ := h.Store().EntryCount(r.Context(), conv)
	writeJSON(w, http.StatusOK, map[string]any{"conversation_id": c.ID, "title": c.Title, "created_at": c.CreatedAt, "entry_count": n, "settings": c.Settings})
}

// sessions lists the conversations, newest first, with the current one.
func (s *Server) sessions(w http.ResponseWriter, r *http.Request) {
	h, conv, ok := s.current(w, r)
	if !ok {
		return
	}
	p, err := h.Store().Conversations(r.Context(), durable.Scan{Order: durable.Desc, Limit: 200, Cursor: r.URL.Query().Get("cursor")})
	if errors.Is(err, durable.ErrBadCursor) {
		problem.Write(w, http.StatusBadRequest, "bad-cursor", err.Error())
		return
	} else if err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"current": conv, "conversations": p.Items, "next": p.Next})
}

// models lists the models the gateway serves (for a model picker).
func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	list := []string{s.cfg.DefaultModel}
	if s.cfg.Models != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		var err error
		if list, err = s.cfg.Models(ctx); err != nil {
			problem.Write(w, http.StatusBadGateway, "gateway-unavailable", "cannot list the models: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"default": s.cfg.DefaultModel, "models": list})
}

func (s *Server) sessionNew(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Title     string `json:"title"`
		Model     string `json:"model"`
		Citations string `json:"citations"`
	}
	if r.ContentLength != 0 && !decodeBody(w, r, &body) {
		return
	}
	if len(body.Title) > 200 {
		problem.Write(w, http.StatusBadRequest, "bad-title", "titles are at most 200 bytes")
		return
	}
	if !validCitations(body.Citations) {
		problem.Write(w, http.StatusBadRequest, "bad-citations", `citations must be "required" or "off"`)
		return
	}
	if body.Model != "" && !s.knownModel(w, r, body.Model) {
		return
	}
	h := s.storageOr503(w, r)
	if h == nil {
		return
	}
	id, err := h.Store().MintID()
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	c := durable.Conversation{ID: id, Title: body.Title, CreatedAt: time.Now().UTC(), Settings: map[string]string{}}
	if body.Model != "" {
		c.Settings["model"] = body.Model
	}
	if body.Citations != "" {
		c.Settings["citations"] = body.Citations
	}
	if err := h.Commit(r.Context(), durable.Writes{Conversations: []durable.Conversation{c}}); err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	if err := h.Store().SetSetting(r.Context(), currentKey, strconv.FormatInt(id, 10)); err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	s.writeConversation(w, r, h, id)
}

func (s *Server) sessionSwitch(w http.ResponseWriter, r *http.Request) {
	var body struct {
		ID int64 `json:"id"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	h := s.storageOr503(w, r)
	if h == nil {
		return
	}
	if _, err := h.Store().Conversation(r.Context(), body.ID); errors.Is(err, durable.ErrNotFound) {
		problem.Write(w, http.StatusNotFound, "unknown-conversation", fmt.Sprintf("no conversation %d", body.ID))
		return
	} else if err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	if err := h.Store().SetSetting(r.Context(), currentKey, strconv.FormatInt(body.ID, 10)); err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	s.writeConversation(w, r, h, body.ID)
}

// reset writes a reset marker: the context is cut, the conversation kept.
// ?conversation= names the conversation (default: the current one).
func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	h, conv, ok := s.current(w, r)
	if !ok {
		return
	}
	if v := r.URL.Query().Get("conversation"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			problem.Write(w, http.StatusBadRequest, "bad-conversation", "conversation is a positive integer")
			return
		}
		if conv, ok = s.conversationOr404(w, r, h, n); !ok {
			return
		}
	}
	id, err := h.Store().MintID()
	if err == nil {
		err = h.Commit(r.Context(), durable.Writes{Entries: []durable.Entry{{ID: id, ConversationID: conv, Kind: durable.ResetMarker, Head: id, At: time.Now().UTC()}}})
	}
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"conversation_id": conv, "reset_entry_id": id})
}

// inspection

func (s *Server) inspect(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sc := durable.Scan{Order: durable.Order(q.Get("order")), Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			problem.Write(w, http.StatusBadRequest, "bad-limit", "limit is 1 to 1000")
			return
		}
		sc.Limit = n
	}
	if sc.Order != "" && sc.Order != durable.Asc && sc.Order != durable.Desc {
		problem.Write(w, http.StatusBadRequest, "bad-order", `order is "asc" or "desc"`)
		return
	}
	var conv int64
	if v := q.Get("conversation"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			problem.Write(w, http.StatusBadRequest, "bad-conversation", "conversation is a positive integer")
			return
		}
		conv = n
	}
	h := s.storageOr503(w, r)
	if h == nil {
		return
	}
	if conv == 0 {
		var err error
		if conv, err = s.currentConversation(r.Context(), h); err != nil {
			problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
			return
		}
	}
	in, err := h.Inspect(r.Context(), conv, sc)
	switch {
	case errors.Is(err, durable.ErrNotFound):
		problem.Write(w, http.StatusNotFound, "unknown-conversation", fmt.Sprintf("no conversation %d", conv))
	case errors.Is(err, durable.ErrBadCursor):
		problem.Write(w, http.StatusBadRequest, "bad-cursor", err.Error())
	case err != nil:
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
	default:
		writeJSON(w, http.StatusOK, in)
	}
}

func (s *Server) entry(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.URL.Query().Get("id"), 10, 64)
	if err != nil || id < 1 {
		problem.Write(w, http.StatusBadRequest, "bad-id", "id is a positive integer")
		return
	}
	h := s.storageOr503(w, r)
	if h == nil {
		return
	}
	e, err := h.Store().Entry(r.Context(), id)
	if errors.Is(err, durable.ErrNotFound) {
		problem.Write(w, http.StatusNotFound, "unknown-entry", fmt.Sprintf("no entry %d", id))
		return
	}
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, e)
}

// prompts

type promptRequest struct {
	Text string `json:"text"`
	// Conversation, if set, is the conversation to answer in (a page
	// showing one conversation while another is current); else the current.
	Conversation int64  `json:"conversation"`
	RequestID    string `json:"requestId"`
	Model        string `json:"model"`
	Citations    string `json:"citations"`
	Wait         *bool  `json:"wait"`
}

// MaxPromptText bounds a prompt.
const MaxPromptText = 64 << 10

func validCitations(c string) bool { return c == "" || c == "required" || c == "off" }

// knownModel answers 400 (or 502) itself and returns false for a model the
// gateway does not serve.
func (s *Server) knownModel(w http.ResponseWriter, r *http.Request, model string) bool {
	if s.cfg.Models == nil {
		return true
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	models, err := s.cfg.Models(ctx)
	if err != nil {
		problem.Write(w, http.StatusBadGateway, "gateway-unavailable", "cannot check the model with the gateway: "+err.Error())
		return false
	}
	if !slices.Contains(models, model) {
		problem.Write(w, http.StatusBadRequest, "unknown-model", fmt.Sprintf("model %q is not served; available: %s", model, strings.Join(models, ", ")))
		return false
	}
	return true
}

func (s *Server) prompt(w http.ResponseWriter, r *http.Request) {
	var req promptRequest
	if !decodeBody(w, r, &req) {
		return
	}
	switch {
	case strings.TrimSpace(req.Text) == "":
		problem.Write(w, http.StatusBadRequest, "missing-text", "text is required")
		return
	case len(req.Text) > MaxPromptText:
		problem.Write(w, http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("text is limited to %d bytes", MaxPromptText))
		return
	case len(req.RequestID) > 200:
		problem.Write(w, http.StatusBadRequest, "bad-request-id", "requestId is at most 200 bytes")
		return
	case !validCitations(req.Citations):
		problem.Write(w, http.StatusBadRequest, "bad-citations", `citations must be "required" or "off"`)
		return
	}
	if req.Model != "" && !s.knownModel(w, r, req.Model) {
		return
	}
	rt := s.runtimeOr503(w, r)
	if rt == nil {
		return
	}
	h, conv, ok := s.current(w, r)
	if !ok {
		return
	}
	if req.Conversation != 0 {
		if conv, ok = s.conversationOr404(w, r, h, req.Conversation); !ok {
			return
		}
	}
	in := durable.Input{Text: req.Text, RequestID: req.RequestID, Model: req.Model, Hint: s.skillHint(req.Text)}
	if req.Citations != "" {
		in.Options = map[string]string{"citations": req.Citations}
	}
	sub, err := h.Submit(r.Context(), conv, in)
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
		return
	}
	if req.Wait != nil && !*req.Wait {
		writeJSON(w, http.StatusAccepted, map[string]any{"run_id": sub.TaskID, "submission_id": sub.ID, "conversation_id": conv, "status": sub.Status})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Minute)
	defer cancel()
	sub, err = h.WaitSettled(ctx, sub.ID)
	if err != nil {
		problem.Write(w, http.StatusGatewayTimeout, "still-running", fmt.Sprintf("run %d is still going; see GET /inspect", sub.TaskID))
		return
	}
	s.writeRun(w, r, rt, sub, nil)
}

// writeRun answers with a submission that is finished, or waits for the
// owner (status "waiting" with the approval it waits on): its reply and the
// entries its run wrote, plus the fields of extra.
func (s *Server) writeRun(w http.ResponseWriter, r *http.Request, rt *runtime, sub durable.Submission, extra map[string]any) {
	h := rt.h
	out := map[string]any{"run_id": sub.TaskID, "submission_id": sub.ID, "conversation_id": sub.ConversationID, "status": sub.Status}
	for k, v := range extra {
		out[k] = v
	}
	if sub.Reason != "" {
		out["reason"] = sub.Reason
	}
	if task, err := h.Store().Task(r.Context(), sub.TaskID); err == nil {
		if task.Error != "" {
			out["error"] = task.Error
		}
		if task.State == durable.Waiting {
			out["status"] = "waiting"
		}
	}
	if a, err := h.WaitingFor(r.Context(), sub); err == nil && a != nil {
		out["waiting_for"] = viewOf(rt.book, *a, "pending")
	}
	if sub.AnswerEntryID != 0 {
		if e, err := h.Store().Entry(r.Context(), sub.AnswerEntryID); err == nil {
			out["reply"] = e.Text
			out["model"] = e.Model
		}
	}
	ids := []int64{}
	p, err := h.Store().Entries(r.Context(), sub.ConversationID, durable.Scan{Order: durable.Desc, Limit: 500})
	if err == nil {
		for _, e := range p.Items {
			if e.RunID == sub.TaskID {
				ids = append(ids, e.ID)
			}
		}
	}
	slices.Sort(ids)
	out["entries"] = ids
	writeJSON(w, http.StatusOK, out)
}

// workspace routes: never open storage

func (s *Server) pathProblem(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, workspace.ErrBadPath):
		problem.Write(w, http.StatusBadRequest, "bad-path", err.Error())
	case errors.Is(err, fs.ErrNotExist):
		problem.Write(w, http.StatusNotFound, "not-found", "no such file or directory")
	default:
		problem.Write(w, http.StatusBadRequest, "file-error", err.Error())
	}
}

func (s *Server) files(w http.ResponseWriter, r *http.Request) {
	list, err := s.ws.List(r.URL.Query().Get("path"))
	if err != nil {
		s.pathProblem(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": list})
}

// MaxFileRead bounds what GET /file and downloads return.
const MaxFileRead = 16 << 20

func (s *Server) sendFile(w http.ResponseWriter, p string) {
	b, cut, err := s.ws.Read(p, MaxFileRead)
	if err != nil {
		s.pathProblem(w, err)
		return
	}
	if cut {
		problem.Write(w, http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("files over %d bytes are not served", MaxFileRead))
		return
	}
	w.Header().Set("Content-Type", http.DetectContentType(b))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", "attachment; filename=\""+strings.ReplaceAll(path.Base(p), `"`, "")+"\"")
	_, _ = w.Write(b)
}

func (s *Server) file(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		problem.Write(w, http.StatusBadRequest, "missing-path", "path is required")
		return
	}
	s.sendFile(w, p)
}

// MaxUpload bounds an upload.
const MaxUpload = 32 << 20

func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	rel, err := workspace.Clean(r.PathValue("path"))
	if err != nil || rel == "." {
		problem.Write(w, http.StatusBadRequest, "bad-path", "upload to /uploads/<relative path>")
		return
	}
	if r.ContentLength > MaxUpload {
		problem.Write(w, http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("uploads are limited to %d bytes", MaxUpload))
		return
	}
	n, err := s.ws.Write(path.Join("uploads", rel), r.Body, MaxUpload)
	switch {
	case errors.Is(err, workspace.ErrTooLarge):
		problem.Write(w, http.StatusRequestEntityTooLarge, "too-large", err.Error())
		return
	case errors.Is(err, workspace.ErrQuota):
		problem.Write(w, http.StatusInsufficientStorage, "quota", err.Error())
		return
	case err != nil:
		s.pathProblem(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"path": path.Join("uploads", rel), "size": n})
}

func (s *Server) download(dir string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rel, err := workspace.Clean(r.PathValue("path"))
		if err != nil || rel == "." {
			problem.Write(w, http.StatusBadRequest, "bad-path", "use /"+dir+"/<relative path>")
			return
		}
		s.sendFile(w, path.Join(dir, rel))
	}
}

// corpus routes

func (s *Server) ingest(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, corpus.MaxDocument+1))
	if err != nil || len(data) > corpus.MaxDocument {
		problem.Write(w, http.StatusRequestEntityTooLarge, "too-large", corpus.ErrTooLarge.Error())
		return
	}
	if room, _ := s.ws.Room(); int64(len(data)) > room {
		problem.Write(w, http.StatusInsufficientStorage, "quota",
			fmt.Sprintf("%v: the workspace and corpus may hold %d bytes in all", workspace.ErrQuota, s.cfg.Quota))
		return
	}
	v, created, err := s.corpus.Ingest(name, data)
	switch {
	case errors.Is(err, corpus.ErrBadName), errors.Is(err, corpus.ErrEmpty):
		problem.Write(w, http.StatusBadRequest, "bad-document", err.Error())
	case errors.Is(err, corpus.ErrTooLarge):
		problem.Write(w, http.StatusRequestEntityTooLarge, "too-large", err.Error())
	case errors.Is(err, corpus.ErrBinary):
		problem.Write(w, http.StatusUnsupportedMediaType, "not-text", err.Error())
	case err != nil:
		problem.Write(w, http.StatusInternalServerError, "corpus", err.Error())
	default:
		status := http.StatusOK
		if created {
			status = http.StatusCreated
		}
		writeJSON(w, status, v)
	}
}

func (s *Server) raw(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	version := 0
	if v := q.Get("version"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			problem.Write(w, http.StatusBadRequest, "bad-version", "version is a positive integer")
			return
		}
		version = n
	}
	b, v, err := s.corpus.Raw(q.Get("doc"), version)
	switch {
	case errors.Is(err, corpus.ErrBadName):
		problem.Write(w, http.StatusBadRequest, "bad-document", err.Error())
	case errors.Is(err, corpus.ErrNotFound):
		problem.Write(w, http.StatusNotFound, "unknown-document", err.Error())
	case err != nil:
		problem.Write(w, http.StatusInternalServerError, "corpus", err.Error())
	default:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Document-Version", strconv.Itoa(v.Version))
		w.Header().Set("X-Document-Sha256", v.SHA256)
		_, _ = w.Write(b)
	}
}

// skills routes: never open storage

var skillInvocation = regexp.MustCompile(`^/([a-z0-9][a-z0-9-]{0,63})(\s|$)`)

// skillHint builds the note for a prompt that starts with /skill_name.
func (s *Server) skillHint(text string) string {
	m := skillInvocation.FindStringSubmatch(text)
	if m == nil || s.cfg.Skills == nil {
		return ""
	}
	return s.cfg.Skills.Hint(m[1])
}

func (s *Server) skillsList(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Skills == nil {
		problem.Write(w, http.StatusNotFound, "no-skills", "skills are not configured")
		return
	}
	list, err := s.cfg.Skills.List()
	if err != nil {
		problem.Write(w, http.StatusInternalServerError, "skills", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"skills": list})
}

func (s *Server) skillsInstall(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	if s.cfg.Skills == nil {
		problem.Write(w, http.StatusNotFound, "no-skills", "skills are not configured")
		return
	}
	if !marketplace.ValidName(body.Name) || (body.Version != "" && !marketplace.ValidVersion(body.Version)) {
		problem.Write(w, http.StatusBadRequest, "bad-skill", "name is lower-case letters, digits and -; version like 1.0.0")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	got, err := s.cfg.Skills.Install(ctx, body.Name, body.Version)
	switch {
	case errors.Is(err, skills.ErrUnknown):
		problem.Write(w, http.StatusNotFound, "unknown-skill", err.Error())
	case errors.Is(err, marketplace.ErrInvalid):
		problem.Write(w, http.StatusBadGateway, "bad-manifest", "the marketplace sent a manifest that was refused; nothing was installed: "+err.Error())
	case errors.Is(err, skills.ErrIntegrity):
		problem.Write(w, http.StatusBadGateway, "integrity", "a file did not match the manifest; nothing was installed: "+err.Error())
	case err != nil:
		problem.Write(w, http.StatusBadGateway, "install-failed", "nothing was installed: "+err.Error())
	default:
		writeJSON(w, http.StatusCreated, got)
	}
}

func (s *Server) skillsRemove(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Skills == nil {
		problem.Write(w, http.StatusNotFound, "no-skills", "skills are not configured")
		return
	}
	if err := s.cfg.Skills.Remove(r.PathValue("name")); errors.Is(err, skills.ErrNotFound) {
		problem.Write(w, http.StatusNotFound, "not-installed", "no such installed skill")
		return
	} else if err != nil {
		problem.Write(w, http.StatusInternalServerError, "skills", err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": r.PathValue("name")})
}

// citations re-verifies every citation of a run against the stored text.
func (s *Server) citations(w http.ResponseWriter, r *http.Request) {
	run, err := strconv.ParseInt(r.URL.Query().Get("runId"), 10, 64)
	if err != nil || run < 1 {
		problem.Write(w, http.StatusBadRequest, "bad-run-id", "runId is a positive integer (the run_id of POST /prompt)")
		return
	}
	h := s.storageOr503(w, r)
	if h == nil {
		return
	}
	rep, err := citations.Check(r.Context(), h.Store(), s.corpus, run)
	switch {
	case errors.Is(err, citations.ErrUnknownRun):
		problem.Write(w, http.StatusNotFound, "unknown-run", fmt.Sprintf("no run %d", run))
	case err != nil:
		problem.Write(w, http.StatusInternalServerError, "storage", err.Error())
	default:
		writeJSON(w, http.StatusOK, rep)
	}
}
