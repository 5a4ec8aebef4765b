package durable

import (
	"context"
	"errors"
	"fmt"
)

// ErrRootConversation is returned for a change the root conversation
// does not take (it holds the agent's own records).
var ErrRootConversation = errors.New("the root conversation holds the agent's records and stays")

// ErrLiveWork is returned by DeleteConversation for a conversation that
// still has work in flight (a run, a waiting approval, a reminder or job).
var ErrLiveWork = errors.New("the conversation has work in flight: stop its runs and cancel its reminders and jobs first")

// DeleteConversation removes a conversation and everything of it (its
// entries, tasks, submissions and usage) in one transaction, refused with
// ErrLiveWork while any of its tasks is not ended, so nothing that would
// run or wake is lost silently. ErrNotFound for no such conversation.
func (s *Store) DeleteConversation(ctx context.Context, id int64) error {
	if err := s.check(); err != nil {
		return err
	}
	if id == RootConversation {
		return ErrRootConversation
	}
	return s.db.Transaction(ctx, func(tx Executor) error {
		if _, err := tx.Get(ctx, `SELECT id FROM conversations WHERE id = ?`, id); errors.Is(err, ErrNoRows) {
			return fmt.Errorf("conversation %d: %w", id, ErrNotFound)
		} else if err != nil {
			return err
		}
		row, err := tx.Get(ctx, `SELECT count(*) AS n FROM tasks WHERE conversation_id = ? AND state <> 'terminal'`, id)
		if err != nil {
			return err
		}
		if row["n"].(int64) > 0 {
			return fmt.Errorf("conversation %d: %w", id, ErrLiveWork)
		}
		if q := forgetSearch.in(s.db); q != "" {
			if err := tx.Run(ctx, q, id); err != nil {
				return fmt.Errorf("delete conversation %d: its search index: %w", id, err)
			}
		}
		for _, table := range []string{"entries", "tasks", "submissions", "usage"} {
			if err := tx.Run(ctx, `DELETE FROM `+table+` WHERE conversation_id = ?`, id); err != nil {
				return fmt.Errorf("delete conversation %d: %s: %w", id, table, err)
			}
		}
		return tx.Run(ctx, `DELETE FROM conversations WHERE id = ?`, id)
	})
}
