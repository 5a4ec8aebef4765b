package policy

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/durable/sqlite"
)

func TestRuleMatching(t *testing.T) {
	cases := []struct {
		name string
		rule Rule
		args string
		want bool
	}{
		{"no condition matches any call", Rule{Tool: "shell"}, `{"command":"rm -rf /"}`, true},
		{"command prefix", Rule{When: Conditions{CommandPrefix: "ls "}}, `{"command":"ls -la notes"}`, true},
		{"command prefix, cat", Rule{When: Conditions{CommandPrefix: "cat "}}, `{"command":"cat notes/a.txt"}`, true},
		{"another command", Rule{When: Conditions{CommandPrefix: "ls "}}, `{"command":"rm -rf notes"}`, false},
		{"prefix without its space", Rule{When: Conditions{CommandPrefix: "ls "}}, `{"command":"lsof"}`, false},
		{"chained with ;", Rule{When: Conditions{CommandPrefix: "ls "}}, `{"command":"ls x; rm -rf notes"}`, false},
		{"chained with &&", Rule{When: Conditions{CommandPrefix: "ls "}}, `{"command":"ls x && rm y"}`, false},
		{"piped", Rule{When: Conditions{CommandPrefix: "cat "}}, `{"command":"cat a | sh"}`, false},
		{"command substitution", Rule{When: Conditions{CommandPrefix: "ls "}}, `{"command":"ls $(rm y)"}`, false},
		{"backticks", Rule{When: Conditions{CommandPrefix: "ls "}}, "{\"command\":\"ls `rm y`\"}", false},
		{"redirect", Rule{When: Conditions{CommandPrefix: "cat "}}, `{"command":"cat a > b"}`, false},
		{"newline", Rule{When: Conditions{CommandPrefix: "ls "}}, `{"command":"ls x\nrm y"}`, false},
		{"leading space is not the prefix", Rule{When: Conditions{CommandPrefix: "ls "}}, `{"command":" rm x"}`, false},
		{"path under", Rule{When: Conditions{PathPrefix: "notes"}}, `{"path":"notes/a.txt"}`, true},
		{"path deeper", Rule{When: Conditions{PathPrefix: "notes"}}, `{"path":"notes/x/y.txt"}`, true},
		{"path is the prefix", Rule{When: Conditions{PathPrefix: "notes"}}, `{"path":"notes"}`, true},
		{"sibling with the same start", Rule{When: Conditions{PathPrefix: "notes"}}, `{"path":"notes-old/a.txt"}`, false},
		{"escape with ..", Rule{When: Conditions{PathPrefix: "notes"}}, `{"path":"notes/../secrets.txt"}`, false},
		{"absolute", Rule{When: Conditions{PathPrefix: "notes"}}, `{"path":"/notes/a.txt"}`, false},
		{"outside the workspace", Rule{When: Conditions{PathPrefix: "."}}, `{"path":"../x"}`, false},
		{"root prefix, empty path", Rule{When: Conditions{PathPrefix: "."}}, `{"path":""}`, true},
		{"host", Rule{When: Conditions{Host: "example.org"}}, `{"url":"https://example.org/a?b"}`, true},
		{"host, other case and port", Rule{When: Conditions{Host: "example.org"}}, `{"url":"http://EXAMPLE.org:8080/"}`, true},
		{"subdomain is another host", Rule{When: Conditions{Host: "example.org"}}, `{"url":"https://evil.example.org/"}`, false},
		{"host as user info", Rule{When: Conditions{Host: "example.org"}}, `{"url":"https://example.org@evil.test/"}`, false},
		{"host as a path", Rule{When: Conditions{Host: "example.org"}}, `{"url":"https://evil.test/example.org"}`, false},
		{"arguments that are not an object", Rule{When: Conditions{Host: "example.org"}}, `"https://example.org/"`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.rule.matches(json.RawMessage(c.args)); got != c.want {
				t.Fatalf("%s on %s: %v, want %v", c.rule.Describe(), c.args, got, c.want)
			}
		})
	}
}

func TestNormalizeRefusesRulesThatCannotBeKept(t *testing.T) {
	known := func(n string) bool { return n == "shell" || n == "write_file" || n == "fetch_url" }
	bad := []Rule{
		{Tool: "nope", Effect: durable.Allow},
		{Tool: "shell", Effect: "maybe"},
		{Tool: "shell", Effect: durable.Allow, When: Conditions{Host: "example.org"}},
		{Tool: "write_file", Effect: durable.Allow, When: Conditions{CommandPrefix: "ls "}},
		{Tool: "write_file", Effect: durable.Allow, When: Conditions{PathPrefix: "../up"}},
		{Tool: "write_file", Effect: durable.Allow, When: Conditions{PathPrefix: "/etc"}},
		{Tool: "fetch_url", Effect: durable.Allow, When: Conditions{Host: "https://example.org/"}},
		{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: "   "}},
		{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: "find "}},
		{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: "xargs "}},
		{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: "ls"}},
		{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: " ls "}},
		{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: "cat a; "}},
	}
	for _, r := range bad {
		if _, err := normalize(r, known); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%+v: %v, want ErrInvalidRule", r, err)
		}
	}
	// An ask or deny may name any program: matching more only asks more.
	for _, r := range []Rule{{Tool: "shell", Effect: durable.Ask, When: Conditions{CommandPrefix: "find "}}, {Tool: "shell", Effect: durable.Deny, When: Conditions{CommandPrefix: "rm"}}} {
		if _, err := normalize(r, known); err != nil {
			t.Errorf("%s: %v", r.Describe(), err)
		}
	}
	r, err := normalize(Rule{Tool: "write_file", Effect: durable.Allow, When: Conditions{PathPrefix: "notes/"}}, known)
	if err != nil || r.When.PathPrefix != "notes" {
		t.Fatalf("%+v %v", r, err)
	}
	r, err = normalize(Rule{Tool: "fetch_url", Effect: durable.Allow, When: Conditions{Host: "Example.ORG."}}, known)
	if err != nil || r.When.Host != "example.org" {
		t.Fatalf("%+v %v", r, err)
	}
}

func TestProposedRules(t *testing.T) {
	for _, c := range []struct{ tool, args string }{
		{"shell", `{"command":""}`},
		{"shell", `{"command":"   "}`},
		{"fetch_url", `{"url":""}`},
		{"fetch_url", `{"url":"x"}`},
		{"write_file", `{"path":""}`},
		{"write_file", `{"path":"../x"}`},
	} {
		if r, err := Proposed(durable.Approval{Tool: c.tool, Arguments: json.RawMessage(c.args)}); !errors.Is(err, ErrNoProposal) {
			t.Errorf("%s %s: %s, want no proposal (it would allow every call)", c.tool, c.args, r.Describe())
		}
	}
	cmd := Rule{Tool: "shell", When: Conditions{Command: "cd notes && rm old.txt"}}
	if !cmd.matches(json.RawMessage(`{"command":"cd notes && rm old.txt"}`)) || cmd.matches(json.RawMessage(`{"command":"cd notes && rm old.txt -rf .."}`)) {
		t.Fatal("an exact command rule must match that command only")
	}
	cases := []struct{ tool, args, want string }{
		{"shell", `{"command":"ls -la notes"}`, "Allow shell only when the command starts with \"ls \" and holds none of ; & | ` $ ( ) < > or a line break"},
		{"shell", `{"command":"echo a; rm b"}`, `Allow shell only when the command is exactly "echo a; rm b"`},
		{"shell", `{"command":"ls"}`, `Allow shell only when the command is exactly "ls"`},
		{"shell", `{"command":"find . -maxdepth 0 -name x"}`, `Allow shell only when the command is exactly "find . -maxdepth 0 -name x"`},
		{"write_file", `{"path":"notes/day/1.txt","content":"x"}`, `Allow write_file only when the path is "notes/day" or lies under it`},
		{"write_file", `{"path":"top.txt","content":"x"}`, `Allow write_file only when the path is "top.txt" or lies under it`},
		{"fetch_url", `{"url":"https://Example.org/page"}`, `Allow fetch_url and browser_open only when the URL's host is exactly "example.org"`},
		{"set_reminder", `{"text":"x","after":"1m"}`, `Allow every set_reminder call`},
	}
	for _, c := range cases {
		r, err := Proposed(durable.Approval{Tool: c.tool, Arguments: json.RawMessage(c.args)})
		if got := r.Describe(); err != nil || got != c.want {
			t.Errorf("%s %s: %q %v, want %q", c.tool, c.args, got, err, c.want)
		}
	}
}

// The book against a real harness: defaults, rules with conditions, the
// precedence of deny over allow, outside text, trace entries for changes,
// and "allow always" adding the proposed rule in the decision's commit.
func openStore(t *testing.T) *durable.Store {
	t.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "session.db"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := durable.OpenStore(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	return store
}

func TestBookJudgesAndRecords(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	tools := []durable.Tool{
		{Name: "shell", Parameters: durable.Schema(`"command":{"type":"string"}`, "command")},
		{Name: "read_file", ReadOnly: true, Parameters: durable.Schema(`"path":{"type":"string"}`, "path")},
		{Name: "fetch_url", Parameters: durable.Schema(`"url":{"type":"string"}`, "url")},
	}
	book := &Book{Tools: tools}
	h, err := durable.Open(ctx, store, durable.Options{Policy: book, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	check := func(tool int, args string, outside bool) durable.Verdict {
		t.Helper()
		q := durable.PolicyQuery{Tool: tools[tool], Call: durable.ToolCall{Name: tools[tool].Name, Arguments: json.RawMessage(args)}, Store: store}
		if outside {
			q.Outside = &durable.Entry{ID: 7, Kind: durable.OutsideText}
		}
		v, err := book.Check(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := check(0, `{"command":"ls"}`, false); v.Effect != durable.Ask {
		t.Fatalf("shell by default: %+v", v)
	}
	// Ambiguous arguments are refused whatever the rules say: Go would run
	// the last "Command", a person may read the first.
	for _, args := range []string{`{"command":"ls notes","Command":"rm -rf ."}`, `{"command":"ls","command":"rm"}`, `["ls"]`} {
		if v := check(0, args, false); v.Effect != durable.Deny {
			t.Fatalf("%s: %+v", args, v)
		}
	}
	if v := check(1, `{"path":"a"}`, true); v.Effect != durable.Allow {
		t.Fatalf("read_file by default, outside text or not: %+v", v)
	}
	allow, err := book.Add(ctx, h, 1, Request{Tool: "shell", Effect: durable.Allow, When: map[string]string{"command_prefix": "ls "}})
	if err != nil {
		t.Fatal(err)
	}
	if v := check(0, `{"command":"ls -l"}`, false); v.Effect != durable.Allow {
		t.Fatalf("allowed by rule: %+v", v)
	}
	if v := check(0, `{"command":"rm -l"}`, false); v.Effect != durable.Ask {
		t.Fatalf("not matched by the rule: %+v", v)
	}
	if v := check(0, `{"command":"ls -l"}`, true); v.Effect != durable.Ask || !strings.Contains(v.Reason, "outside text") {
		t.Fatalf("an allowed call with outside text in the context: %+v", v)
	}
	deny, err := book.Add(ctx, h, 1, Request{Tool: "shell", Effect: durable.Deny})
	if err != nil {
		t.Fatal(err)
	}
	if v := check(0, `{"command":"ls -l"}`, false); v.Effect != durable.Deny {
		t.Fatalf("deny wins over allow: %+v", v)
	}
	if _, err := book.Remove(ctx, h, 1, deny.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := book.Remove(ctx, h, 1, deny.ID); !errors.Is(err, ErrNoRule) {
		t.Fatalf("removing twice: %v", err)
	}
	// The owner's request: each condition one the tool takes, none blank;
	// allowing every call of a tool a condition could narrow is confirmed.
	for _, c := range []struct {
		req  Request
		want error
	}{
		{Request{Tool: "nope", Effect: durable.Allow}, ErrInvalidRule},
		{Request{Tool: "shell", Effect: durable.Allow, When: map[string]string{"command_prefix": ""}}, ErrInvalidRule},
		{Request{Tool: "shell", Effect: durable.Allow, When: map[string]string{"command": " \t"}}, ErrInvalidRule},
		{Request{Tool: "shell", Effect: durable.Deny, When: map[string]string{"command_prefix": ""}}, ErrInvalidRule},
		{Request{Tool: "shell", Effect: durable.Allow, When: map[string]string{"host": "example.org"}}, ErrInvalidRule},
		{Request{Tool: "shell", Effect: durable.Allow, When: map[string]string{"cwd": "notes"}}, ErrInvalidRule},
		{Request{Tool: "read_file", Effect: durable.Allow, When: map[string]string{"command": "ls"}}, ErrInvalidRule},
		{Request{Tool: "shell", Effect: durable.Allow, When: map[string]string{"command_prefix": "find "}}, ErrInvalidRule},
		{Request{Tool: "shell", Effect: durable.Allow}, ErrUnconfirmed},
		{Request{Tool: "shell", Effect: durable.Allow, When: map[string]string{}}, ErrUnconfirmed},
		{Request{Tool: "fetch_url", Effect: durable.Allow}, ErrUnconfirmed},
	} {
		if _, err := book.Add(ctx, h, 1, c.req); !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want %v", c.req, err, c.want)
		}
	}
	if book.NeedsConfirm("read_file") || !book.NeedsConfirm("shell") {
		t.Error("only tools that are not read-only and take conditions need a confirmation")
	}
	rules, _ := book.Rules(ctx, store)
	if len(rules) != 1 || rules[0].ID != allow.ID {
		t.Fatalf("rules %+v", rules)
	}
	p, _ := store.Entries(ctx, 1, durable.Scan{Limit: 100})
	var trace []string
	for _, e := range p.Items {
		if e.Kind == durable.PolicyEntry {
			trace = append(trace, e.Text)
		}
	}
	if len(trace) != 3 || !strings.Contains(trace[0], "added: Allow shell only when") || !strings.Contains(trace[2], "removed: Deny every shell call") {
		t.Fatalf("trace of rule changes: %q", trace)
	}
}

// Attack: a tool that asks after outside text (write_note) asks whenever
// outside text has entered the conversation since the owner's last
// message, in the context or cut out of it, whatever a rule allows, in
// every agent (the worker's book too). Without outside text, rules decide
// as for any tool.
func TestAsksAfterOutsideText(t *testing.T) {
	ctx := context.Background()
	store := openStore(t)
	note := durable.Tool{Name: "write_note", AsksAfterOutside: true, Parameters: durable.Schema(`"notes":{"type":"string"},"text":{"type":"string"}`, "notes", "text")}
	page := &durable.Entry{ID: 9, Kind: durable.OutsideText}
	cases := []struct {
		name           string
		rule           durable.Effect // "" for none
		worker         bool
		inContext, cut bool
		want           durable.Effect
		reasonMentions string
	}{
		{"no rule, no outside text", "", false, false, false, durable.Ask, "asks by default"},
		{"allowed, no outside text", durable.Allow, false, false, false, durable.Allow, ""},
		{"allowed, outside text in the context", durable.Allow, false, true, true, durable.Ask, "entry 9"},
		{"allowed, outside text since the owner spoke but reset out of the context", durable.Allow, false, false, true, durable.Ask, "since your last message"},
		{"allowed in the worker, outside text since the owner spoke", durable.Allow, true, false, true, durable.Ask, "since your last message"},
		{"denied, outside text", durable.Deny, false, true, true, durable.Deny, "denies"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			book := &Book{Tools: []durable.Tool{note}, HoldsNoOwnerData: c.worker}
			if err := store.SetSetting(ctx, rulesKey, ""); err != nil {
				t.Fatal(err)
			}
			if c.rule != "" {
				raw, _ := json.Marshal([]Rule{{ID: 1, Tool: note.Name, Effect: c.rule}})
				if err := store.SetSetting(ctx, rulesKey, string(raw)); err != nil {
					t.Fatal(err)
				}
			}
			q := durable.PolicyQuery{Tool: note, Call: durable.ToolCall{Name: note.Name, Arguments: json.RawMessage(`{"notes":"owner","text":"x"}`)}, Store: store}
			if c.inContext {
				q.Outside = page
			}
			if c.cut {
				q.OutsideSinceOwner = page
			}
			v, err := book.Check(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if v.Effect != c.want || !strings.Contains(v.Reason, c.reasonMentions) {
				t.Fatalf("%+v, want %s mentioning %q", v, c.want, c.reasonMentions)
			}
		})
	}
}
