//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The e2e stack pauses after 3 s idle, stops after 8 s and removes the
// container after 13 s (run.sh), so a reminder due 6 s, 14 s and 20 s
// ahead fires while the sandbox is paused, stopped and removed. The gap
// between a tier and the due time must exceed that tier's wake lead (at
// least 3 s for stopped and removed, lifecycle/wake.go): nearer, the
// manager keeps the sandbox in the tier above, to be woken in time.

func sinkName() string { return stack + "-sink" }

// signalAgent sends sig to the agent process of container name from the
// host, as root can, so that Docker's state stays the manager's: Docker's own
// kill API unpauses a paused container for any signal but the stop signal
// and marks it to exit on its next stop. A container whose process is gone
// gets nothing. Without root it falls back to docker kill, and says so.
func signalAgent(t *testing.T, name string, sig syscall.Signal) {
	t.Helper()
	var pid int
	if _, err := fmt.Sscan(strings.TrimSpace(docker(t, "inspect", "-f", "{{.State.Pid}}", name)), &pid); err != nil || pid <= 0 {
		t.Logf("%s: no process to send %v", name, sig)
		return
	}
	switch err := syscall.Kill(pid, sig); {
	case err == nil, err == syscall.ESRCH:
	case err == syscall.EPERM:
		t.Logf("not root: sending %v through docker kill, which also unpauses the container", sig)
		docker(t, "kill", "-s", fmt.Sprint(int(sig)), name)
	default:
		t.Fatalf("signal %v to %s (pid %d): %v", sig, name, pid, err)
	}
}

// sinkMu keeps parallel tests from starting the one sink twice (the second
// would remove the first's container and its log).
var sinkMu sync.Mutex

func startSink(t *testing.T) {
	t.Helper()
	sinkMu.Lock()
	defer sinkMu.Unlock()
	if out, _ := dockerTry("inspect", "-f", "{{.State.Running}}", sinkName()); strings.TrimSpace(out) == "true" {
		return
	}
	dockerTry("rm", "-f", sinkName())
	docker(t, "run", "-d", "--name", sinkName(), "--label", "affido.stack="+stack, "--network", stack+"_control",
		"--ip", env("AFFIDO_E2E_SINK_IP", "10.212.1.50"), "affido/probe:test", "-sink", ":9999", "-mcp", ":9998")
}

type delivery struct {
	At   time.Time `json:"at"`
	Path string    `json:"path"`
	Key  string    `json:"key"`
	Due  string    `json:"due"`
	Body string    `json:"body"`
}

func deliveries(t *testing.T, path string) []delivery {
	t.Helper()
	var out []delivery
	sc := bufio.NewScanner(strings.NewReader(docker(t, "logs", sinkName())))
	for sc.Scan() {
		var d delivery
		if json.Unmarshal(sc.Bytes(), &d) == nil && d.Path == path {
			out = append(out, d)
		}
	}
	return out
}

func reminderUser(t *testing.T, prefix, sinkPath string) (string, string) {
	user, tok := newUser(t, prefix)
	docker(t, "exec", managerName(), "/bin/affido", "admin", "notify", user, "http://"+sinkName()+":9999"+sinkPath)
	return user, tok
}

// setReminder asks for a reminder in d and returns its due time.
func setReminder(t *testing.T, user, tok string, d time.Duration, text string) time.Time {
	t.Helper()
	grant(t, user, tok, "set_reminder")
	r := prompt(t, user, tok, map[string]any{"text": fmt.Sprintf("remind in %s: %s", d, text)})
	i := strings.Index(r.Reply, "Reminder set for ")
	if i < 0 {
		t.Fatalf("set_reminder: %+v", r)
	}
	rest := r.Reply[i+len("Reminder set for "):]
	if len(rest) < 20 {
		t.Fatalf("set_reminder reply %q", r.Reply)
	}
	due, err := time.Parse(time.RFC3339, rest[:20])
	if err != nil {
		t.Fatalf("due time in %q: %v", r.Reply, err)
	}
	return due
}

func waitDelivery(t *testing.T, path string, within time.Duration) delivery {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if ds := deliveries(t, path); len(ds) > 0 {
			return ds[0]
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no notification at %s within %v", path, within)
	return delivery{}
}

// checkDelivered waits for the reminder due at due to reach the sink at
// path (at most within past its time) and checks it came after its time and
// within 10 s of it. How late is the bench's business; here: not early, and
// fired by its own stored time (well before anyone's next request would have).
func checkDelivered(t *testing.T, path, what string, due time.Time, within time.Duration) delivery {
	t.Helper()
	d := waitDelivery(t, path, time.Until(due)+within)
	dueExact, _ := time.Parse(time.RFC3339Nano, d.Due)
	late := d.At.Sub(dueExact)
	t.Logf("reminder %s: delivered %v after its time", what, late.Round(time.Millisecond))
	if late < 0 || late > 10*time.Second {
		t.Errorf("reminder %s: delivered %v after its time, want after it and within 10 s", what, late)
	}
	return d
}

func checkReminder(t *testing.T, user, tok, path, state string, ahead time.Duration) {
	due := setReminder(t, user, tok, ahead, "stretch "+user)
	want := map[string]string{"paused": "paused", "stopped": "exited", "removed": "missing"}[state]
	waitStatus(t, user, want, ahead)
	d := checkDelivered(t, path, "while "+state, due, 15*time.Second)
	if !strings.Contains(d.Body, "stretch "+user) {
		t.Errorf("notification body %q", d.Body)
	}
	// The reminder entry is in the conversation.
	found := false
	for _, e := range inspectOf(t, user, tok).Entries.Items {
		found = found || (e.Kind == "reminder" && strings.Contains(e.Text, "stretch "+user))
	}
	if !found {
		t.Error("no reminder entry in the conversation")
	}
	waitNotificationsSettled(t, user, "delivered 1")
	if n := len(deliveries(t, path)); n != 1 {
		t.Errorf("reminder delivered %d times", n)
	}
}

// waitNotificationsSettled waits until none of user's notifications is
// pending and their states read want ("status tries", one line each, in id
// order): from then on the manager sends nothing more for them, so a count
// of deliveries taken afterwards is final.
func waitNotificationsSettled(t *testing.T, user, want string) {
	t.Helper()
	var got string
	waitUntil(t, 60*time.Second, "notifications of "+user+" settled as "+want, func() bool {
		got = psql(t, "SELECT status || ' ' || tries FROM notifications WHERE user_id = '"+user+"' ORDER BY id")
		return got == want
	})
}

// killManager SIGKILLs the manager and waits until Docker reports it gone,
// so a following `docker start` really starts it again.
func killManager(t *testing.T) {
	t.Helper()
	docker(t, "kill", "-s", "KILL", managerName())
	waitUntil(t, 30*time.Second, "the manager is dead", func() bool {
		out, _ := dockerTry("inspect", "-f", "{{.State.Running}}", managerName())
		return strings.TrimSpace(out) == "false"
	})
}

func TestRemindersFireInSleepingSandboxes(t *testing.T) {
	startSink(t)
	for _, tc := range []struct {
		state string
		ahead time.Duration
	}{
		// Each is due well past the tier that takes the sandbox down
		// (the e2e stack's tiers: stop at 8 s, remove at 13 s idle) plus
		// that tier's wake lead: no tier takes a sandbox down within its
		// lead of a due time, and the lead grows with the slowest recent
		// resume (several seconds on a busy machine).
		{"paused", 6 * time.Second}, {"stopped", 20 * time.Second}, {"removed", 30 * time.Second},
	} {
		t.Run(tc.state, func(t *testing.T) {
			t.Parallel()
			user, tok := reminderUser(t, "rem-"+tc.state, "/"+tc.state)
			checkReminder(t, user, tok, "/"+tc.state, tc.state, tc.ahead)
		})
	}
}

func TestReminderSurvivesManagerRestart(t *testing.T) {
	startSink(t)
	user, tok := reminderUser(t, "rem-restart", "/restart")
	due := setReminder(t, user, tok, 7*time.Second, "after restart")
	waitStatus(t, user, "paused", 7*time.Second)
	killManager(t)
	docker(t, "start", managerName())
	waitManagerHealthy(t)
	d := waitDelivery(t, "/restart", time.Until(due)+15*time.Second)
	dueExact, _ := time.Parse(time.RFC3339Nano, d.Due)
	if late := d.At.Sub(dueExact); late < 0 || late > 10*time.Second {
		t.Errorf("after a manager restart the reminder came %v after its time", late)
	}
	waitNotificationsSettled(t, user, "delivered 1")
	if n := len(deliveries(t, "/restart")); n != 1 {
		t.Errorf("delivered %d times", n)
	}
}

func TestReminderFailingNotificationEndpoint(t *testing.T) {
	t.Parallel()
	startSink(t)
	user, tok := reminderUser(t, "rem-fail", "/fail")
	setReminder(t, user, tok, time.Second, "will not arrive")
	waitUntil(t, 40*time.Second, "five recorded tries", func() bool {
		out := docker(t, "exec", oltpName(), "psql", "-U", "affido", "-d", "affido", "-tAc",
			"SELECT n.status || ' ' || count(a.*) FROM notifications n JOIN notification_attempts a ON a.notification_id = n.id WHERE n.user_id = '"+user+"' GROUP BY n.status")
		return strings.TrimSpace(out) == "failed 5"
	})
	if n := len(deliveries(t, "/fail")); n != 5 {
		t.Errorf("the sink saw %d tries, want 5", n)
	}
	found := false
	for _, e := range inspectOf(t, user, tok).Entries.Items {
		found = found || e.Kind == "reminder"
	}
	if !found {
		t.Error("the reminder entry is missing after failed delivery")
	}
}

func TestReminderToolBadInput(t *testing.T) {
	t.Parallel()
	user, tok := newUser(t, "rem-bad")
	grant(t, user, tok, "set_reminder")
	r := prompt(t, user, tok, map[string]any{"text": "remind at tomorrow-ish: x"})
	if !strings.Contains(r.Reply, "RFC 3339") {
		t.Fatalf("malformed time: %q", r.Reply)
	}
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	r = prompt(t, user, tok, map[string]any{"text": "remind at " + past + ": already late"})
	if !strings.Contains(r.Reply, "in the past, so the reminder fires now") {
		t.Fatalf("past time: %q", r.Reply)
	}
	waitUntil(t, 10*time.Second, "the past reminder fires at once", func() bool {
		for _, e := range inspectOf(t, user, tok).Entries.Items {
			if e.Kind == "reminder" {
				return true
			}
		}
		return false
	})
}

func TestPauseIfIdleRefusesWhileBusy(t *testing.T) {
	user, tok := newUser(t, "busy")
	mustGet(t, user, tok, "/health")
	// The submitted run is ready from the moment the 202 comes back.
	grant(t, user, tok, "shell")
	run := prompt(t, user, tok, map[string]any{"text": "run: sleep 2", "wait": false})
	if r := post(t, user, tok, "/pause?if_idle=1", ""); r.Code != 409 {
		t.Fatalf("pause during a running prompt: %d %s", r.Code, r.Body)
	}
	// Another request in flight: a slow upload.
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		req, _ := http.NewRequest("PUT", baseURL+"/u/"+user+"/uploads/slow.bin", pr)
		req.Header.Set("Authorization", "Bearer "+tok)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
		close(done)
	}()
	pw.Write([]byte(strings.Repeat("a", 1024)))
	waitRunDone(t, user, tok, run.RunID)
	// The upload handler has opened its temporary file: it is in flight.
	waitUntil(t, 30*time.Second, "the upload is inside the agent", func() bool {
		r := request(t, "GET", "/u/"+user+"/files?path=uploads", bearer(tok))
		return r.Code == 200 && strings.Contains(r.Body, ".slow.bin.tmp")
	})
	if r := post(t, user, tok, "/pause?if_idle=1", ""); r.Code != 409 {
		t.Fatalf("pause during an upload: %d %s", r.Code, r.Body)
	}
	pw.Close()
	<-done
	if r := post(t, user, tok, "/pause?if_idle=1", ""); r.Code != 200 {
		t.Fatalf("idle pause: %d %s", r.Code, r.Body)
	}
}

// A run waiting to retry the model (stored backoff 2, 4, 8 s) survives its
// sandbox being paused: the manager wakes it at the retry's deadline.
func TestRetryBackoffSurvivesPause(t *testing.T) {
	user, tok := newUser(t, "retry")
	run := prompt(t, user, tok, map[string]any{"text": "flaky 3: survive the pause", "wait": false})
	waitStatus(t, user, "paused", 15*time.Second)
	waitUntil(t, 40*time.Second, "woken by the manager at a retry deadline", func() bool {
		out := docker(t, "exec", oltpName(), "psql", "-U", "affido", "-d", "affido", "-tAc",
			"SELECT count(*) FROM audit_events WHERE user_id = '"+user+"' AND kind = 'sandbox.woken'")
		return strings.TrimSpace(out) != "0"
	})
	es := waitRunDone(t, user, tok, run.RunID)
	var reply string
	for _, e := range es {
		if e.Kind == "assistant_message" {
			reply = e.Text
		}
	}
	if reply != "echo: flaky 3: survive the pause" {
		t.Fatalf("run after retries across a pause: %+v", es)
	}
}

// An agent that hangs when the manager asks it to pause is paused anyway,
// with the wake time the agent reported when the reminder was set, and is
// woken at that time: the reminder still arrives.
func TestHungAgentIsWokenAtItsReportedTime(t *testing.T) {
	startSink(t)
	user, tok := newUser(t, "rem-hung")
	path := "/hung/" + user // its own: the sink keeps every earlier run's deliveries
	docker(t, "exec", managerName(), "/bin/affido", "admin", "notify", user, "http://"+sinkName()+":9999"+path)
	due := setReminder(t, user, tok, 10*time.Second, "while hung")
	name := stack + "-" + user + "-agent"
	waitUntil(t, 20*time.Second, "the agent reported its wake time", func() bool {
		return psql(t, "SELECT reported_wake_at IS NOT NULL FROM sandboxes WHERE user_id = '"+user+"'") == "t"
	})
	// The pause to look at is the first after the agent hangs: once the
	// reminder has fired the idle tier pauses the sandbox again, with
	// nothing left to wake it for.
	before := psql(t, "SELECT coalesce(max(id), 0) FROM audit_events")
	pausedAfter := "FROM audit_events WHERE user_id = '" + user + "' AND kind = 'sandbox.paused' AND id > " + before
	signalAgent(t, name, syscall.SIGSTOP) // the agent cannot answer /pause now
	waitUntil(t, 20*time.Second, "the manager paused the hung agent", func() bool {
		return psql(t, "SELECT count(*) "+pausedAfter) != "0"
	})
	// Pending while the container is frozen: the agent runs again once the
	// manager thaws it to wake it. The manager wakes an agent that did not
	// answer its pause early, and replaces its container if it still does
	// not answer; either way the reminder comes on time.
	signalAgent(t, name, syscall.SIGCONT)
	d := waitDelivery(t, path, time.Until(due)+20*time.Second)
	dueExact, _ := time.Parse(time.RFC3339Nano, d.Due)
	late := d.At.Sub(dueExact)
	t.Logf("reminder of a hung agent: delivered %v after its time", late.Round(time.Millisecond))
	if late < 0 || late > 10*time.Second {
		t.Errorf("delivered %v after its time", late)
	}
	if ev := psql(t, "SELECT coalesce(detail->>'wake_at', '') "+pausedAfter+" ORDER BY id LIMIT 1"); ev == "" {
		t.Errorf("the pause of the hung agent stored no wake time")
	}
}
