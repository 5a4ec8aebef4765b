// Package jobs gives an agent scheduled jobs: a cron expression in a time
// zone and a prompt to run. A job is a sleeping task whose deadline is its
// next time, so the host (the manager) wakes a sleeping sandbox for it as
// for a reminder. When due, one commit places the prompt in the job's
// conversation (a submission and the run that answers it), records the run
// with its lateness, and re-arms the job at its next time after now: a job
// missed while the whole stack was down runs once on return, not once per
// missed time.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/affido/affido/agent/durable"
)

// Kind is the task kind name.
const Kind = "job"

// MaxJobs bounds the live jobs of one agent.
const MaxJobs = 100

// Errors callers branch on.
var (
	// ErrInvalid is wrapped by every error for a job that cannot be kept.
	ErrInvalid = errors.New("invalid job")
	// ErrNoJob is returned for an id that is no live job.
	ErrNoJob = errors.New("no such job")
	// ErrTooMany is returned when an agent has MaxJobs live jobs already.
	ErrTooMany = errors.New("too many jobs")
)

// parser reads standard five-field cron expressions and descriptors
// (@hourly, @daily, @every 90m).
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is what the owner (or a tool) asks for.
type Spec struct {
	Name   string `json:"name,omitempty"`
	Cron   string `json:"cron"`
	TZ     string `json:"tz,omitempty"` // an IANA zone such as Europe/Paris; default UTC
	Prompt string `json:"prompt"`
}

// checkpoint is a job's stored state.
type checkpoint struct {
	Spec
	Next     time.Time  `json:"next"`
	Runs     int        `json:"runs"`
	LastRun  *time.Time `json:"last_run,omitempty"`
	LastLate int64      `json:"last_late_ms,omitempty"`
	Paused   bool       `json:"paused,omitempty"`
	// LastTask is the run the job started last: while it has not ended (it
	// waits for the owner, say), the job skips its times instead of queueing
	// runs behind it.
	LastTask int64 `json:"last_task,omitempty"`
	// From and Hops are the origin of a job a run made that another agent's
	// message started: its runs carry them on, as outside text from that
	// agent at that hop, so a job neither launders a message into the
	// owner's words nor restarts a chain's hop count.
	From string `json:"from,omitempty"`
	Hops int    `json:"hops,omitempty"`
}

// Job is one live job as the API and the tools show it.
type Job struct {
	ID             int64      `json:"id"`
	ConversationID int64      `json:"conversation_id"`
	Name           string     `json:"name,omitempty"`
	Cron           string     `json:"cron"`
	TZ             string     `json:"tz"`
	Prompt         string     `json:"prompt"`
	State          string     `json:"state"` // "scheduled" or "paused"
	Next           *time.Time `json:"next,omitempty"`
	Runs           int        `json:"runs"`
	LastRun        *time.Time `json:"last_run,omitempty"`
	LastLateMs     int64      `json:"last_late_ms,omitempty"`
	From           string     `json:"from,omitempty"` // the agent whose message led to the job; its runs are outside text from it
	Hops           int        `json:"hops,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
}

// next returns the first time of spec strictly after now.
func (s Spec) next(now time.Time) (time.Time, error) {
	sched, loc, err := s.parse()
	if err != nil {
		return time.Time{}, err
	}
	n := sched.Next(now.In(loc))
	if n.IsZero() {
		return time.Time{}, fmt.Errorf("%w: cron %q never fires", ErrInvalid, s.Cron)
	}
	return n.UTC(), nil
}

func (s Spec) parse() (cron.Schedule, *time.Location, error) {
	if strings.Contains(s.Cron, "TZ=") {
		return nil, nil, fmt.Errorf("%w: give the time zone in tz, not in the cron expression", ErrInvalid)
	}
	sched, err := parser.Parse(s.Cron)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: cron %q: %v (five fields: minute hour day-of-month month day-of-week, or @hourly, @daily, @every 90m)", ErrInvalid, s.Cron, err)
	}
	loc, err := time.LoadLocation(s.zone())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: tz %q is not a known time zone", ErrInvalid, s.TZ)
	}
	return sched, loc, nil
}

func (s Spec) zone() string {
	if s.TZ == "" {
		return "UTC"
	}
	return s.TZ
}

// Validate checks a spec before anything is written.
func (s Spec) Validate() error {
	switch {
	case strings.TrimSpace(s.Prompt) == "":
		return fmt.Errorf("%w: prompt is required", ErrInvalid)
	case len(s.Prompt) > 8000:
		return fmt.Errorf("%w: prompt is at most 8000 bytes", ErrInvalid)
	case len(s.Name) > 200:
		return fmt.Errorf("%w: name is at most 200 bytes", ErrInvalid)
	case len(s.Cron) > 200:
		return fmt.Errorf("%w: cron is at most 200 bytes", ErrInvalid)
	}
	_, _, err := s.parse()
	return err
}

// New returns the sleeping task of a new job in conversation conv (0: the
// conversation of the tool call that makes it), armed at its first time
// after now. The caller commits it (AddTask, or with a tool's result).
func New(ctx context.Context, store *durable.Store, conv int64, s Spec, now time.Time) (durable.Task, error) {
	return newJob(ctx, store, conv, checkpoint{Spec: s}, now)
}

func newJob(ctx context.Context, store *durable.Store, conv int64, cp checkpoint, now time.Time) (durable.Task, error) {
	s := cp.Spec
	if err := s.Validate(); err != nil {
		return durable.Task{}, err
	}
	s.TZ = s.zone()
	next, err := s.next(now)
	if err != nil {
		return durable.Task{}, err
	}
	list, err := List(ctx, store)
	if err != nil {
		return durable.Task{}, err
	}
	if len(list) >= MaxJobs {
		return durable.Task{}, fmt.Errorf("%w: an agent keeps at most %d jobs", ErrTooMany, MaxJobs)
	}
	cp.Spec, cp.Next = s, next
	raw, _ := json.Marshal(cp)
	return durable.Task{ConversationID: conv, Kind: Kind, State: durable.Sleeping, Deadline: &next, Checkpoint: raw, Background: true}, nil
}

// Task runs jobs.
type Task struct{}

// Step runs a due job once and re-arms it.
func (Task) Step(ctx context.Context, sc *durable.StepContext, t durable.Task) (durable.StepResult, error) {
	h := sc.Harness()
	var cp checkpoint
	if err := json.Unmarshal(t.Checkpoint, &cp); err != nil {
		return durable.StepResult{}, fmt.Errorf("job %d: %w", t.ID, err)
	}
	now := h.Now()
	due := cp.Next
	next, err := cp.next(now)
	if err != nil { // the zone database changed under a stored job
		t.State, t.Outcome, t.Error, t.Deadline = durable.Terminal, durable.Failed, err.Error(), nil
		return durable.StepResult{Task: t}, nil
	}
	missed := missedBetween(cp.Spec, due, now)
	late := now.Sub(due).Milliseconds()
	id, err := h.Store().MintID()
	if err != nil {
		return durable.StepResult{}, err
	}
	rearm := func(text string, data map[string]any) durable.StepResult {
		data["job"], data["due"], data["fired"], data["late_ms"], data["missed"], data["next"] = t.ID, due, now, late, missed, next
		raw, _ := json.Marshal(data)
		cp.Next = next
		t.State, t.Deadline = durable.Sleeping, &next
		t.Checkpoint, _ = json.Marshal(cp)
		return durable.StepResult{Task: t, Entries: []durable.Entry{{ID: id, ConversationID: t.ConversationID,
			Kind: durable.JobRunEntry, Text: text + "; next at " + next.Format(time.RFC3339), At: now, RunID: t.ID, Data: raw}}}
	}
	if cp.LastTask != 0 {
		if last, err := h.Store().Task(ctx, cp.LastTask); err == nil && last.Live() {
			return rearm(fmt.Sprintf("Scheduled job %d skipped its time %s: its last run (%d) has not ended; it may wait for your approval",
				t.ID, due.Format(time.RFC3339), cp.LastTask), map[string]any{"skipped": true, "waiting_run": cp.LastTask}), nil
		}
	}
	in := durable.Input{Text: cp.Prompt, RequestID: fmt.Sprintf("job-%d-%d", t.ID, due.Unix()),
		Options: map[string]string{runOption: fmt.Sprint(t.ID)}, From: cp.From, Hops: cp.Hops}
	// A time already run (the clock stepped back) admits nothing again.
	if sub, err := h.Store().SubmissionByRequest(ctx, t.ConversationID, in.RequestID); err == nil {
		cp.LastTask = sub.TaskID
		return rearm(fmt.Sprintf("Scheduled job %d: its time %s ran already", t.ID, due.Format(time.RFC3339)), map[string]any{"skipped": true}), nil
	} else if !errors.Is(err, durable.ErrNotFound) {
		return durable.StepResult{}, err
	}
	sub, gen, err := h.NewSubmission(t.ConversationID, in)
	if err != nil {
		return durable.StepResult{}, err
	}
	text := fmt.Sprintf("Scheduled job %d ran (due %s, %d ms late", t.ID, due.Format(time.RFC3339), late)
	if missed > 0 {
		text += fmt.Sprintf("; %d earlier times were missed while the agent was down and are not run again", missed)
	}
	cp.Runs++
	cp.LastRun, cp.LastLate, cp.LastTask = &now, late, gen.ID
	res := rearm(text+")", map[string]any{"submission": sub.ID, "run": gen.ID})
	res.Submissions, res.NewTasks = []durable.Submission{sub}, []durable.Task{gen}
	return res, nil
}

// runOption is the input option that names the job a run answers.
const runOption = "job"

// RunOf returns the job whose run answers in ("" for a run no job started).
func RunOf(in durable.Input) string { return in.Options[runOption] }

// missedBetween counts the times of s after due and up to now (at most 1000).
func missedBetween(s Spec, due, now time.Time) int {
	n := 0
	for at, err := s.next(due); err == nil && !at.After(now) && n < 1000; at, err = s.next(at) {
		n++
	}
	return n
}

// List returns the live jobs, oldest first.
func List(ctx context.Context, store *durable.Store) ([]Job, error) {
	live, err := store.LiveTasks(ctx)
	if err != nil {
		return nil, err
	}
	out := []Job{}
	for _, t := range live {
		if j, ok := view(t); ok {
			out = append(out, j)
		}
	}
	return out, nil
}

func view(t durable.Task) (Job, bool) {
	var cp checkpoint
	if t.Kind != Kind || !t.Live() || json.Unmarshal(t.Checkpoint, &cp) != nil {
		return Job{}, false
	}
	j := Job{ID: t.ID, ConversationID: t.ConversationID, Name: cp.Name, Cron: cp.Cron, TZ: cp.zone(), Prompt: cp.Prompt,
		State: "scheduled", Runs: cp.Runs, LastRun: cp.LastRun, LastLateMs: cp.LastLate, From: cp.From, Hops: cp.Hops, CreatedAt: t.CreatedAt}
	if cp.Paused {
		j.State = "paused"
	} else {
		next := cp.Next
		j.Next = &next
	}
	return j, true
}

// Get returns live job id's task, or ErrNoJob.
func Get(ctx context.Context, store *durable.Store, id int64) (durable.Task, Job, error) {
	t, err := store.Task(ctx, id)
	if errors.Is(err, durable.ErrNotFound) {
		return durable.Task{}, Job{}, fmt.Errorf("job %d: %w", id, ErrNoJob)
	} else if err != nil {
		return durable.Task{}, Job{}, err
	}
	j, err := Of(t)
	return t, j, err
}

// Of returns the job task t runs, or ErrNoJob when t is no live job.
func Of(t durable.Task) (Job, error) {
	j, ok := view(t)
	if !ok {
		return Job{}, fmt.Errorf("job %d: %w", t.ID, ErrNoJob)
	}
	return j, nil
}

// Paused returns job t paused (to commit): it waits for nothing and runs
// no more until resumed.
func Paused(t durable.Task) durable.Task {
	var cp checkpoint
	_ = json.Unmarshal(t.Checkpoint, &cp)
	cp.Paused = true
	t.State, t.Deadline = durable.Waiting, nil
	t.Checkpoint, _ = json.Marshal(cp)
	return t
}

// Resumed returns job t armed again at its next time after now (to commit).
func Resumed(t durable.Task, now time.Time) (durable.Task, error) {
	var cp checkpoint
	_ = json.Unmarshal(t.Checkpoint, &cp)
	next, err := cp.next(now)
	if err != nil {
		return t, err
	}
	cp.Paused, cp.Next = false, next
	t.State, t.Deadline = durable.Sleeping, &next
	t.Checkpoint, _ = json.Marshal(cp)
	return t, nil
}

// Cancelled returns job t ended (to commit).
func Cancelled(t durable.Task, now time.Time) durable.Task {
	t.State, t.Outcome, t.Error, t.Deadline, t.EndedAt = durable.Terminal, durable.Aborted, "cancelled", nil, &now
	return t
}
