//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Reading the stores for the invariants: each agent's conversations
// through its API (every entry, live tasks, usage), the registry,
// notifications and spend ledger in Postgres, the notification sink's log,
// and Docker's listings, and the shapes they are read into. A read that
// fails is a problem the report names; nothing here fails the test by
// itself.

// soakEntry is a stored entry as /inspect returns it.
type soakEntry struct {
	ID         int64           `json:"id"`
	Kind       string          `json:"kind"`
	Text       string          `json:"text"`
	RunID      int64           `json:"run_id"`
	ToolCallID string          `json:"tool_call_id"`
	ToolName   string          `json:"tool_name"`
	IsError    bool            `json:"is_error"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
	Arguments  json.RawMessage `json:"arguments"`
	Data       json.RawMessage `json:"data"`
}

// final reports whether e is a reply that ends its run's turn.
func (e soakEntry) final() bool {
	return e.Kind == "assistant_message" && (len(e.ToolCalls) == 0 || string(e.ToolCalls) == "null" || string(e.ToolCalls) == "[]")
}

// soakTask is a live task as /inspect returns it.
type soakTask struct {
	ID         int64           `json:"id"`
	Kind       string          `json:"kind"`
	State      string          `json:"state"`
	Deadline   *time.Time      `json:"deadline"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

// convView is one conversation: every entry, its live tasks, its usage.
type convView struct {
	ID      int64
	Title   string
	Entries []soakEntry
	Tasks   []soakTask
	Usage   map[string]modelUsage // by model
}

type modelUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	Calls        int64 `json:"calls"`
}

// live reports whether run (a task id) is still a live task here.
func (c *convView) live(run int64) bool {
	for _, t := range c.Tasks {
		if t.ID == run {
			return true
		}
	}
	return false
}

// busy reports whether anything but sleeping background work (a job's
// next time, a reminder not yet due) is live in the conversation.
func (c *convView) busy(now time.Time) bool {
	for _, t := range c.Tasks {
		if t.State != "sleeping" || (t.Kind != "job" && t.Deadline != nil && t.Deadline.Before(now.Add(time.Minute))) {
			return true
		}
	}
	return false
}

// agentView is one agent's conversations.
type agentView struct {
	Convs map[int64]*convView
}

// userView is what the stores hold about one user.
type userView struct {
	Agents           map[string]*agentView // main, ann, bob, appr, worker
	PendingApprovals []approvalView        // appr's
	PendingReminders []string              // main's, their texts
	ApprovalsLog     string                // the workspace's approvals.log
	Uploads          map[string]string     // path -> sha256 of what reads back; "" when it does not
	Notifications    []notificationRow
	Sink             []delivery // what reached the user's notification URL
	Spend            []spendRow
	GatewayUsage     []gatewayUsageRow
	Prices           map[string]price
}

func (v *userView) conv(agent string, id int64) *convView {
	if agent == "" {
		agent = "main"
	}
	if a := v.Agents[agent]; a != nil {
		return a.Convs[id]
	}
	return nil
}

type notificationRow struct {
	Key    string `json:"key"`
	Status string `json:"status"`
	Text   string `json:"text"`
}

type spendRow struct {
	ID       int64     `json:"id"`
	Model    string    `json:"model"`
	At       time.Time `json:"at"`
	Reserved int64     `json:"reserved"`
	Cost     *int64    `json:"cost"`
	Settled  bool      `json:"settled"`
}

type gatewayUsageRow struct {
	Model        string `json:"model"`
	Calls        int64  `json:"calls"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
}

// price is USD per million tokens, as GET /api/spend lists it.
type price struct {
	Input  float64 `json:"input_per_million"`
	Output float64 `json:"output_per_million"`
}

// dockerObject is one labelled container, network or volume.
type dockerObject struct {
	Kind    string // container, network, volume
	ID      string
	Name    string
	Sandbox string // its affido.sandbox label
}

// registrySandbox is one row of the registry (sandboxes or the warm pool's).
type registrySandbox struct {
	Name      string `json:"name"`
	User      string `json:"user"`
	State     string `json:"state"`
	Container string `json:"container"`
}

// soakReadBudget bounds one read of the checks: the faults are over.
const soakReadBudget = 90 * time.Second

// readView reads what the stores hold about u; problems lists what could
// not be read.
func (s *soak) readView(u *soakUser) (v *userView, problems []string) {
	v = &userView{Agents: map[string]*agentView{}, Uploads: map[string]string{}, Prices: map[string]price{}}
	// One read that gets no answer stops the others: a sandbox that does
	// not answer would hold every read for the whole budget.
	dead := false
	read := func(path string) (soakResp, error) {
		if dead {
			return soakResp{}, errUnanswered
		}
		r, err := s.client.do(soakReq{user: u.ID, token: u.Token, method: "GET", path: path, budget: soakReadBudget})
		dead = err != nil
		return r, err
	}
	get := func(path string) (string, bool) {
		r, err := read(path)
		if err != nil || r.Code != 200 {
			problems = append(problems, fmt.Sprintf("%s: GET %s: %d %v %.200s", u.ID, path, r.Code, err, r.Body))
			return "", false
		}
		return r.Body, true
	}
	// The pending reminders first: one that is neither pending now nor
	// fired in the entries read after is lost, not firing meanwhile.
	if body, ok := get(u.path("", "/reminders")); ok {
		var out struct {
			Reminders []struct{ Text string }
		}
		_ = json.Unmarshal([]byte(body), &out)
		for _, r := range out.Reminders {
			v.PendingReminders = append(v.PendingReminders, r.Text)
		}
	}
	var agents struct {
		Agents []struct{ Name string }
	}
	if body, ok := get(u.path("", "/agents")); ok {
		_ = json.Unmarshal([]byte(body), &agents)
	}
	for _, a := range agents.Agents {
		prefix := a.Name
		if prefix == "main" {
			prefix = ""
		}
		av := &agentView{Convs: map[int64]*convView{}}
		v.Agents[a.Name] = av
		for cursor, more := "", true; more; {
			body, ok := get(u.path(prefix, "/sessions?cursor="+url.QueryEscape(cursor)))
			if !ok {
				break
			}
			var page struct {
				Conversations []struct {
					ID    int64  `json:"id"`
					Title string `json:"title"`
				} `json:"conversations"`
				Next string `json:"next"`
			}
			_ = json.Unmarshal([]byte(body), &page)
			for _, c := range page.Conversations {
				cv, ok := s.readConv(u, prefix, c.ID, get)
				if ok {
					cv.Title = c.Title
					av.Convs[c.ID] = cv
				}
			}
			cursor, more = page.Next, page.Next != ""
		}
	}
	if body, ok := get(u.path("appr", "/approvals")); ok {
		var out struct{ Approvals []approvalView }
		_ = json.Unmarshal([]byte(body), &out)
		v.PendingApprovals = out.Approvals
	}
	if r, err := read(u.path("", "/file?path=approvals.log")); err == nil && r.Code == 200 {
		v.ApprovalsLog = r.Body
	} else if err != nil || r.Code != 404 {
		problems = append(problems, fmt.Sprintf("%s: approvals.log: %d %v", u.ID, r.Code, err))
	}
	for _, up := range u.uploads {
		if up.Code != 201 {
			continue
		}
		r, err := read("/u/" + u.ID + "/" + up.Path)
		if err == nil && r.Code == 200 {
			sum := sha256.Sum256([]byte(r.Body))
			v.Uploads[up.Path] = hex.EncodeToString(sum[:])
		} else {
			v.Uploads[up.Path] = fmt.Sprintf("(GET answered %d %v)", r.Code, err)
		}
	}
	if body, ok := get("/api/spend"); ok {
		var rep struct {
			Prices map[string]price `json:"prices"`
		}
		_ = json.Unmarshal([]byte(body), &rep)
		v.Prices = rep.Prices
	}
	q := func(what, sql string, into any) {
		out, err := psqlTry(sql)
		if err == nil {
			err = json.Unmarshal([]byte(out), into)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %s: %v %.200s", u.ID, what, err, out))
		}
	}
	q("notifications", `SELECT coalesce(json_agg(json_build_object('key', key, 'status', status, 'text', text) ORDER BY id), '[]')
		FROM notifications WHERE user_id = '`+u.ID+`'`, &v.Notifications)
	q("spend", `SELECT coalesce(json_agg(json_build_object('id', id, 'model', model, 'at', at, 'reserved', reserved_micros,
		'cost', cost_micros, 'settled', settled) ORDER BY id), '[]') FROM spend WHERE user_id = '`+u.ID+`'`, &v.Spend)
	q("gateway usage", `SELECT coalesce(json_agg(json_build_object('model', model, 'calls', calls, 'input_tokens', input_tokens,
		'output_tokens', output_tokens)), '[]') FROM gateway_usage WHERE user_id = '`+u.ID+`'`, &v.GatewayUsage)
	sink, err := sinkDeliveries("/soak/" + u.ID)
	if err != nil {
		problems = append(problems, fmt.Sprintf("%s: the sink's log: %v", u.ID, err))
	}
	v.Sink = sink
	return v, problems
}

// readConv reads one conversation of the agent at prefix ("" for main):
// every entry (page by page), its live tasks and its usage.
func (s *soak) readConv(u *soakUser, prefix string, id int64, get func(string) (string, bool)) (*convView, bool) {
	cv := &convView{ID: id}
	for cursor, first := "", true; first || cursor != ""; first = false {
		body, ok := get(u.path(prefix, fmt.Sprintf("/inspect?conversation=%d&limit=1000&cursor=%s", id, url.QueryEscape(cursor))))
		if !ok {
			return nil, false
		}
		var in struct {
			Entries struct {
				Items []soakEntry `json:"items"`
				Next  string      `json:"next"`
			} `json:"entries"`
			Tasks []soakTask `json:"tasks"`
			Usage struct {
				Models map[string]modelUsage `json:"models"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(body), &in); err != nil {
			return nil, false
		}
		cv.Entries = append(cv.Entries, in.Entries.Items...)
		if first {
			cv.Tasks, cv.Usage = in.Tasks, in.Usage.Models
		}
		cursor = in.Entries.Next
	}
	return cv, true
}

// psqlTry runs one query in the stack's Postgres.
func psqlTry(query string) (string, error) {
	out, err := dockerTry("exec", oltpName(), "psql", "-U", "affido", "-d", "affido", "-tAc", query)
	return strings.TrimSpace(out), err
}

// sinkDeliveries reads what the notification sink received at path.
func sinkDeliveries(path string) ([]delivery, error) {
	out, err := dockerTry("logs", sinkName())
	if err != nil {
		return nil, err
	}
	var ds []delivery
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var d delivery
		if json.Unmarshal(sc.Bytes(), &d) == nil && d.Path == path {
			ds = append(ds, d)
		}
	}
	return ds, nil
}

// readDocker lists the stack's sandbox objects and the registry's
// sandboxes (users' and the warm pool's).
func readDocker() (objects []dockerObject, registry []registrySandbox, problems []string) {
	filters := []string{"--filter", "label=affido.stack=" + stack, "--filter", "label=affido.sandbox"}
	list := func(kind, format string, args ...string) {
		out, err := dockerTry(append(append(args, filters...), "--format", format+`|{{.Label "affido.sandbox"}}`)...)
		if err != nil {
			problems = append(problems, fmt.Sprintf("docker %s: %v %s", strings.Join(args, " "), err, out))
			return
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.SplitN(line, "|", 3); len(f) == 3 {
				objects = append(objects, dockerObject{Kind: kind, ID: f[0], Name: f[1], Sandbox: f[2]})
			}
		}
	}
	list("container", "{{.ID}}|{{.Names}}", "ps", "-a", "--no-trunc")
	list("network", "{{.ID}}|{{.Name}}", "network", "ls", "--no-trunc")
	list("volume", "{{.Name}}|{{.Name}}", "volume", "ls")
	for _, table := range []string{
		`SELECT coalesce(json_agg(json_build_object('name', name, 'user', user_id, 'state', state, 'container', container_id)), '[]') FROM sandboxes`,
		`SELECT coalesce(json_agg(json_build_object('name', name, 'user', '', 'state', state, 'container', container_id)), '[]') FROM pool_sandboxes`,
	} {
		var rows []registrySandbox
		out, err := psqlTry(table)
		if err == nil {
			err = json.Unmarshal([]byte(out), &rows)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("registry: %v %.200s", err, out))
		}
		registry = append(registry, rows...)
	}
	return objects, registry, problems
}

// catchUp reads u's event stream until it has seen maxID (the newest entry
// of main's conversation), for at most 30 s: the stream check compares
// what it saw with the store.
func (s *soak) catchUp(u *soakUser, maxID int64) {
	u.mu.Lock()
	var last int64
	if n := len(u.stream.Seen); n > 0 {
		last = u.stream.Seen[n-1]
	}
	u.mu.Unlock()
	if last >= maxID {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.followWith(ctx, u, func(id int64) {
		if id >= maxID {
			cancel()
		}
	})
}
