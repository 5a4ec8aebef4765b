//go:build e2e

package e2e

import (
	"strings"
	"testing"
	"time"
)

// evictedWake is the wake time the manager stored when it evicted user's
// sandbox (its audit event), the zero time if it stored none.
func evictedWake(t *testing.T, user string) time.Time {
	t.Helper()
	s := psql(t, "SELECT coalesce(detail->>'wake_at', '') FROM audit_events WHERE user_id = '"+user+"' AND kind = 'sandbox.evicted' ORDER BY id DESC LIMIT 1")
	if s == "" {
		return time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("evicted wake_at %q: %v", s, err)
	}
	return at
}

// checkEvictedWake fails unless the manager stored the agent's next due time
// (due, to the second as the reply gives it) when it evicted user's sandbox.
func checkEvictedWake(t *testing.T, user string, due time.Time, what string) {
	t.Helper()
	got := evictedWake(t, user)
	if got.IsZero() {
		t.Fatalf("%s: the evict stored no wake time (the reminder would wait for its owner's next request)", what)
	}
	if d := got.Sub(due); d < -time.Second || d > time.Second {
		t.Fatalf("%s: the evict stored wake %v, the reminder is due %v", what, got, due)
	}
}

// Every operation that takes a container away stores the agent's next due
// time first. Tried: `affido admin evict` of a running sandbox with a
// reminder due in 20 s, and with a job due in 30 s; `./dev.sh reload` (which
// evicts every sandbox onto the new image) with a reminder pending. Before,
// the evict stored nothing and the reminder had not fired 16 minutes later.
// The idle tiers are set long here so that the evict, not a tier, is what
// takes each container away.
func TestRemindersAndJobsSurviveEvictAndReload(t *testing.T) {
	startSink(t)
	long := []string{"AFFIDO_IDLE_PAUSE=10m", "AFFIDO_IDLE_STOP=20m", "AFFIDO_IDLE_REMOVE=30m"}
	devshEnv(t, long, "up")
	defer devsh(t, "up") // back to run.sh's short tiers

	// The reload goes first, and its reminder is checked after the two
	// evicts: they run while it waits for its time.
	var reloaded string
	var reloadDue time.Time
	t.Run("dev.sh reload stores the wake", func(t *testing.T) {
		user, tok := reminderUser(t, "ev-reload", "/reloaded")
		// Far enough ahead for a reload on a busy 2-core machine (it rebuilds
		// what changed and restarts the control plane).
		due := setReminder(t, user, tok, 150*time.Second, "after reload "+user)
		devshEnv(t, long, "reload")
		if time.Now().After(due) {
			t.Fatalf("the reload took past the reminder's time (%v); the test needs a later one", due)
		}
		checkEvictedWake(t, user, due, "./dev.sh reload")
		reloaded, reloadDue = user, due
	})

	t.Run("reminder after admin evict", func(t *testing.T) {
		user, tok := reminderUser(t, "ev-rem", "/evicted")
		due := setReminder(t, user, tok, 20*time.Second, "after evict "+user)
		if out := admin(t, "evict", user); !strings.Contains(out, "evicted") {
			t.Fatalf("admin evict: %s", out)
		}
		if w := evictedWake(t, user); !w.IsZero() && w.Before(due.Add(-time.Second)) {
			// The agent was still busy with the prompt (or silent): the evict
			// stored "now", and the manager brings it back at once.
			t.Logf("the agent was busy at the evict: stored wake %v, brought back at once", w)
		} else {
			checkEvictedWake(t, user, due, "admin evict")
			if s := containerStatus(user); s != "missing" {
				t.Fatalf("after the evict the container is %s", s)
			}
		}
		checkDelivered(t, "/evicted", "after admin evict", due, 20*time.Second)
		waitNotificationsSettled(t, user, "delivered 1")
	})

	t.Run("job after admin evict", func(t *testing.T) {
		user, tok := newUser(t, "ev-job")
		since := time.Now()
		_, conv := newJob(t, user, tok, "@every 30s")
		admin(t, "evict", user)
		if evictedWake(t, user).IsZero() {
			t.Fatal("the evict stored no wake time for the job")
		}
		checkLate(t, "after admin evict", waitJobRun(t, user, tok, conv, since))
	})

	t.Run("reminder after dev.sh reload", func(t *testing.T) {
		if reloaded == "" {
			t.Fatal("the reload case failed before its reminder was stored")
		}
		checkDelivered(t, "/reloaded", "after ./dev.sh reload", reloadDue, 20*time.Second)
		waitNotificationsSettled(t, reloaded, "delivered 1")
		if n := len(deliveries(t, "/reloaded")); n != 1 {
			t.Errorf("delivered %d times", n)
		}
	})

	t.Run("reminder after the capacity rule takes its slot", func(t *testing.T) {
		devshEnv(t, append(long, "AFFIDO_MAX_RUNNING=1"), "up")
		user, tok := reminderUser(t, "ev-cap", "/capacity")
		due := setReminder(t, user, tok, 25*time.Second, "after capacity "+user)
		other, otherTok := newUser(t, "ev-cap-other")
		// The only slot is user's: the other's first request takes it.
		waitUntil(t, 20*time.Second, "the other user's sandbox up", func() bool {
			return request(t, "GET", "/u/"+other+"/health", bearer(otherTok)).Code == 200
		})
		if s := containerStatus(user); s != "paused" {
			t.Fatalf("the capacity rule left %s's container %s", user, s)
		}
		at := psql(t, "SELECT coalesce(detail->>'wake_at', '') FROM audit_events WHERE user_id = '"+user+"' AND kind = 'sandbox.paused' ORDER BY id DESC LIMIT 1")
		stored, err := time.Parse(time.RFC3339Nano, at)
		if err != nil || stored.Sub(due) < -time.Second || stored.Sub(due) > time.Second {
			t.Fatalf("the capacity pause stored wake %q, the reminder is due %v", at, due)
		}
		checkDelivered(t, "/capacity", "after the capacity rule", due, 20*time.Second)
		waitNotificationsSettled(t, user, "delivered 1")
	})
}
