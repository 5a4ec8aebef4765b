package durable

import (
	"bytes"
	"context"
	"errors"
	"fmt"
)

// errChanged refuses an invocation's commit after its task was changed from
// outside the invocation (see Harness.commitMu); nothing is written.
var errChanged = errors.New("the task was changed from outside while its step ran")

// errStale refuses a commit that would update a task no longer stored as
// it was read (see TaskUpdate); nothing is written.
var errStale = errors.New("a task to update changed since it was read")

// commit writes w for the invocation of task self (0: from outside any
// invocation). An invocation whose task was changed from outside since it
// began gets errChanged and writes nothing; so does a commit with a task in
// read that is no longer stored as it is there, with errStale. Every other
// task w writes whose invocation is in flight is marked changed.
func (h *Harness) commit(ctx context.Context, self int64, w Writes, read ...Task) error {
	h.commitMu.Lock()
	defer h.commitMu.Unlock()
	return h.commitLocked(ctx, self, w, read...)
}

// commitLocked is commit for a caller that holds h.commitMu.
func (h *Harness) commitLocked(ctx context.Context, self int64, w Writes, read ...Task) error {
	if self != 0 {
		h.mu.Lock()
		changed := h.changed[self]
		h.mu.Unlock()
		if changed {
			return errChanged
		}
	}
	for _, r := range read {
		stored, err := h.store.Task(ctx, r.ID)
		if errors.Is(err, ErrNotFound) || (err == nil && !sameTask(stored, r)) {
			return fmt.Errorf("task %d: %w", r.ID, errStale)
		} else if err != nil {
			return err
		}
	}
	if err := h.store.Commit(ctx, w); err != nil {
		return err
	}
	h.mu.Lock()
	for _, t := range w.Tasks {
		if t.ID != self && h.busy[t.ID] {
			h.changed[t.ID] = true
		}
	}
	h.mu.Unlock()
	return nil
}

// Update changes task id from outside its invocation (the owner pauses or
// cancels a job): change gets the task as last committed and returns it
// changed, or nil to write nothing. No step's commit comes between the read
// and the write, and if the task's invocation is in flight, its work not
// yet committed is dropped, so the change stands. It returns the task as
// stored afterwards; ErrNotFound when there is no such task, or change's
// error. change runs while every commit of the harness waits: it must not
// call the harness.
func (h *Harness) Update(ctx context.Context, id int64, change func(Task) (*Task, error)) (Task, error) {
	if h.Closed() {
		return Task{}, h.closedErr()
	}
	h.commitMu.Lock()
	t, err := h.store.Task(ctx, id)
	if err == nil {
		var next *Task
		if next, err = change(t); err == nil && next != nil {
			if err = h.commitLocked(ctx, 0, Writes{Tasks: []Task{*next}}); err == nil {
				t = *next
			}
		}
	}
	h.commitMu.Unlock()
	if err != nil {
		return Task{}, err
	}
	h.poke()
	h.notify()
	return t, nil
}

// sameTask reports whether a and b hold the same state, deadline and
// checkpoint: nothing was written to the task between two reads.
func sameTask(a, b Task) bool {
	return a.State == b.State && equalDeadline(a.Deadline, b.Deadline) && bytes.Equal(a.Checkpoint, b.Checkpoint) &&
		a.Outcome == b.Outcome
}
