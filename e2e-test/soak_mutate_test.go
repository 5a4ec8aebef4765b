//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The mutation check: with AFFIDO_SOAK_MUTATE=drop-reminder the soak
// deletes one pending reminder straight from an agent's store, behind the
// product's back (the agent is never told; nothing is cancelled), and the
// reminders invariant must then report exactly that one as lost, so the
// soak fails. ./verify.sh --soak runs it after the soak and counts it
// passed only when it is caught.

const mutateDropReminder = "drop-reminder"

// droppedReminder is the reminder the mutation deleted.
type droppedReminder struct {
	User string
	Task int64
	Text string
	Due  time.Time
}

// dropReminder tries every 5 s, from a third into the load until its end,
// to delete one of the workload's pending reminders that is due at least
// 20 s ahead; it returns the one it deleted, or nil.
func (s *soak) dropReminder(ctx context.Context) *droppedReminder {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(s.cfg.Load / 3):
	}
	for {
		for _, u := range s.users {
			if d, err := s.dropOne(u); err == nil && d != nil {
				return d
			} else if err != nil {
				s.logf("mutation: %s: %v", u.ID, err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
}

// dropOne deletes one of u's pending soak reminders from main's store
// (/data/session.db on the sandbox's session volume), with the probe
// running as the agent's uid beside the running agent.
func (s *soak) dropOne(u *soakUser) (*droppedReminder, error) {
	r, err := s.client.do(soakReq{user: u.ID, token: u.Token, method: "GET", path: "/u/" + u.ID + "/reminders"})
	if err != nil || r.Code != 200 {
		return nil, fmt.Errorf("GET /reminders: %d %v", r.Code, err)
	}
	var list struct {
		Reminders []struct {
			ID   int64     `json:"id"`
			Due  time.Time `json:"due"`
			Text string    `json:"text"`
		} `json:"reminders"`
	}
	if err := json.Unmarshal([]byte(r.Body), &list); err != nil {
		return nil, fmt.Errorf("GET /reminders: %v", err)
	}
	for _, p := range list.Reminders {
		if !strings.HasPrefix(p.Text, "soak-r-") || time.Until(p.Due) < 20*time.Second {
			continue
		}
		stmt := fmt.Sprintf("DELETE FROM tasks WHERE id = %d AND kind = 'reminder' AND state = 'sleeping'", p.ID)
		out, err := dockerTry("run", "--rm", "--network", "none", "--user", "10001:10001",
			"-v", stack+"-"+u.Sandbox+"-session:/data", "affido/probe:test", "-sql", "/data/session.db", stmt)
		if err != nil {
			return nil, fmt.Errorf("deleting reminder %d: %v %s", p.ID, err, strings.TrimSpace(out))
		}
		if lines := strings.Split(strings.TrimSpace(out), "\n"); lines[len(lines)-1] != "1" {
			continue // it fired or moved meanwhile: try another
		}
		return &droppedReminder{User: u.ID, Task: p.ID, Text: p.Text, Due: p.Due}, nil
	}
	return nil, nil
}
