//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSoak is the chaos soak (issue 29): a mixed workload for several
// users through Caddy (soak_workload_test.go) while a fault driver kills,
// restarts, pauses, stops and removes things at random moments and fills a
// disk and the CPUs (soak_faults_test.go); then, from the stores
// themselves, the invariants (soak_check_test.go): every accepted prompt
// answered exactly once, every reminder fired, every job time run once, no
// approval lost or decided twice, no message delivered twice, uploads read
// back, the event streams complete, the spend ledger equal to the calls
// made, no orphan container, network or volume, every request answered.
// It prints the faults injected and each invariant's counts (lines
// starting "soak:", also in .build/soak/report.txt).
//
// It runs only when AFFIDO_SOAK_MINUTES is set: ./verify.sh --soak [MINUTES]
// (or AFFIDO_SOAK_MINUTES=10 e2e-test/run.sh '^TestSoak$'). The choices are
// drawn from a seeded RNG, printed; AFFIDO_SOAK_SEED replays them (the
// timing of a real stack is not replayed). AFFIDO_SOAK_USERS sets the
// number of users (4); AFFIDO_SOAK_MUTATE=drop-reminder is the mutation
// check (soak_mutate_test.go).
func TestSoak(t *testing.T) {
	cfg, ok := soakConfigFromEnv(t)
	if !ok {
		t.Skip("AFFIDO_SOAK_MINUTES is not set: the soak runs with ./verify.sh --soak [MINUTES]")
	}
	s := &soak{t: t, cfg: cfg, client: newSoakClient(), faults: &faultLog{}}
	s.say("seed %d (AFFIDO_SOAK_SEED=%d replays the choices), %d users, %v of load, mutation: %s",
		cfg.Seed, cfg.Seed, cfg.Users, cfg.Load, or(cfg.Mutate, "none"))
	startSink(t)
	for i := range cfg.Users {
		s.users = append(s.users, s.setupUser(t, i))
	}
	t.Cleanup(s.writeReport)

	s.run()
	s.heal(t)
	s.settle()
	checks := s.check()

	s.reportFaults()
	failed := 0
	for _, iv := range checks.invariants {
		s.reportInvariant(iv)
		failed += len(iv.Violations)
	}
	if cfg.Mutate == mutateDropReminder {
		s.reportMutation(checks.lost)
	}
	s.say("%d violations", failed)
	if failed > 0 {
		t.Errorf("the soak found %d violations (the lines starting \"soak:\" above)", failed)
	}
}

// soakConfig is the soak's settings, from the environment.
type soakConfig struct {
	Load   time.Duration
	Seed   uint64
	Users  int
	Mutate string
}

func soakConfigFromEnv(t *testing.T) (soakConfig, bool) {
	v := os.Getenv("AFFIDO_SOAK_MINUTES")
	if v == "" {
		return soakConfig{}, false
	}
	minutes, err := strconv.ParseFloat(v, 64)
	if err != nil || minutes <= 0 {
		t.Fatalf("AFFIDO_SOAK_MINUTES=%q: want a number of minutes", v)
	}
	cfg := soakConfig{Load: time.Duration(minutes * float64(time.Minute)), Users: 4, Mutate: os.Getenv("AFFIDO_SOAK_MUTATE")}
	if v := os.Getenv("AFFIDO_SOAK_USERS"); v != "" {
		if cfg.Users, err = strconv.Atoi(v); err != nil || cfg.Users < 1 {
			t.Fatalf("AFFIDO_SOAK_USERS=%q: want a number of users", v)
		}
	}
	cfg.Seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("AFFIDO_SOAK_SEED"); v != "" {
		if cfg.Seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("AFFIDO_SOAK_SEED=%q: want a number", v)
		}
	}
	if cfg.Mutate != "" && cfg.Mutate != mutateDropReminder {
		t.Fatalf("AFFIDO_SOAK_MUTATE=%q: the one mutation is %s", cfg.Mutate, mutateDropReminder)
	}
	return cfg, true
}

// soak is one run.
type soak struct {
	t       *testing.T
	cfg     soakConfig
	client  *soakClient
	faults  *faultLog
	users   []*soakUser
	start   time.Time // the load's start
	loadEnd time.Time
	dropped *droppedReminder // the mutation's

	mu     sync.Mutex
	report []string
}

// say prints one line of the report ("soak: …") and keeps it for the file.
func (s *soak) say(format string, args ...any) {
	line := "soak: " + fmt.Sprintf(format, args...)
	fmt.Println(line)
	s.mu.Lock()
	s.report = append(s.report, line)
	s.mu.Unlock()
}

// logf is progress, in the test's log.
func (s *soak) logf(format string, args ...any) { s.t.Logf(format, args...) }

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// writeReport keeps the report in .build/soak/report.txt.
func (s *soak) writeReport() {
	dir := filepath.Join("..", ".build", "soak")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = os.WriteFile(filepath.Join(dir, "report.txt"), []byte(strings.Join(s.report, "\n")+"\n"), 0o644)
}

// setupUser makes user i: a notification URL at the sink, limits that the
// load cannot reach, the agents ann, bob and appr, the rules the workload
// needs (set_reminder for main, send_message for ann), and a job that runs
// every minute in a conversation of its own. No fault runs yet.
func (s *soak) setupUser(t *testing.T, i int) *soakUser {
	id, tok := newUser(t, "soak")
	u := &soakUser{ID: id, Token: tok,
		rng:       rand.New(rand.NewPCG(s.cfg.Seed, uint64(i)+1)),
		streamRng: rand.New(rand.NewPCG(s.cfg.Seed, uint64(i)+1001))}
	docker(t, "exec", managerName(), "/bin/affido", "admin", "notify", id, "http://"+sinkName()+":9999/soak/"+id)
	docker(t, "exec", managerName(), "/bin/affido", "admin", "spend", id, "--daily", "1000", "--monthly", "10000")
	mustGet(t, id, tok, "/health")
	u.Sandbox = sandboxName(t, id)
	grant(t, id, tok, "set_reminder")
	mustPost(t, id, tok, "/agents", `{"name":"bob"}`, 201)
	mustPost(t, id, tok, "/agents", `{"name":"ann","may_message":["bob"]}`, 201)
	mustPost(t, id, tok, "/agents", `{"name":"appr"}`, 201)
	grant(t, id+"/agents/ann", tok, "send_message")
	u.MainConv = conversationOf(t, id, tok)
	u.ApprConv = conversationOf(t, id+"/agents/appr", tok)
	j := mustPost(t, id, tok, "/jobs", `{"cron":"* * * * *","name":"soak tick","prompt":"soak tick `+id+`"}`, 201)
	u.JobID, u.JobConv = int64(j["id"].(float64)), int64(j["conversation_id"].(float64))
	next, err := time.Parse(time.RFC3339Nano, fmt.Sprint(j["next"]))
	if err != nil {
		t.Fatalf("the job's next time %v: %v", j["next"], err)
	}
	u.JobFirst = next
	return u
}

// conversationOf is the current conversation of the agent at path.
func conversationOf(t *testing.T, path, tok string) int64 {
	t.Helper()
	var c struct {
		ID int64 `json:"conversation_id"`
	}
	r := mustGet(t, path, tok, "/session")
	if err := json.Unmarshal([]byte(r.Body), &c); err != nil || c.ID == 0 {
		t.Fatalf("GET /u/%s/session: %v %s", path, err, r.Body)
	}
	return c.ID
}

// run is the load: every user's workload and event stream, the fault
// driver and, in the mutation run, the reminder drop, until the load's
// time is up; then it waits for the operations in progress and undoes the
// background faults.
func (s *soak) run() {
	s.start = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Load)
	defer cancel()
	drv := newFaultDriver(s)
	var wg sync.WaitGroup
	for _, u := range s.users {
		wg.Go(func() { s.workload(ctx, u) })
		wg.Go(func() { s.follow(ctx, u) })
	}
	wg.Go(func() { drv.run(ctx) })
	if s.cfg.Mutate == mutateDropReminder {
		wg.Go(func() {
			if d := s.dropReminder(ctx); d != nil {
				s.dropped = d
				s.logf("mutation: dropped reminder %q (task %d of %s, due %s) from the store", d.Text, d.Task, d.User, d.Due.Format(time.TimeOnly))
			}
		})
	}
	wg.Wait()
	drv.wait()
	s.loadEnd = time.Now()
}

// heal makes sure the control plane is whole after the faults (each fault
// undoes itself; this is for one that could not) and decides the
// approvals the workload left undecided.
func (s *soak) heal(t *testing.T) {
	for _, name := range []string{oltpName(), caddyName()} {
		if containerState(name) != "running" {
			dockerTry("start", name)
		}
	}
	if !waitManager(2 * time.Minute) {
		s.reportFaults()
		t.Fatal("the manager is not healthy two minutes after the load")
	}
	if !waitCaddy(time.Minute) {
		s.reportFaults()
		t.Fatal("Caddy does not answer a minute after the load")
	}
	for _, u := range s.users {
		s.decideLeftovers(u)
	}
}

// settle waits until every reminder set during the load is due, with time
// to fire and be delivered.
func (s *soak) settle() {
	until := s.loadEnd.Add(soakReminderMax + 30*time.Second)
	s.logf("settling until %s (reminders set during the load are due by then)", until.Format(time.TimeOnly))
	time.Sleep(time.Until(until)) // the reminders' due times, not a wait for a condition
}

// soakChecks is the invariants' outcome.
type soakChecks struct {
	invariants []invariant
	lost       []string // reminders lost
}

// soakSettleTime bounds how long the checks wait for work still in flight.
const soakSettleTime = 4 * time.Minute

// check reads the stores and checks every invariant, again every 10 s
// while anything is still in flight, for at most soakSettleTime; what is
// still pending then is a violation.
func (s *soak) check() soakChecks {
	deadline := time.Now().Add(soakSettleTime)
	for {
		c, pending := s.checkOnce()
		if len(pending) == 0 {
			return c
		}
		if time.Now().After(deadline) {
			for i := range c.invariants {
				for _, p := range c.invariants[i].Pending {
					c.invariants[i].violate("still in flight %v after the load's end: %s", soakSettleTime, p)
				}
			}
			return c
		}
		s.logf("waiting for %d things in flight, e.g. %s", len(pending), pending[0])
		time.Sleep(10 * time.Second) // the next look at the stores
	}
}

func (s *soak) checkOnce() (soakChecks, []string) {
	now := time.Now()
	faults := s.faults.list()
	byName := map[string]*invariant{}
	var order []string
	merge := func(iv invariant) {
		if byName[iv.Name] == nil {
			byName[iv.Name] = &invariant{Name: iv.Name}
			order = append(order, iv.Name)
		}
		byName[iv.Name].merge(iv)
	}
	var lost []string
	stores := invariant{Name: "stores readable"}
	for _, u := range s.users {
		v, problems := s.readView(u)
		if c := v.conv("", u.MainConv); c != nil && len(c.Entries) > 0 {
			s.catchUp(u, c.Entries[len(c.Entries)-1].ID)
		}
		for _, p := range problems {
			stores.pending("%s", p)
		}
		merge(checkPrompts(u, v))
		rem, l := checkReminders(u, v, now)
		merge(rem)
		lost = append(lost, l...)
		merge(checkJobs(u, v, now))
		merge(checkApprovals(u, v))
		merge(checkMessages(u, v))
		merge(checkUploads(u, v))
		merge(checkStream(u, v))
		merge(checkSpend(u, v, faults, now))
	}
	objects, registry, problems := readDocker()
	for _, p := range problems {
		stores.pending("%s", p)
	}
	merge(checkOrphans(objects, registry))
	answers, failures, retry := s.client.ledger.snapshot()
	merge(checkRequests(answers, failures, retry, faults))
	stores.add("reads that failed", len(stores.Pending))
	merge(stores)
	var out soakChecks
	var pending []string
	for _, name := range order {
		out.invariants = append(out.invariants, *byName[name])
		pending = append(pending, byName[name].Pending...)
	}
	out.lost = lost
	return out, pending
}

// reportFaults prints every fault injected, in order, and a count by kind.
func (s *soak) reportFaults() {
	faults := s.faults.list()
	byKind := map[string]int{}
	skipped := 0
	s.say("faults injected: %d", len(faults))
	for _, f := range faults {
		target := f.User
		if target == "" {
			target = "the stack"
		}
		if f.Skipped != "" {
			skipped++
			s.say("  +%-8v %-16s skipped: %s", f.Start.Sub(s.start).Round(time.Second), f.Kind, f.Skipped)
			continue
		}
		byKind[f.Kind]++
		s.say("  +%-8v %-16s %s, %v: %s", f.Start.Sub(s.start).Round(time.Second), f.Kind, target, f.End.Sub(f.Start).Round(100*time.Millisecond), f.Detail)
	}
	var parts []string
	for _, k := range []string{faultAgentKill, faultManagerKill, faultPostgresRestart, faultCaddyRestart, faultSandboxPause,
		faultSandboxStop, faultSandboxRemove, faultDiskFill, faultCPUBusy} {
		parts = append(parts, fmt.Sprintf("%s %d", k, byKind[k]))
	}
	s.say("faults by kind: %s; skipped %d", strings.Join(parts, ", "), skipped)
}

// reportInvariant prints one invariant's counts and its violations.
func (s *soak) reportInvariant(iv invariant) {
	var parts []string
	for _, c := range iv.Counts {
		parts = append(parts, fmt.Sprintf("%s %d", c.What, c.N))
	}
	verdict := "ok"
	if n := len(iv.Violations); n > 0 {
		verdict = fmt.Sprintf("%d VIOLATIONS", n)
	}
	s.say("invariant %s: %s [%s]", iv.Name, strings.Join(parts, ", "), verdict)
	for _, v := range firstN(iv.Violations, 40) {
		s.say("  VIOLATION %s: %s", iv.Name, v)
	}
	if len(iv.Violations) > 40 {
		s.say("  … and %d more", len(iv.Violations)-40)
	}
}

// reportMutation says whether the soak caught the reminder the mutation
// dropped: the reminders invariant must report it, and only it, as lost.
func (s *soak) reportMutation(lost []string) {
	if s.dropped == nil {
		s.say("mutation %s: no pending reminder could be dropped: NOT caught", mutateDropReminder)
		return
	}
	verdict := "NOT caught"
	if len(lost) == 1 && lost[0] == s.dropped.Text {
		verdict = "caught"
	}
	s.say("mutation %s: dropped %s (task %d of %s, due %s) from the agent's store; reminders lost: %v: %s",
		mutateDropReminder, s.dropped.Text, s.dropped.Task, s.dropped.User, s.dropped.Due.Format(time.RFC3339), lost, verdict)
}
