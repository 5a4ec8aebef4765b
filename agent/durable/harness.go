package durable

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// TaskKind runs the steps of one kind of task. Step loads nothing itself:
// it gets the task as last committed and returns the next state together
// with everything the step wrote; the harness commits both atomically. A
// step may commit an intermediate state through sc.Commit (a tool's intent).
type TaskKind interface {
	Step(ctx context.Context, sc *StepContext, t Task) (StepResult, error)
}

// StepResult is one step's commit: the task's new state and what it wrote.
type StepResult struct {
	Task        Task
	Entries     []Entry
	Submissions []Submission
	Usage       []UsageDelta
	NewTasks    []Task
	// Updates replace existing tasks, each only if it is still stored as
	// read (see TaskUpdate).
	Updates []TaskUpdate
}

// StepContext gives a step the harness's services.
type StepContext struct {
	h    *Harness
	task *Task
}

// Harness returns the harness running the step.
func (sc *StepContext) Harness() *Harness { return sc.h }

// Commit commits an intermediate state of the task with entries, before the
// step goes on (for example a tool's intent before the tool runs).
func (sc *StepContext) Commit(ctx context.Context, t Task, entries ...Entry) error {
	t.State = Running
	if err := sc.h.commit(ctx, t.ID, Writes{Tasks: []Task{t}, Entries: entries}); err != nil {
		return err
	}
	*sc.task = t
	return nil
}

// RetryPolicy is the backoff for transient model errors.
type RetryPolicy struct {
	Max  int           // retries after the first attempt (default 3)
	Base time.Duration // first delay (default 2 s), doubled each retry
	Cap  time.Duration // longest delay (default 60 s)
}

// Delay is the wait before retry attempt (1-based).
func (p RetryPolicy) Delay(attempt int) time.Duration {
	d := p.Base << (attempt - 1)
	if d > p.Cap || d <= 0 {
		d = p.Cap
	}
	return d
}

// CompactionPolicy sets when a conversation is summarized. Sizes are
// estimated tokens (4 bytes each).
type CompactionPolicy struct {
	Threshold  int // above this after a run, a background summary task starts (0: never)
	HardCap    int // above this, no request is sent; the run fails (0: no cap)
	KeepRecent int // entries kept verbatim after a summary (default 20)
}

// Options configure a Harness.
type Options struct {
	Model        Model
	DefaultModel string
	System       string // system prompt; the time is never put here (provider caches stay valid)
	// SystemSuffix, if set, returns text that follows System in every
	// model request of a run answering in (an agent's notes), read anew
	// at each request so a change shows at the next one. Like System it
	// carries no time: it changes only when what it says does.
	SystemSuffix func(ctx context.Context, in Input) (string, error)
	Tools        []Tool
	// MoreTools, if set, lists tools that come and go while the harness
	// runs (the owner's connectors, which the manager holds): asked before
	// every model request, and when a call names a tool not in Tools. A
	// tool in Tools wins over one of the same name; an error offers none.
	MoreTools  func(ctx context.Context) ([]Tool, error)
	Kinds      map[string]TaskKind // extra task kinds, by name
	Retry      RetryPolicy
	Compaction CompactionPolicy
	MaxTurns   int // model calls per run (default 16)
	Redact     func(string) string
	// OnScheduled is told every new earliest due time (zero: nothing due),
	// from one goroutine and in order; changes that come faster than the
	// host takes them are coalesced to the latest.
	OnScheduled func(at time.Time)
	// Gate, if set, checks every model reply before it is stored; a
	// non-empty reason rejects it (nothing is written) and the model is told why.
	Gate func(ctx context.Context, g GateInput) (reason string, extra []Entry, err error)
	// OnDelta, if set, hears a model reply's text as it streams in, before
	// it is stored (for a watcher; nothing durable); "" starts each attempt. Streams, if set, says
	// whether a run's reply may be shown before it is stored: not when a
	// gate may still reject it.
	OnDelta func(conv, run int64, text string)
	Streams func(options, settings map[string]string) bool
	// Policy, if set, judges every tool call before it runs (nil: all run).
	Policy Policy
	// OnApproval returns tasks to commit with a new approval (the owner's
	// notification); IDs are assigned by the harness.
	OnApproval func(a Approval) []Task
	// OnAnswer returns tasks to commit with a run's answer (the owner's
	// notification of a scheduled job's result, for example), given the
	// input the run answered and its reply.
	OnAnswer func(in Input, answer Entry) []Task
	// ApprovalTTL is how long an approval waits for the owner before the
	// call is refused as expired (default DefaultApprovalTTL).
	ApprovalTTL time.Duration
	Now         func() time.Time
	Log         *slog.Logger
}

// Harness runs tasks over a Store. It is the only writer of its store.
type Harness struct {
	store *Store
	opts  Options
	tools map[string]Tool
	kinds map[string]TaskKind

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	decideMu sync.Mutex // one owner decision at a time

	// commitMu orders every commit that writes existing tasks: an
	// invocation's own commits, and changes from outside it (the owner
	// cancels or pauses a job, a tool cancels a reminder). An outside change
	// to a task whose invocation is in flight marks it in changed, and that
	// invocation's next commit is refused (errChanged): the change stands,
	// and the step's work is dropped instead of bringing the task back.
	// Submit and AddTask write new tasks only and do not take it.
	commitMu sync.Mutex

	mu       sync.Mutex
	resumed  bool
	closed   bool
	shut     chan struct{}                // closed once Close has closed the store
	busy     map[int64]bool               // task IDs with an invocation in flight
	changed  map[int64]bool               // busy tasks changed from outside their invocation
	cancels  map[int64]context.CancelFunc // busy tasks: ends the invocation's context (Stop)
	kick     chan struct{}
	lastDue  time.Time
	timer    *time.Timer
	watchers []chan struct{}

	// The host callback runs on one goroutine, with the latest due time
	// only: a host never hears an older deadline after a newer one.
	notifyCh  chan struct{}
	notifyDue time.Time
}

// recheck bounds how long the harness trusts a timer: deadlines are wall
// clock times, and a timer runs on the monotonic clock, so after a wall
// clock jump the next re-check (at most this far away) finds what is due.
const recheck = time.Second

// Kind names of the built-in tasks.
const (
	KindGeneration = "generation"
	KindSummary    = "summary"
)

// Open opens a harness on store. Tasks a crash left running go back to
// pending with their last checkpoint; nothing runs until Resume.
func Open(ctx context.Context, store *Store, opts Options) (*Harness, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Retry.Max == 0 {
		opts.Retry.Max = 3
	}
	if opts.Retry.Base == 0 {
		opts.Retry.Base = 2 * time.Second
	}
	if opts.Retry.Cap == 0 {
		opts.Retry.Cap = 60 * time.Second
	}
	if opts.MaxTurns == 0 {
		opts.MaxTurns = 16
	}
	if opts.ApprovalTTL <= 0 {
		opts.ApprovalTTL = DefaultApprovalTTL
	}
	if opts.Compaction.KeepRecent == 0 {
		opts.Compaction.KeepRecent = 20
	}
	h := &Harness{store: store, opts: opts, tools: map[string]Tool{}, kinds: map[string]TaskKind{}, shut: make(chan struct{}),
		busy: map[int64]bool{}, changed: map[int64]bool{}, cancels: map[int64]context.CancelFunc{}, kick: make(chan struct{}, 1), notifyCh: make(chan struct{}, 1)}
	for _, t := range opts.Tools {
		h.tools[t.Name] = t
	}
	h.kinds[KindGeneration] = generation{}
	h.kinds[KindSummary] = summary{}
	for name, k := range opts.Kinds {
		h.kinds[name] = k
	}
	live, err := store.LiveTasks(ctx)
	if err != nil {
		return nil, fmt.Errorf("open harness: %w", err)
	}
	var back []Task
	for _, t := range live {
		switch {
		case t.State == Running:
			t.State = Pending
			back = append(back, t)
		case t.State == Waiting && t.Deadline == nil && waitsOnApproval(t): // asked before approvals expired: one TTL from now
			due := h.Now().Add(opts.ApprovalTTL)
			t.Deadline = &due
			back = append(back, t)
		}
	}
	if len(back) > 0 {
		if err := store.Commit(ctx, Writes{Tasks: back}); err != nil {
			return nil, fmt.Errorf("open harness: requeue running tasks, date waiting ones: %w", err)
		}
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	go h.stopOnFailure()
	return h, nil
}

// stopOnFailure closes the harness when its store fails (another process
// took the lease, or a commit's outcome is unknown): nothing this process
// writes can be trusted to land any more. It is a crash, as far as the
// work is concerned: the next holder, or this host reopening, recovers
// from the last commit.
func (h *Harness) stopOnFailure() {
	select {
	case <-h.ctx.Done():
	case <-h.store.Failed():
		h.opts.Log.Error("durable: the storage failed; the harness stops", "err", h.store.Err())
		_ = h.Close()
	}
}

// closedErr is the error of a call on a closed harness: ErrClosed, and
// the store's failure if that closed it.
func (h *Harness) closedErr() error {
	if err := h.store.Err(); err != nil {
		return fmt.Errorf("harness: %w: %w", ErrClosed, err)
	}
	return fmt.Errorf("harness: %w", ErrClosed)
}

// Store returns the harness's store.
func (h *Harness) Store() *Store { return h.store }

// Now is the harness clock.
func (h *Harness) Now() time.Time { return h.opts.Now().UTC() }

// Resume starts running ready tasks. It is idempotent.
func (h *Harness) Resume() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return fmt.Errorf("harness: %w", ErrClosed)
	}
	if h.resumed {
		return nil
	}
	h.resumed = true
	h.wg.Add(2)
	go h.loop()
	go h.notifier()
	h.poke()
	return nil
}

// notifier tells the host each new earliest due time, in order, latest wins.
func (h *Harness) notifier() {
	defer h.wg.Done()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.notifyCh:
		}
		h.mu.Lock()
		due := h.notifyDue
		h.mu.Unlock()
		if h.opts.OnScheduled != nil {
			h.opts.OnScheduled(due)
		}
	}
}

func (h *Harness) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Close stops the scheduler, cancels steps in flight without committing
// them and closes the store. It writes no outcome, so work resumes on reopen.
// A Close while another runs (the harness stopping itself on a lost
// storage) returns once the store is closed.
func (h *Harness) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		<-h.shut
		return nil
	}
	h.closed = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
	h.notify()
	defer close(h.shut)
	return h.store.Close()
}

// Closed reports whether Close was called.
func (h *Harness) Closed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

func (h *Harness) loop() {
	defer h.wg.Done()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.kick:
		}
		if err := h.dispatch(); err != nil && h.ctx.Err() == nil {
			h.opts.Log.Error("durable: dispatch", "err", err)
		}
	}
}

// ready reports whether t may run now.
func (h *Harness) ready(t Task, now time.Time) bool {
	switch t.State {
	case Pending, Running:
		return true
	case Sleeping:
		return t.Deadline == nil || !t.Deadline.After(now)
	case Waiting: // a deadline while waiting is when the wait expires
		return expired(t, now)
	}
	return false
}

// lane is the queue a task of a kind that runs one at a time per
// conversation (generation, summary) waits in; other kinds have none.
type lane struct {
	kind string
	conv int64
}

func laneOf(t Task) (lane, bool) {
	if t.Kind != KindGeneration && t.Kind != KindSummary {
		return lane{}, false
	}
	return lane{t.Kind, t.ConversationID}, true
}

// laneHeads returns the oldest live task of each lane (live is oldest first).
func laneHeads(live []Task) map[lane]int64 {
	heads := map[lane]int64{}
	for _, t := range live {
		if l, ok := laneOf(t); ok {
			if _, seen := heads[l]; !seen {
				heads[l] = t.ID
			}
		}
	}
	return heads
}

// dispatch starts every ready task that may run: generation tasks run one
// at a time per conversation, oldest first, and so do summary tasks (a
// summary written while another one is would find the context changed
// under it and drop itself); other kinds run independently.
func (h *Harness) dispatch() error {
	live, err := h.store.LiveTasks(h.ctx)
	if err != nil {
		return err
	}
	now := h.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	heads := laneHeads(live)
	busy := map[lane]bool{} // lanes with an invocation in flight
	for _, t := range live {
		if l, ok := laneOf(t); ok && h.busy[t.ID] {
			busy[l] = true
		}
	}
	for _, t := range live {
		if h.busy[t.ID] || !h.ready(t, now) {
			continue
		}
		if l, ok := laneOf(t); ok {
			if heads[l] != t.ID || busy[l] {
				continue
			}
			busy[l] = true
		}
		h.busy[t.ID] = true
		h.wg.Add(1)
		go h.invoke(t)
	}
	h.schedule(live, now)
	return nil
}

// schedule arms the timer for the earliest deadline and tells the host.
// Caller holds h.mu.
func (h *Harness) schedule(live []Task, now time.Time) {
	due := h.nextDue(live, now)
	if h.timer != nil {
		h.timer.Stop()
		h.timer = nil
	}
	if !due.IsZero() && due.After(now) {
		h.timer = time.AfterFunc(min(due.Sub(now), recheck), h.poke)
	}
	if !due.Equal(h.lastDue) {
		h.lastDue = due
		if h.opts.OnScheduled != nil {
			h.notifyDue = due
			select {
			case h.notifyCh <- struct{}{}:
			default: // the notifier will read notifyDue, the latest, anyway
			}
		}
	}
}

// nextDue is now when a task runs or may run now, else the earliest
// deadline of a task that will then run, else zero. A task queued behind
// the head of its lane is not due, whatever its state: it runs only once
// the head ends, and that commit runs the scheduler again. (Counting it as
// due now left no timer armed for a head sleeping before a retry: the
// conversation stalled until something else woke the scheduler.) Caller
// holds h.mu.
func (h *Harness) nextDue(live []Task, now time.Time) time.Time {
	var due time.Time
	heads := laneHeads(live)
	for _, t := range live {
		if l, ok := laneOf(t); ok && heads[l] != t.ID && !h.busy[t.ID] {
			continue
		}
		switch {
		case t.State == Pending || t.State == Running || h.busy[t.ID]:
			return now
		case (t.State == Sleeping || t.State == Waiting) && t.Deadline != nil:
			if due.IsZero() || t.Deadline.Before(due) {
				due = *t.Deadline
			}
		}
	}
	if !due.IsZero() && !due.After(now) {
		return now
	}
	return due
}

// NextDueAt is now when anything is ready or running, else the earliest
// stored deadline; zero when nothing waits on time. A task queued behind
// another of its conversation (see dispatch) counts only once that one ends.
func (h *Harness) NextDueAt(ctx context.Context) (time.Time, error) {
	live, err := h.store.LiveTasks(ctx)
	if err != nil {
		return time.Time{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nextDue(live, h.Now()), nil
}

// Busy reports whether any task invocation is in flight.
func (h *Harness) Busy() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.busy) > 0
}

// invoke runs t's steps until it sleeps, waits or ends.
func (h *Harness) invoke(t Task) {
	defer h.wg.Done()
	id := t.ID // t is reloaded below, and is zero if that fails
	// The invocation's own context: Stop ends it, so a model call or tool
	// in flight for a stopped run is abandoned rather than waited for.
	ctx, cancel := context.WithCancel(h.ctx)
	h.mu.Lock()
	h.cancels[id] = cancel
	h.mu.Unlock()
	defer func() {
		cancel()
		h.mu.Lock()
		delete(h.busy, id)
		delete(h.changed, id)
		delete(h.cancels, id)
		h.mu.Unlock()
		h.notify()
		h.poke()
	}()
	// Reload: the scheduler's snapshot may predate this task's last commit.
	// Under commitMu, so every outside change is either read here or marks
	// the task changed afterwards.
	h.commitMu.Lock()
	t, err := h.store.Task(h.ctx, id)
	h.mu.Lock()
	delete(h.changed, id)
	h.mu.Unlock()
	h.commitMu.Unlock()
	if err != nil {
		if h.ctx.Err() == nil {
			h.opts.Log.Warn("durable: read task before running it", "task", id, "err", err)
		}
		return // the deferred poke gives it back to the scheduler
	}
	if !h.ready(t, h.Now()) {
		return
	}
	kind, ok := h.kinds[t.Kind]
	if !ok {
		h.opts.Log.Error("durable: task of unknown kind stays pending", "task", t.ID, "kind", t.Kind)
		return
	}
	if t.State != Running {
		t.State = Running
		if err := h.commit(h.ctx, t.ID, Writes{Tasks: []Task{t}}); err != nil {
			return
		}
	}
	for t.State == Running && h.ctx.Err() == nil {
		next, err := h.step(ctx, kind, t)
		if err != nil {
			if h.ctx.Err() != nil {
				return // closing: the step's work is not committed and reruns on reopen
			}
			if ctx.Err() != nil {
				return // stopped (Stop): the task's end is committed already
			}
			if errors.Is(err, errChanged) {
				h.opts.Log.Info("durable: task changed from outside during its step; the step's work is dropped", "task", t.ID, "kind", t.Kind)
				return
			}
			if errors.Is(err, errStale) {
				h.opts.Log.Info("durable: a task the step updates changed since it was read; the step runs again", "task", t.ID, "kind", t.Kind)
				return // the deferred poke runs it again
			}
			h.opts.Log.Error("durable: step failed", "task", t.ID, "kind", t.Kind, "err", err)
			next = t.end(h.Now(), Faulted, err.Error())
			if cerr := h.commit(h.ctx, t.ID, Writes{Tasks: []Task{next}, Submissions: h.unanswered(t, "faulted")}); cerr != nil {
				return
			}
		}
		t = next
		h.notify()
	}
}

// step runs one step and commits its result. A panic or a step that made no
// durable progress is an error (the task ends faulted).
func (h *Harness) step(ctx context.Context, kind TaskKind, t Task) (next Task, err error) {
	before := t
	sc := &StepContext{h: h, task: &before}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("step panicked: %v", p)
		}
	}()
	res, err := kind.Step(ctx, sc, t)
	if err != nil {
		return t, err
	}
	cur := *sc.task
	if res.Task.State == cur.State && bytes.Equal(res.Task.Checkpoint, cur.Checkpoint) &&
		len(res.Entries) == 0 && len(res.Submissions) == 0 && len(res.NewTasks) == 0 && len(res.Updates) == 0 && equalDeadline(res.Task.Deadline, cur.Deadline) {
		return t, errors.New("step made no durable progress")
	}
	if res.Task.State == Terminal && res.Task.EndedAt == nil {
		now := h.Now()
		res.Task.EndedAt = &now
	}
	w := Writes{Tasks: append([]Task{res.Task}, res.NewTasks...), Entries: res.Entries, Submissions: res.Submissions, Usage: res.Usage}
	read := make([]Task, 0, len(res.Updates))
	for _, u := range res.Updates {
		w.Tasks = append(w.Tasks, u.Write)
		read = append(read, u.Read)
	}
	if err := h.commit(h.ctx, t.ID, w, read...); err != nil {
		return t, err
	}
	return res.Task, nil
}

func equalDeadline(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// end returns t terminal with outcome.
func (t Task) end(now time.Time, outcome, why string) Task {
	t.State, t.Outcome, t.Error, t.Deadline, t.EndedAt = Terminal, outcome, why, nil, &now
	return t
}

// unanswered returns t's submission marked unanswered, if it has one.
func (h *Harness) unanswered(t Task, reason string) []Submission {
	if t.SubmissionID == 0 {
		return nil
	}
	sub, err := h.store.Submission(h.ctx, t.SubmissionID)
	if err != nil || sub.Status == Done || sub.Status == Unanswered {
		return nil
	}
	sub.Status, sub.Reason = Unanswered, reason
	return []Submission{sub}
}

// Submit admits input into conversation conv and returns once it is
// durably stored. A requestId already seen in conv returns the existing
// submission and admits nothing.
func (h *Harness) Submit(ctx context.Context, conv int64, in Input) (Submission, error) {
	if h.Closed() {
		return Submission{}, h.closedErr()
	}
	if in.RequestID != "" {
		if sub, err := h.store.SubmissionByRequest(ctx, conv, in.RequestID); err == nil {
			return sub, nil
		} else if !errors.Is(err, ErrNotFound) {
			return Submission{}, err
		}
	}
	if _, err := h.store.Conversation(ctx, conv); err != nil {
		return Submission{}, fmt.Errorf("conversation %d: %w", conv, err)
	}
	sub, task, err := h.NewSubmission(conv, in)
	if err != nil {
		return Submission{}, err
	}
	if err := h.store.Commit(ctx, Writes{Submissions: []Submission{sub}, Tasks: []Task{task}}); err != nil {
		if in.RequestID != "" { // a concurrent Submit with the same requestId won
			if existing, e2 := h.store.SubmissionByRequest(ctx, conv, in.RequestID); e2 == nil {
				return existing, nil
			}
		}
		return Submission{}, fmt.Errorf("submit: %w", err)
	}
	h.poke()
	h.notify()
	return sub, nil
}

// NewSubmission returns a submission of in to conv and the generation task
// that answers it, for the caller to commit together (a scheduled job's run
// commits them with the job's next deadline). Submit does both.
func (h *Harness) NewSubmission(conv int64, in Input) (Submission, Task, error) {
	subID, err := h.store.MintID()
	if err != nil {
		return Submission{}, Task{}, err
	}
	taskID, err := h.store.MintID()
	if err != nil {
		return Submission{}, Task{}, err
	}
	now := h.Now()
	sub := Submission{ID: subID, ConversationID: conv, RequestID: in.RequestID, Status: Queued, Input: in, TaskID: taskID, CreatedAt: now}
	task := Task{ID: taskID, ConversationID: conv, Kind: KindGeneration, Version: 1, State: Pending,
		Checkpoint: mustRaw(genCheckpoint{Phase: phasePlace}), SubmissionID: subID, CreatedAt: now}
	return sub, task, nil
}

// AddTask stores a new task (for example a reminder) and schedules it.
func (h *Harness) AddTask(ctx context.Context, t Task, entries ...Entry) (Task, error) {
	id, err := h.store.MintID()
	if err != nil {
		return Task{}, err
	}
	t.ID, t.CreatedAt = id, h.Now()
	if t.Version == 0 {
		t.Version = 1
	}
	if err := h.store.Commit(ctx, Writes{Tasks: []Task{t}, Entries: entries}); err != nil {
		return Task{}, err
	}
	h.poke()
	return t, nil
}

// Commit writes w on behalf of a caller outside any task (a reset marker,
// a new conversation) and lets the scheduler see it. A task it writes whose
// invocation is in flight loses that invocation's uncommitted work (see
// Harness.commitMu), even work with effects outside the store: write
// running tasks only to end or hold them.
func (h *Harness) Commit(ctx context.Context, w Writes) error {
	if err := h.commit(ctx, 0, w); err != nil {
		return err
	}
	h.poke()
	h.notify()
	return nil
}

// Changed returns a channel closed at the next commit the harness makes or
// is asked to make (a step, a submission, Commit), or when it closes.
func (h *Harness) Changed() <-chan struct{} {
	c := h.watch()
	if h.Closed() {
		h.notify()
	}
	return c
}

// Wake makes the scheduler look at due work now (after an unpause).
func (h *Harness) Wake() { h.poke() }

// watch returns a channel closed at the next task progress.
func (h *Harness) watch() chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := make(chan struct{})
	h.watchers = append(h.watchers, c)
	return c
}

func (h *Harness) notify() {
	h.mu.Lock()
	ws := h.watchers
	h.watchers = nil
	h.mu.Unlock()
	for _, c := range ws {
		close(c)
	}
}

// WaitSubmission blocks until the submission is done or unanswered, or ctx ends.
func (h *Harness) WaitSubmission(ctx context.Context, id int64) (Submission, error) {
	return h.waitSubmission(ctx, id, false)
}

// WaitSettled is WaitSubmission that also returns when the submission's run
// waits for the owner (an approval): nothing more happens until they decide.
func (h *Harness) WaitSettled(ctx context.Context, id int64) (Submission, error) {
	return h.waitSubmission(ctx, id, true)
}

func (h *Harness) waitSubmission(ctx context.Context, id int64, orWaiting bool) (Submission, error) {
	for {
		c := h.watch()
		sub, err := h.store.Submission(ctx, id)
		if err != nil {
			return sub, err
		}
		if sub.Status == Done || sub.Status == Unanswered {
			return sub, nil
		}
		if orWaiting {
			if a, err := h.WaitingFor(ctx, sub); err != nil {
				return sub, err
			} else if a != nil {
				return sub, nil
			}
		}
		select {
		case <-ctx.Done():
			return sub, ctx.Err()
		case <-c:
		case <-h.ctx.Done():
			return sub, h.closedErr()
		}
	}
}

// WaitIdle blocks until no task is ready or running (sleeping tasks may remain).
func (h *Harness) WaitIdle(ctx context.Context) error {
	for {
		c := h.watch()
		due, err := h.NextDueAt(ctx)
		if err != nil {
			return err
		}
		if due.IsZero() || due.After(h.Now()) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TaskView is a live task as Inspect shows it.
type TaskView struct {
	Task
	Ready bool `json:"ready"`
}

// Inspection is what Inspect returns; it writes nothing.
type Inspection struct {
	Conversation Conversation `json:"conversation"`
	EntryCount   int64        `json:"entry_count"`
	Entries      Page[Entry]  `json:"entries"`
	Tasks        []TaskView   `json:"tasks"`
	Submissions  []Submission `json:"submissions"`
	Usage        Usage        `json:"usage"`
}

// Inspect returns one conversation's entries (a page), its live tasks,
// its open submissions and its usage.
func (h *Harness) Inspect(ctx context.Context, conv int64, sc Scan) (Inspection, error) {
	c, err := h.store.Conversation(ctx, conv)
	if err != nil {
		return Inspection{}, fmt.Errorf("conversation %d: %w", conv, err)
	}
	in := Inspection{Conversation: c, Tasks: []TaskView{}, Submissions: []Submission{}}
	if in.Entries, err = h.store.Entries(ctx, conv, sc); err != nil {
		return Inspection{}, err
	}
	if in.EntryCount, err = h.store.EntryCount(ctx, conv); err != nil {
		return Inspection{}, err
	}
	live, err := h.store.LiveTasks(ctx)
	if err != nil {
		return Inspection{}, err
	}
	now := h.Now()
	for _, t := range live {
		if t.ConversationID == conv {
			in.Tasks = append(in.Tasks, TaskView{Task: t, Ready: h.ready(t, now)})
		}
	}
	subs, err := h.store.Submissions(ctx, []SubmissionStatus{Queued, Placed}, Scan{Limit: 1000})
	if err != nil {
		return Inspection{}, err
	}
	for _, s := range subs.Items {
		if s.ConversationID == conv {
			in.Submissions = append(in.Submissions, s)
		}
	}
	sort.Slice(in.Submissions, func(i, j int) bool { return in.Submissions[i].ID < in.Submissions[j].ID })
	if in.Usage, err = h.store.Usage(ctx, conv); err != nil {
		return Inspection{}, err
	}
	return in, nil
}

func mustRaw(v any) json.RawMessage { return json.RawMessage(mustJSON(v)) }
