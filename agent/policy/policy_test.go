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
	}
	for _, r := range bad {
		if _, err := normalize(r, known); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("%+v: %v, want ErrInvalidRule", r, err)
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
		{"shell", `{"command":"ls -la notes"}`, `allow shell when the command starts with "ls "`},
		{"shell", `{"command":"echo a; rm b"}`, `allow shell when the command is "echo a; rm b"`},
		{"shell", `{"command":"ls"}`, `allow shell when the command is "ls"`},
		{"write_file", `{"path":"notes/day/1.txt","content":"x"}`, `allow write_file when the path is under "notes/day"`},
		{"write_file", `{"path":"top.txt","content":"x"}`, `allow write_file when the path is under "top.txt"`},
		{"fetch_url", `{"url":"https://Example.org/page"}`, `allow fetch_url when the host is "example.org"`},
		{"set_reminder", `{"text":"x","after":"1m"}`, `allow set_reminder`},
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
func TestBookJudgesAndRecords(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "session.db"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := durable.OpenStore(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	tools := []durable.Tool{{Name: "shell"}, {Name: "read_file", ReadOnly: true}, {Name: "fetch_url"}}
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
	allow, err := book.Add(ctx, h, 1, Rule{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: "ls "}})
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
	deny, err := book.Add(ctx, h, 1, Rule{Tool: "shell", Effect: durable.Deny})
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
	if _, err := book.Add(ctx, h, 1, Rule{Tool: "nope", Effect: durable.Allow}); !errors.Is(err, ErrInvalidRule) {
		t.Fatalf("unknown tool: %v", err)
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
	if len(trace) != 3 || !strings.Contains(trace[0], "added: allow shell") || !strings.Contains(trace[2], "removed: deny shell") {
		t.Fatalf("trace of rule changes: %q", trace)
	}
}
