package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// "Deny and make a rule": the call is refused and a deny rule from it is
// saved (shown first on the card); the next identical call is refused
// without asking, and nothing of either ran. Tried: a note with it, and a
// decision that is none of the four.
func TestDenyAlwaysRefusesTheNextCallWithoutAsking(t *testing.T) {
	a := newAgent(t)
	id, view := a.waitingApproval(a.prompt("run: touch denied-once"))
	deny := view["proposed_deny_rule"].(map[string]any)
	if deny["effect"] != "deny" || !strings.HasPrefix(deny["words"].(string), "Deny shell") {
		t.Fatalf("the proposed deny rule: %v", deny)
	}
	m := a.decideRun(id, `{"decision":"deny_always","note":"never touch files"}`)
	if m["status"] != "done" || m["rule"].(map[string]any)["effect"] != "deny" || m["rule"].(map[string]any)["words"] != deny["words"] {
		t.Fatalf("deny always: %v", m)
	}
	if m := a.prompt("run: touch denied-once"); m["status"] != "done" || m["waiting_for"] != nil {
		t.Fatalf("the same call again: %v", m)
	}
	if _, err := os.Stat(filepath.Join(a.ws, "denied-once")); err == nil {
		t.Fatal("a denied call ran")
	}
	_, pending := a.do("GET", "/approvals", "")
	if n := len(pending["approvals"].([]any)); n != 0 {
		t.Fatalf("%d approvals wait after the rule", n)
	}
	if code, _ := a.do("POST", "/approvals/1", `{"decision":"deny_forever"}`); code != 400 {
		t.Fatalf("an unknown decision: %d", code)
	}
}

// "Deny and make a rule", edited before saving: the owner widens the
// proposed exact command to a prefix, and every command with that prefix
// is refused without asking. Tried first, and refused with nothing stored
// and the approval still waiting: a blank condition, a rule that no longer
// covers the call it is made from, a condition the tool does not take, and
// an edited rule with another decision.
func TestDenyAlwaysTakesTheRuleAsEdited(t *testing.T) {
	a := newAgent(t)
	id, _ := a.waitingApproval(a.prompt("run: touch edited-1"))
	path := "/approvals/" + id
	for _, bad := range []string{
		`{"decision":"deny_always","rule":{"when":{"command_prefix":"   "}}}`,
		`{"decision":"deny_always","rule":{"when":{"command_prefix":"rm "}}}`,
		`{"decision":"deny_always","rule":{"when":{"host":"example.org"}}}`,
		`{"decision":"deny","rule":{"when":{"command_prefix":"touch "}}}`,
	} {
		if code, m := a.do("POST", path, bad); code != 400 {
			t.Fatalf("%s: %d %v", bad, code, m)
		}
	}
	if _, rules := a.do("GET", "/rules", ""); len(rules["rules"].([]any)) != 0 {
		t.Fatalf("a refused edit stored a rule: %v", rules)
	}
	m := a.decideRun(id, `{"decision":"deny_always","rule":{"when":{"command_prefix":"touch "}}}`)
	if m["rule"].(map[string]any)["when"].(map[string]any)["command_prefix"] != "touch " {
		t.Fatalf("the rule saved: %v", m)
	}
	if m := a.prompt("run: touch edited-2"); m["status"] != "done" || m["waiting_for"] != nil {
		t.Fatalf("another command with the prefix: %v", m)
	}
	for _, f := range []string{"edited-1", "edited-2"} {
		if _, err := os.Stat(filepath.Join(a.ws, f)); err == nil {
			t.Fatalf("%s: a denied call ran", f)
		}
	}
}
