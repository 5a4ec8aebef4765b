// Package policy is the owner's grant of powers to their agent: per tool
// allow, ask or deny, with argument conditions, kept as rules in the
// agent's durable store. It is the harness's durable.Policy: before every
// tool call it says whether the call runs, waits for the owner (an
// approval) or is refused. The model cannot change a rule: rules and
// decisions arrive only through the owner's API, which the tools cannot
// reach.
//
// How a call is judged: among the rules for its tool whose conditions all
// match, a deny wins over an ask, an ask over an allow; with none, a
// read-only tool is allowed and any other asks. While outside text is in
// the model's context, a call that would be allowed asks anyway unless the
// tool is read-only; a tool that asks after outside text (write_note) also
// asks once outside text has entered the conversation since the owner's
// last message, in the context or not.
package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/affido/affido/agent/durable"
)

// Rule is one of the owner's grants.
type Rule struct {
	ID        int64          `json:"id,omitempty"` // 0 for a proposed rule
	Tool      string         `json:"tool"`
	Effect    durable.Effect `json:"effect"`
	When      Conditions     `json:"when,omitzero"`
	CreatedAt time.Time      `json:"created_at,omitzero"`
	// FromApproval is the approval whose "allow always" added the rule.
	FromApproval int64 `json:"from_approval,omitempty"`
}

// Conditions narrow a rule to some calls; all that are set must match.
type Conditions struct {
	// CommandPrefix (shell): the command starts with it. In an allow rule
	// the command must also run only a program of readOnlyPrograms (the
	// prefix names one) and hold no shell control character (; & | ` $ ( )
	// < > or a line break): "ls " allows "ls -la notes" but not
	// "ls; rm -rf notes", and no prefix allows find, which can run other
	// programs. In an ask or deny rule, any command that starts with it.
	CommandPrefix string `json:"command_prefix,omitempty"`
	// Command (shell): the command is exactly this.
	Command string `json:"command,omitempty"`
	// PathPrefix (read_file, write_file, list_files): the cleaned path is
	// this directory or file, or lies under it.
	PathPrefix string `json:"path_prefix,omitempty"`
	// Host (fetch_url): the URL's host, exactly (case-insensitive).
	Host string `json:"host,omitempty"`
}

// ErrInvalidRule is wrapped by every error for a rule that cannot be kept.
var ErrInvalidRule = errors.New("invalid rule")

// ErrUnconfirmed is returned for a rule that would allow every call of a
// tool a condition could narrow (shell, write_file, fetch_url) without
// Request.ConfirmUnconditional.
var ErrUnconfirmed = errors.New("unconditional rule not confirmed")

// ErrNoRule is returned for a rule ID that does not exist.
var ErrNoRule = errors.New("no such rule")

// conditionsOf says which condition each tool's arguments can carry.
var conditionsOf = map[string][]string{
	"shell":      {"command_prefix", "command"},
	"read_file":  {"path_prefix"},
	"write_file": {"path_prefix"},
	"list_files": {"path_prefix"},
	"fetch_url":  {"host"},
	// The browser's: the page's host. A rule on browser_click or
	// browser_type with a host is the owner letting the agent act on that
	// site (durable.Tool.ActsOnPage).
	"browser_open":  {"host"},
	"browser_click": {"host"},
	"browser_type":  {"host"},
}

// siteTools share their host rules: the owner's rule for a site on one
// covers the other ("allow always" on a page opened in the browser lets
// fetch_url read that site too, and the other way round), and the rule's
// words say so.
var siteTools = []string{"fetch_url", "browser_open"}

// covers reports whether r, a rule on its own tool, applies to calls of
// tool: its own, or a site tool's when r names a host.
func (r Rule) covers(tool string) bool {
	if r.Tool == tool {
		return true
	}
	return r.When.Host != "" && slices.Contains(siteTools, r.Tool) && slices.Contains(siteTools, tool)
}

// argumentOf is the call argument each condition reads.
var argumentOf = map[string]string{"command_prefix": "command", "command": "command", "path_prefix": "path", "host": "url"}

// ErrNoProposal is returned by Proposed for a call no narrow rule can be
// built from (an empty command, a URL without a host): "allow always"
// would allow every call of the tool, so the owner must allow it once.
var ErrNoProposal = errors.New("no rule can be built from this call")

// normalize checks r against the known tools and cleans its conditions.
func normalize(r Rule, known func(string) bool) (Rule, error) {
	if !known(r.Tool) {
		return r, fmt.Errorf("%w: unknown tool %q", ErrInvalidRule, r.Tool)
	}
	switch r.Effect {
	case durable.Allow, durable.Ask, durable.Deny:
	default:
		return r, fmt.Errorf("%w: effect must be allow, ask or deny, not %q", ErrInvalidRule, r.Effect)
	}
	set := map[string]string{"command_prefix": r.When.CommandPrefix, "command": r.When.Command, "path_prefix": r.When.PathPrefix, "host": r.When.Host}
	for name, v := range set {
		if v != "" && !slices.Contains(conditionsOf[r.Tool], name) {
			return r, fmt.Errorf("%w: %s takes no %s condition", ErrInvalidRule, r.Tool, name)
		}
		if len(v) > 1024 {
			return r, fmt.Errorf("%w: %s is longer than 1024 bytes", ErrInvalidRule, name)
		}
	}
	if p := r.When.PathPrefix; p != "" {
		c := path.Clean(strings.TrimSuffix(p, "/"))
		if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
			return r, fmt.Errorf("%w: path_prefix must be a path inside the workspace, not %q", ErrInvalidRule, p)
		}
		r.When.PathPrefix = c
	}
	if h := r.When.Host; h != "" {
		h = strings.TrimSuffix(strings.ToLower(h), ".")
		if strings.ContainsAny(h, "/:@ ?#") || h == "" {
			return r, fmt.Errorf("%w: host is a host name such as example.org, not %q", ErrInvalidRule, r.When.Host)
		}
		r.When.Host = h
	}
	if strings.TrimSpace(r.When.CommandPrefix) == "" && r.When.CommandPrefix != "" {
		return r, fmt.Errorf("%w: command_prefix is blank", ErrInvalidRule)
	}
	if p := r.When.CommandPrefix; p != "" && r.strictPrefix() {
		if err := allowablePrefix(p); err != nil {
			return r, fmt.Errorf("%w: %w", ErrInvalidRule, err)
		}
	}
	if strings.TrimSpace(r.When.Command) == "" && r.When.Command != "" {
		return r, fmt.Errorf("%w: command is blank", ErrInvalidRule)
	}
	return r, nil
}

// matches reports whether r's conditions all hold for a call's arguments.
// Arguments that cannot be read match no condition.
func (r Rule) matches(args json.RawMessage) bool {
	var a struct {
		Command string `json:"command"`
		Path    string `json:"path"`
		URL     string `json:"url"`
	}
	if r.When == (Conditions{}) {
		return true
	}
	if json.Unmarshal(args, &a) != nil {
		return false
	}
	if p := r.When.CommandPrefix; p != "" {
		if !strings.HasPrefix(a.Command, p) || (r.strictPrefix() && !runsOnlyItself(a.Command)) {
			return false
		}
	}
	if c := r.When.Command; c != "" && a.Command != c {
		return false
	}
	if p := r.When.PathPrefix; p != "" {
		c := path.Clean(a.Path) // "" is the workspace root, "."
		if path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") || (p != "." && c != p && !strings.HasPrefix(c, p+"/")) {
			return false
		}
	}
	if h := r.When.Host; h != "" {
		if hostOf(a.URL) != h {
			return false
		}
	}
	return true
}

// strictPrefix reports whether r's command_prefix allows, and so matches
// only a command that runs one listed program and nothing else (see
// Conditions.CommandPrefix). An ask or deny matches more widely: matching
// more can only ask more. A stored allow rule whose prefix names another
// program, saved before this check, matches no command.
func (r Rule) strictPrefix() bool {
	return r.Effect != durable.Ask && r.Effect != durable.Deny
}

// hostOf is a URL's host, lower case, without a trailing dot; "" when the
// URL cannot be parsed.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
}

// Describe says in plain words what r does, for the owner (the rules
// API's "words", the rule "allow always" would add) and for the trace.
func (r Rule) Describe() string {
	var when []string
	w := r.When
	if c := w.Command; c != "" {
		when = append(when, fmt.Sprintf("the command is exactly %q", c))
	}
	if p := w.CommandPrefix; p != "" && r.strictPrefix() {
		when = append(when, allowedPrefixWords(p))
	} else if p != "" {
		when = append(when, fmt.Sprintf("the command starts with %q", p))
	}
	switch p := w.PathPrefix; p {
	case "":
	case ".":
		when = append(when, "the path is in the workspace")
	default:
		when = append(when, fmt.Sprintf("the path is %q or lies under it", p))
	}
	if h := w.Host; h != "" {
		what := "the URL's host"
		if r.Tool == "browser_click" || r.Tool == "browser_type" {
			what = "the page's host"
		}
		when = append(when, fmt.Sprintf("%s is exactly %q", what, h))
	}
	tool := r.Tool
	if w.Host != "" && slices.Contains(siteTools, r.Tool) {
		tool = strings.Join(siteTools, " and ")
	}
	var verb string
	switch r.Effect {
	case durable.Ask:
		verb = "Ask before"
	case durable.Deny:
		verb = "Deny"
	default:
		verb = "Allow"
	}
	switch {
	case len(when) == 0:
		return fmt.Sprintf("%s every %s call", verb, tool)
	case r.Effect == durable.Ask || r.Effect == durable.Deny:
		return fmt.Sprintf("%s %s when %s", verb, tool, strings.Join(when, " and "))
	default:
		return fmt.Sprintf("%s %s only when %s", verb, tool, strings.Join(when, " and "))
	}
}

// DenyProposal is the rule "Deny and make a rule" saves for a: the rule
// Proposed would make, refusing instead of allowing.
func DenyProposal(a durable.Approval) (Rule, error) {
	r, err := Proposed(a)
	r.Effect = durable.Deny
	return r, err
}

// Proposed is the rule "allow always" adds for an approval's call: the
// host for fetch_url; for a shell command, the exact command, or its
// program's name ("ls ") when the program is one a command_prefix may
// allow (readOnlyPrograms) and the command holds no control character;
// the directory of a path; the tool itself for tools that take no
// condition. ErrNoProposal when the call gives nothing to narrow the rule
// by. The owner sees the rule before deciding.
func Proposed(a durable.Approval) (Rule, error) {
	r := Rule{Tool: a.Tool, Effect: durable.Allow, FromApproval: a.ID}
	var args struct {
		Command string `json:"command"`
		Path    string `json:"path"`
		URL     string `json:"url"`
	}
	_ = json.Unmarshal(a.Arguments, &args)
	none := fmt.Errorf("%w: %s %s", ErrNoProposal, a.Tool, a.Arguments)
	switch {
	case slices.Contains(conditionsOf[a.Tool], "command_prefix"):
		cmd := args.Command
		prefix := programOf(cmd) + " "
		switch {
		case strings.TrimSpace(cmd) == "":
			return r, none
		case strings.HasPrefix(cmd, prefix) && runsOnlyItself(cmd):
			r.When.CommandPrefix = prefix
		default:
			r.When.Command = cmd
		}
	case slices.Contains(conditionsOf[a.Tool], "path_prefix"):
		c := path.Clean(args.Path)
		if c == "." || path.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
			return r, none
		}
		if d := path.Dir(c); d != "." {
			c = d
		}
		r.When.PathPrefix = c
	case slices.Contains(conditionsOf[a.Tool], "host"):
		if r.When.Host = hostOf(args.URL); r.When.Host == "" {
			return r, none
		}
	}
	return r, nil
}
