package server

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	"github.com/affido/affido/agent/host"
	"github.com/affido/affido/agent/skills"
	"github.com/affido/affido/agent/workspace"
	"github.com/affido/affido/internal/problem"
	"github.com/affido/affido/marketplace"
)

// conversations

// current opens storage and returns the request's agent's harness and its
// current conversation.
func (s *Server) current(r *http.Request) (*durable.Harness, int64, error) {
	h, err := s.harness(r)
	if err != nil {
		return nil, 0, err
	}
	conv, err := host.CurrentConversation(r.Context(), h)
	if err != nil {
		return nil, 0, err
	}
	return h, conv, nil
}

// conversationExists is nil if conversation id exists, else a 404 problem.
func conversationExists(ctx context.Context, h *durable.Harness, id int64) error {
	_, err := h.Store().Conversation(ctx, id)
	if errors.Is(err, durable.ErrNotFound) {
		return problem.Errorf(http.StatusNotFound, "unknown-conversation", "no conversation %d", id)
	}
	return err
}

func (s *Server) session(w http.ResponseWriter, r *http.Request) error {
	h, conv, err := s.current(r)
	if err != nil {
		return err
	}
	return s.writeConversation(w, r, h, conv)
}

func (s *Server) writeConversation(w http.ResponseWriter, r *http.Request, h *durable.Harness, conv int64) error {
	c, err := h.Store().Conversation(r.Context(), conv)
	if err != nil {
		return err
	}
	n, _ := h.Store().EntryCount(r.Context(), conv)
	writeJSON(w, http.StatusOK, map[string]any{"conversation_id": c.ID, "title": c.Title, "created_at": c.CreatedAt, "entry_count": n, "settings": c.Settings, "archived": c.Archived})
	return nil
}

// sessions lists the conversations, newest first, with the current one.
func (s *Server) sessions(w http.ResponseWriter, r *http.Request) error {
	h, conv, err := s.current(r)
	if err != nil {
		return err
	}
	p, err := h.Store().Conversations(r.Context(), durable.Scan{Order: durable.Desc, Limit: 200, Cursor: r.URL.Query().Get("cursor")})
	if err != nil {
		return err
	}
	archived := r.URL.Query().Get("archived") == "1"
	list := []durable.Conversation{}
	for _, c := range p.Items {
		if c.Archived == archived {
			list = append(list, c)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"current": conv, "conversations": list, "next": p.Next})
	return nil
}

// models lists the models the gateway serves (for a model picker).
func (s *Server) models(w http.ResponseWriter, r *http.Request) error {
	list := []string{s.cfg.DefaultModel}
	if s.cfg.Models != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		var err error
		if list, err = s.cfg.Models(ctx); err != nil {
			return unavailable(http.StatusBadGateway, "gateway-unavailable", "cannot list the models", err)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"default": s.cfg.DefaultModel, "models": list})
	return nil
}

func (s *Server) sessionNew(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Title     string `json:"title"`
		Model     string `json:"model"`
		Citations string `json:"citations"`
	}
	if err := decodeBody(w, r, &body); r.ContentLength != 0 && err != nil {
		return err
	}
	if len(body.Title) > 200 {
		return problem.New(http.StatusBadRequest, "bad-title", "titles are at most 200 bytes")
	}
	if !validCitations(body.Citations) {
		return problem.New(http.StatusBadRequest, "bad-citations", `citations must be "required" or "off"`)
	}
	if err := s.knownModel(r, body.Model); err != nil {
		return err
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	id, err := h.Store().MintID()
	if err != nil {
		return err
	}
	c := durable.Conversation{ID: id, Title: body.Title, CreatedAt: time.Now().UTC(), Settings: map[string]string{}}
	if body.Model != "" {
		c.Settings["model"] = body.Model
	}
	if body.Citations != "" {
		c.Settings["citations"] = body.Citations
	}
	if err := h.Commit(r.Context(), durable.Writes{Conversations: []durable.Conversation{c}}); err != nil {
		return err
	}
	if err := host.SetCurrentConversation(r.Context(), h, id); err != nil {
		return err
	}
	return s.writeConversation(w, r, h, id)
}

func (s *Server) sessionSwitch(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		ID int64 `json:"id"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	if _, err := h.Store().Conversation(r.Context(), body.ID); errors.Is(err, durable.ErrNotFound) {
		return problem.New(http.StatusNotFound, "unknown-conversation", fmt.Sprintf("no conversation %d", body.ID))
	} else if err != nil {
		return err
	}
	if err := host.SetCurrentConversation(r.Context(), h, body.ID); err != nil {
		return err
	}
	return s.writeConversation(w, r, h, body.ID)
}

// reset writes a reset marker: the context is cut, the conversation kept.
// ?conversation= names the conversation (default: the current one).
func (s *Server) reset(w http.ResponseWriter, r *http.Request) error {
	h, conv, err := s.current(r)
	if err != nil {
		return err
	}
	if v := r.URL.Query().Get("conversation"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return problem.New(http.StatusBadRequest, "bad-conversation", "conversation is a positive integer")
		}
		if err := conversationExists(r.Context(), h, n); err != nil {
			return err
		}
		conv = n
	}
	id, err := h.Store().MintID()
	if err == nil {
		err = h.Commit(r.Context(), durable.Writes{Entries: []durable.Entry{{ID: id, ConversationID: conv, Kind: durable.ResetMarker, Head: id, At: time.Now().UTC()}}})
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"conversation_id": conv, "reset_entry_id": id})
	return nil
}

// inspection

func (s *Server) inspect(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	sc := durable.Scan{Order: durable.Order(q.Get("order")), Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return problem.New(http.StatusBadRequest, "bad-limit", "limit is 1 to 1000")
		}
		sc.Limit = n
	}
	if sc.Order != "" && sc.Order != durable.Asc && sc.Order != durable.Desc {
		return problem.New(http.StatusBadRequest, "bad-order", `order is "asc" or "desc"`)
	}
	var conv int64
	if v := q.Get("conversation"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return problem.New(http.StatusBadRequest, "bad-conversation", "conversation is a positive integer")
		}
		conv = n
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	if conv == 0 {
		var err error
		if conv, err = host.CurrentConversation(r.Context(), h); err != nil {
			return err
		}
	}
	in, err := h.Inspect(r.Context(), conv, sc)
	switch {
	case errors.Is(err, durable.ErrNotFound):
		return problem.New(http.StatusNotFound, "unknown-conversation", fmt.Sprintf("no conversation %d", conv))
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, in)
	return nil
}

func (s *Server) entry(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseInt(r.URL.Query().Get("id"), 10, 64)
	if err != nil || id < 1 {
		return problem.New(http.StatusBadRequest, "bad-id", "id is a positive integer")
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	e, err := h.Store().Entry(r.Context(), id)
	if errors.Is(err, durable.ErrNotFound) {
		return problem.New(http.StatusNotFound, "unknown-entry", fmt.Sprintf("no entry %d", id))
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, e)
	return nil
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

// knownModel is nil for "" and a model the gateway serves; else a 400
// problem (502 when the gateway cannot say).
func (s *Server) knownModel(r *http.Request, model string) error {
	if model == "" || s.cfg.Models == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	models, err := s.cfg.Models(ctx)
	if err != nil {
		return unavailable(http.StatusBadGateway, "gateway-unavailable", "cannot check the model with the gateway", err)
	}
	if !slices.Contains(models, model) {
		return problem.Errorf(http.StatusBadRequest, "unknown-model", "model %q is not served; available: %s", model, strings.Join(models, ", "))
	}
	return nil
}

func (s *Server) prompt(w http.ResponseWriter, r *http.Request) error {
	var req promptRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(req.Text) == "":
		return problem.New(http.StatusBadRequest, "missing-text", "text is required")
	case len(req.Text) > MaxPromptText:
		return problem.New(http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("text is limited to %d bytes", MaxPromptText))
	case len(req.RequestID) > 200:
		return problem.New(http.StatusBadRequest, "bad-request-id", "requestId is at most 200 bytes")
	case !validCitations(req.Citations):
		return problem.New(http.StatusBadRequest, "bad-citations", `citations must be "required" or "off"`)
	}
	if err := s.knownModel(r, req.Model); err != nil {
		return err
	}
	rt, err := s.runtime(r)
	if err != nil {
		return err
	}
	h, conv, err := s.current(r)
	if err != nil {
		return err
	}
	if req.Conversation != 0 {
		if err := conversationExists(r.Context(), h, req.Conversation); err != nil {
			return err
		}
		conv = req.Conversation
	}
	in := durable.Input{Text: req.Text, RequestID: req.RequestID, Model: req.Model, Hint: s.skillHint(req.Text)}
	if req.Citations != "" {
		in.Options = map[string]string{"citations": req.Citations}
	}
	sub, err := h.Submit(r.Context(), conv, in)
	if err != nil {
		return err
	}
	s.titleFromPrompt(r.Context(), h, conv, req.Text)
	if req.Wait != nil && !*req.Wait {
		writeJSON(w, http.StatusAccepted, map[string]any{"run_id": sub.TaskID, "submission_id": sub.ID, "conversation_id": conv, "status": sub.Status})
		return nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Minute)
	defer cancel()
	sub, err = h.WaitSettled(ctx, sub.ID)
	if err != nil {
		return problem.New(http.StatusGatewayTimeout, "still-running", fmt.Sprintf("run %d is still going; see GET /inspect", sub.TaskID))
	}
	return s.writeRun(w, r, rt, sub, nil)
}

// titleMax is the length, in characters, of a title made from a prompt.
const titleMax = 60

// titleFromPrompt names an untitled conversation after its first prompt
// (its first line, cut at a word within titleMax characters). A title the
// owner gave is never replaced; a failure here only leaves it untitled.
func (s *Server) titleFromPrompt(ctx context.Context, h *durable.Harness, conv int64, text string) {
	c, err := h.Store().Conversation(ctx, conv)
	if err != nil || c.Title != "" {
		return
	}
	if err := h.Store().RenameConversation(ctx, conv, promptTitle(text)); err != nil {
		s.cfg.Log.Warn("title from the first prompt", "conversation", conv, "err", err)
	}
}

// promptTitle is the title a prompt gives its conversation.
func promptTitle(text string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(text), "\n")
	line = strings.Join(strings.Fields(line), " ")
	runes := []rune(line)
	if len(runes) <= titleMax {
		return line
	}
	cut := string(runes[:titleMax])
	if i := strings.LastIndex(cut, " "); i > len(cut)/2 {
		cut = cut[:i]
	}
	return strings.TrimRight(cut, " ,.;:") + "…"
}

// writeRun answers with a submission that is finished, or waits for the
// owner (status "waiting" with the approval it waits on): its reply and the
// entries its run wrote, plus the fields of extra.
func (s *Server) writeRun(w http.ResponseWriter, r *http.Request, rt *host.Runtime, sub durable.Submission, extra map[string]any) error {
	h := rt.Harness
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
		out["waiting_for"] = viewOf(rt.Book, *a, "pending")
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
	return nil
}

// workspace routes: never open storage

func (s *Server) files(w http.ResponseWriter, r *http.Request) error {
	list, err := s.ws.List(r.URL.Query().Get("path"))
	if err != nil {
		return pathError(err)
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": list})
	return nil
}

// MaxFileRead bounds what GET /file and downloads return.
const MaxFileRead = 16 << 20

func (s *Server) sendFile(w http.ResponseWriter, p string) error {
	b, cut, err := s.ws.Read(p, MaxFileRead)
	if err != nil {
		return pathError(err)
	}
	if cut {
		return problem.New(http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("files over %d bytes are not served", MaxFileRead))
	}
	w.Header().Set("Content-Type", http.DetectContentType(b))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Disposition", "attachment; filename=\""+strings.ReplaceAll(path.Base(p), `"`, "")+"\"")
	_, _ = w.Write(b)
	return nil
}

func (s *Server) file(w http.ResponseWriter, r *http.Request) error {
	p := r.URL.Query().Get("path")
	if p == "" {
		return problem.New(http.StatusBadRequest, "missing-path", "path is required")
	}
	return s.sendFile(w, p)
}

// MaxUpload bounds an upload.
const MaxUpload = 32 << 20

func (s *Server) upload(w http.ResponseWriter, r *http.Request) error {
	rel, err := workspace.Clean(r.PathValue("path"))
	if err != nil || rel == "." {
		return problem.New(http.StatusBadRequest, "bad-path", "upload to /uploads/<relative path>")
	}
	if r.ContentLength > MaxUpload {
		return problem.New(http.StatusRequestEntityTooLarge, "too-large", fmt.Sprintf("uploads are limited to %d bytes", MaxUpload))
	}
	n, err := s.ws.Write(path.Join("uploads", rel), r.Body, MaxUpload)
	if err != nil {
		return pathError(err)
	}
	writeJSON(w, http.StatusCreated, map[string]any{"path": path.Join("uploads", rel), "size": n})
	return nil
}

func (s *Server) download(dir string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		rel, err := workspace.Clean(r.PathValue("path"))
		if err != nil || rel == "." {
			return problem.New(http.StatusBadRequest, "bad-path", "use /"+dir+"/<relative path>")
		}
		return s.sendFile(w, path.Join(dir, rel))
	}
}

// corpus routes

func (s *Server) ingest(w http.ResponseWriter, r *http.Request) error {
	name := r.URL.Query().Get("name")
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, corpus.MaxDocument+1))
	if err != nil || len(data) > corpus.MaxDocument {
		return problem.New(http.StatusRequestEntityTooLarge, "too-large", corpus.ErrTooLarge.Error())
	}
	if room, _ := s.ws.Room(); int64(len(data)) > room {
		return fmt.Errorf("%w: the workspace and corpus may hold %d bytes in all", workspace.ErrQuota, s.cfg.Quota)
	}
	v, created, err := s.corpus.Ingest(name, data)
	if err != nil {
		return err // the corpus's errors of a bad document are the client's
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, v)
	return nil
}

func (s *Server) raw(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	version := 0
	if v := q.Get("version"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return problem.New(http.StatusBadRequest, "bad-version", "version is a positive integer")
		}
		version = n
	}
	b, v, err := s.corpus.Raw(q.Get("doc"), version)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Document-Version", strconv.Itoa(v.Version))
	w.Header().Set("X-Document-Sha256", v.SHA256)
	_, _ = w.Write(b)
	return nil
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

func (s *Server) skillsList(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Skills == nil {
		return problem.New(http.StatusNotFound, "no-skills", "skills are not configured")
	}
	list, err := s.cfg.Skills.List()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"skills": list})
	return nil
}

func (s *Server) skillsInstall(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	if s.cfg.Skills == nil {
		return problem.New(http.StatusNotFound, "no-skills", "skills are not configured")
	}
	if !marketplace.ValidName(body.Name) || (body.Version != "" && !marketplace.ValidVersion(body.Version)) {
		return problem.New(http.StatusBadRequest, "bad-skill", "name is lower-case letters, digits and -; version like 1.0.0")
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	got, err := s.cfg.Skills.Install(ctx, body.Name, body.Version)
	switch {
	case errors.Is(err, skills.ErrUnknown), errors.Is(err, workspace.ErrClosed):
		return err
	case errors.Is(err, marketplace.ErrInvalid):
		return unavailable(http.StatusBadGateway, "bad-manifest", "the marketplace sent a manifest that was refused; nothing was installed", err)
	case errors.Is(err, skills.ErrIntegrity):
		return unavailable(http.StatusBadGateway, "integrity", "a file did not match the manifest; nothing was installed", err)
	case err != nil:
		return unavailable(http.StatusBadGateway, "install-failed", "nothing was installed", err)
	default:
		writeJSON(w, http.StatusCreated, got)
	}
	return nil
}

func (s *Server) skillsRemove(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.Skills == nil {
		return problem.New(http.StatusNotFound, "no-skills", "skills are not configured")
	}
	if err := s.cfg.Skills.Remove(r.PathValue("name")); errors.Is(err, skills.ErrNotFound) {
		return problem.New(http.StatusNotFound, "not-installed", "no such installed skill")
	} else if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"removed": r.PathValue("name")})
	return nil
}

// citations re-verifies every citation of a run against the stored text.
func (s *Server) citations(w http.ResponseWriter, r *http.Request) error {
	run, err := strconv.ParseInt(r.URL.Query().Get("runId"), 10, 64)
	if err != nil || run < 1 {
		return problem.New(http.StatusBadRequest, "bad-run-id", "runId is a positive integer (the run_id of POST /prompt)")
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	rep, err := citations.Check(r.Context(), h.Store(), s.corpus, run)
	switch {
	case errors.Is(err, citations.ErrUnknownRun):
		return problem.New(http.StatusNotFound, "unknown-run", fmt.Sprintf("no run %d", run))
	case err != nil:
		return err
	default:
		writeJSON(w, http.StatusOK, rep)
	}
	return nil
}
