package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/jobs"
	"github.com/affido/affido/internal/problem"
)

// The owner's scheduled jobs, per agent. The owner creating a job here is
// not asked anything; a job the model proposes (schedule_job) always asks.

func (s *Server) jobList(w http.ResponseWriter, r *http.Request) error {
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	list, err := jobs.List(r.Context(), h.Store())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"jobs": list})
	return nil
}

// jobCreate makes a job; with no conversation named, in a new conversation
// of its own, made in the same commit.
func (s *Server) jobCreate(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		jobs.Spec
		Conversation int64 `json:"conversation"`
	}
	if err := decodeBody(w, r, &body); err != nil {
		return err
	}
	if err := body.Spec.Validate(); err != nil {
		return problem.New(http.StatusBadRequest, "bad-job", err.Error())
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	var writes durable.Writes
	conv := body.Conversation
	if conv != 0 {
		if err := conversationExists(r.Context(), h, conv); err != nil {
			return err
		}

	} else {
		id, err := h.Store().MintID()
		if err != nil {
			return err
		}
		title := "job: " + body.Name
		if body.Name == "" {
			title = "job: " + truncate(body.Prompt, 60)
		}
		conv = id
		writes.Conversations = []durable.Conversation{{ID: id, Title: title, CreatedAt: h.Now(), Settings: map[string]string{}}}
	}
	t, err := jobs.New(r.Context(), h.Store(), conv, body.Spec, h.Now())
	if err != nil {
		return err // jobs.ErrInvalid and ErrTooMany are the client's (fail)
	}
	if t.ID, err = h.Store().MintID(); err != nil {
		return err
	}
	t.Version, t.CreatedAt = 1, h.Now()
	writes.Tasks = []durable.Task{t}
	if err := h.Commit(r.Context(), writes); err != nil {
		return err
	}
	return s.writeJob(w, r, h, t.ID, http.StatusCreated)
}

func (s *Server) jobPause(w http.ResponseWriter, r *http.Request) error {
	return s.jobChange(w, r, func(t durable.Task, j jobs.Job, h *durable.Harness) (*durable.Task, error) {
		if j.State == "paused" {
			return nil, nil
		}
		p := jobs.Paused(t)
		return &p, nil
	})
}

// jobResume re-arms a paused job; a job that is not paused is left as it
// is (its step may be running: re-arming it would skip the time it runs).
func (s *Server) jobResume(w http.ResponseWriter, r *http.Request) error {
	return s.jobChange(w, r, func(t durable.Task, j jobs.Job, h *durable.Harness) (*durable.Task, error) {
		if j.State != "paused" {
			return nil, nil
		}
		rt, err := jobs.Resumed(t, h.Now())
		return &rt, err
	})
}

func (s *Server) jobDelete(w http.ResponseWriter, r *http.Request) error {
	return s.jobChange(w, r, func(t durable.Task, j jobs.Job, h *durable.Harness) (*durable.Task, error) {
		c := jobs.Cancelled(t, h.Now())
		return &c, nil
	})
}

// jobChange commits change to the job named in the path (nothing when it
// returns nil) and answers with the job. The change reads the job as last
// committed and stands even against a run of the job in flight.
func (s *Server) jobChange(w http.ResponseWriter, r *http.Request, change func(durable.Task, jobs.Job, *durable.Harness) (*durable.Task, error)) error {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		return problem.New(http.StatusBadRequest, "bad-id", "a job id is a positive integer")
	}
	h, err := s.harness(r)
	if err != nil {
		return err
	}
	t, err := h.Update(r.Context(), id, func(t durable.Task) (*durable.Task, error) {
		j, err := jobs.Of(t)
		if err != nil {
			return nil, err
		}
		return change(t, j, h)
	})
	switch {
	case errors.Is(err, jobs.ErrNoJob) || errors.Is(err, durable.ErrNotFound):
		return problem.New(http.StatusNotFound, "unknown-job", fmt.Sprintf("job %d: %v", id, jobs.ErrNoJob))
	case err != nil:
		return err
	}
	if !t.Live() {
		writeJSON(w, http.StatusOK, map[string]any{"deleted": id})
		return nil
	}
	return s.writeJob(w, r, h, id, http.StatusOK)
}

func (s *Server) writeJob(w http.ResponseWriter, r *http.Request, h *durable.Harness, id int64, status int) error {
	_, j, err := jobs.Get(r.Context(), h.Store(), id)
	if err != nil {
		return err
	}
	writeJSON(w, status, j)
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return fmt.Sprintf("%s…", string(r[:n]))
}
