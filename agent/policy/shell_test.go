package policy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/affido/affido/agent/durable"
)

// shellArgs are a shell call's arguments for command.
func shellArgs(command string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"command": command})
	return b
}

// runners are programs that can run another program given the right
// arguments (or write files); no command_prefix may allow them.
var runners = []string{"find", "xargs", "env", "timeout", "nice", "nohup", "time", "watch", "strace", "sudo", "su",
	"exec", "command", "eval", "source", ".", "sh", "bash", "dash", "ash", "busybox", "awk", "gawk", "sed", "perl",
	"python", "python3", "git", "make", "ssh", "tar", "zip", "rsync", "vi", "vim", "less", "more", "man",
	"sort", "uniq", "diff", "file", "gzip", "zcat", "date", "tee", "cp", "mv", "rm", "touch", "kill"}

// The attack of issue 28: the owner allows a harmless find always; the
// rule that added let find -exec run any program. "Allow always" on a
// shell call now proposes the exact command unless its program is one
// that can run nothing else, and a prefix rule never allows a runner,
// even one stored before.
func TestAllowAlwaysOnShellAllowsWhatWasApproved(t *testing.T) {
	cases := []struct {
		approved string
		prefix   string // the proposed command_prefix; "" for the exact command
		mustAsk  []string
		mayRun   []string
	}{
		{approved: "find . -maxdepth 0 -name x",
			mustAsk: []string{"find . -exec sh -c id {} +", "find . -exec sh -c 'id' {} +", "find . -maxdepth 0 -name y", "find . -delete"}},
		{approved: "ls -la", prefix: "ls ",
			mayRun:  []string{"ls -la", "ls notes", "ls -R ."},
			mustAsk: []string{"ls; id", "ls $(id)", "ls `id`", "ls | sh", "ls > x", "ls\nid", "lsof", "ls", "xargs ls"}},
		{approved: "grep -rn todo notes", prefix: "grep ",
			mayRun:  []string{"grep -c x a.txt"},
			mustAsk: []string{"grep x a.txt | sh", "zgrep x a.gz"}},
		{approved: "cat notes/a.txt", prefix: "cat ",
			mayRun:  []string{"cat b.txt"},
			mustAsk: []string{"cat a > b", "cat a; rm b"}},
		{approved: "ls", mayRun: []string{"ls"}, mustAsk: []string{"ls -la"}},
		{approved: "ls\t-la", mayRun: []string{"ls\t-la"}, mustAsk: []string{"ls -la"}},
		{approved: "echo a; rm b", mustAsk: []string{"echo a; rm c", "echo a"}},
		{approved: "xargs sh -c id", mustAsk: []string{"xargs sh -c 'rm -rf .'"}},
		{approved: "env FOO=1 ls", mustAsk: []string{"env sh -c id"}},
		{approved: "timeout 5 ls", mustAsk: []string{"timeout 5 sh -c id"}},
		{approved: "sh -c ls", mustAsk: []string{"sh -c id"}},
		{approved: "awk '{print}' a.txt", mustAsk: []string{"awk 'BEGIN{system(\"id\")}'"}},
		{approved: "sed -n 1p a.txt", mustAsk: []string{"sed -n 1e\\ id a.txt", "sed 1e a.txt"}},
		{approved: "busybox ls", mustAsk: []string{"busybox sh -c id"}},
		{approved: "sort a.txt", mustAsk: []string{"sort --compress-program=sh a.txt", "sort -o a.txt b.txt"}},
		{approved: "git status", mustAsk: []string{"git -c core.pager=id log"}},
		{approved: "tar tf a.tar", mustAsk: []string{"tar xf a.tar --to-command=sh"}},
		{approved: "FOO=1 ls -la", mustAsk: []string{"FOO=1 ls x"}},
		{approved: "'ls' -la", mustAsk: []string{"'ls' x"}},
		{approved: "/bin/ls -la", mustAsk: []string{"/bin/ls x"}},
	}
	for _, c := range cases {
		r, err := Proposed(durable.Approval{Tool: "shell", Arguments: shellArgs(c.approved)})
		if err != nil {
			t.Fatalf("%q: %v", c.approved, err)
		}
		if r.When.CommandPrefix != c.prefix || c.prefix == "" && r.When.Command != c.approved {
			t.Errorf("allow always on %q proposes %s; want prefix %q (\"\" is the exact command)", c.approved, r.Describe(), c.prefix)
		}
		if !r.matches(shellArgs(c.approved)) {
			t.Errorf("%s does not allow the approved %q", r.Describe(), c.approved)
		}
		for _, cmd := range c.mayRun {
			if !r.matches(shellArgs(cmd)) {
				t.Errorf("%s does not allow %q", r.Describe(), cmd)
			}
		}
		for _, cmd := range c.mustAsk {
			if r.matches(shellArgs(cmd)) {
				t.Errorf("%s allows %q", r.Describe(), cmd)
			}
		}
	}
}

// A prefix rule saved before these checks (or written by hand) never
// allows a runner; the same prefix in an ask or deny rule still matches.
func TestPrefixRulesNeverAllowARunner(t *testing.T) {
	for _, prog := range runners {
		if _, listed := readOnlyPrograms[prog]; listed {
			t.Errorf("%s can run another program or write a file, yet a prefix may allow it", prog)
		}
		cmd := prog + " -exec sh -c id {} +"
		allow := Rule{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: prog + " "}}
		if allow.matches(shellArgs(cmd)) {
			t.Errorf("%s allows %q", allow.Describe(), cmd)
		}
		if !strings.Contains(allow.Describe(), "matches no command") {
			t.Errorf("the words of a stored %q prefix: %s", prog+" ", allow.Describe())
		}
		if r, _ := Proposed(durable.Approval{Tool: "shell", Arguments: shellArgs(prog + " x y")}); r.When.CommandPrefix != "" {
			t.Errorf("allow always on %q proposes %s", prog+" x y", r.Describe())
		}
		for _, e := range []durable.Effect{durable.Ask, durable.Deny} {
			r := Rule{Tool: "shell", Effect: e, When: Conditions{CommandPrefix: prog + " "}}
			if !r.matches(shellArgs(cmd)) || !r.matches(shellArgs(prog+" x; id")) {
				t.Errorf("%s does not match %q", r.Describe(), cmd)
			}
		}
	}
	// The control characters count anywhere in the command, the prefix too.
	old := Rule{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: "cat a; "}}
	if old.matches(shellArgs("cat a; sh -c id")) {
		t.Errorf("%s allows a second command", old.Describe())
	}
}

func TestRuleWords(t *testing.T) {
	cases := []struct {
		rule Rule
		want string
	}{
		{Rule{Tool: "shell", Effect: durable.Allow}, `Allow every shell call`},
		{Rule{Tool: "shell", Effect: durable.Deny}, `Deny every shell call`},
		{Rule{Tool: "shell", Effect: durable.Allow, When: Conditions{Command: "find . -maxdepth 0 -name x"}},
			`Allow shell only when the command is exactly "find . -maxdepth 0 -name x"`},
		{Rule{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: "ls "}},
			"Allow shell only when the command starts with \"ls \" and holds none of ; & | ` $ ( ) < > or a line break"},
		{Rule{Tool: "shell", Effect: durable.Ask, When: Conditions{CommandPrefix: "ls "}},
			`Ask before shell when the command starts with "ls "`},
		{Rule{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: "find "}},
			`Allow shell only when the command starts with "find ", which matches no command: find can run another program or write a file, so only an exact command can allow it`},
		{Rule{Tool: "shell", Effect: durable.Allow, When: Conditions{CommandPrefix: "c"}},
			"Allow shell only when the command starts with \"c\", runs a program that can neither run another program nor write a file, and holds none of ; & | ` $ ( ) < > or a line break"},
		{Rule{Tool: "shell", Effect: durable.Allow, When: Conditions{Command: "a\nb"}}, `Allow shell only when the command is exactly "a\nb"`},
		{Rule{Tool: "write_file", Effect: durable.Allow, When: Conditions{PathPrefix: "notes"}}, `Allow write_file only when the path is "notes" or lies under it`},
		{Rule{Tool: "write_file", Effect: durable.Deny, When: Conditions{PathPrefix: "."}}, `Deny write_file when the path is in the workspace`},
		{Rule{Tool: "fetch_url", Effect: durable.Allow, When: Conditions{Host: "example.org"}}, `Allow fetch_url and browser_open only when the URL's host is exactly "example.org"`},
	}
	for _, c := range cases {
		if got := c.rule.Describe(); got != c.want {
			t.Errorf("%+v:\n got %s\nwant %s", c.rule, got, c.want)
		}
	}
}
