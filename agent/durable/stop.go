package durable

import (
	"context"
	"errors"
	"fmt"
)

// ErrRunEnded is returned by Stop for a run that has already ended.
var ErrRunEnded = errors.New("the run has already ended")

// StoppedByOwner is why a run the owner stopped ended.
const StoppedByOwner = "stopped by the owner"

// Stop ends run id (a generation task) at the owner's word, durably: in one
// commit the task ends aborted, a "stopped" entry says so in its
// conversation, and its submission is answered as unanswered. A step in
// flight is abandoned: its context ends and whatever it would commit is
// dropped (the task changed from outside its invocation). A tool call
// already running is not undone; its result is not recorded, and the
// model sees it as unavailable, as after a crash. An approval the run
// waited on stops being pending with it. ErrNotFound when id is no run,
// ErrRunEnded when it has ended.
func (h *Harness) Stop(ctx context.Context, id int64) (Task, error) {
	if h.Closed() {
		return Task{}, h.closedErr()
	}
	h.commitMu.Lock()
	t, err := h.store.Task(ctx, id)
	switch {
	case err != nil:
	case t.Kind != KindGeneration:
		err = fmt.Errorf("run %d: %w", id, ErrNotFound)
	case t.State == Terminal:
		err = fmt.Errorf("run %d: %w", id, ErrRunEnded)
	}
	if err == nil {
		var entry int64
		if entry, err = h.store.MintID(); err == nil {
			now := h.Now()
			next := t.end(now, Aborted, StoppedByOwner)
			w := Writes{Tasks: []Task{next}, Submissions: h.unanswered(t, StoppedByOwner),
				Entries: []Entry{{ID: entry, ConversationID: t.ConversationID, Kind: StoppedEntry, Text: StoppedByOwner, At: now, RunID: t.ID}}}
			if err = h.commitLocked(ctx, 0, w); err == nil {
				t = next
			}
		}
	}
	h.commitMu.Unlock()
	if err != nil {
		return Task{}, err
	}
	h.mu.Lock()
	if cancel := h.cancels[id]; cancel != nil {
		cancel()
	}
	h.mu.Unlock()
	h.poke()
	h.notify()
	return t, nil
}
