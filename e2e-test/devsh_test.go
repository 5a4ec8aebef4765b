//go:build e2e

package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// devsh runs ./dev.sh against the test stack (run.sh exported its settings).
func devsh(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("./dev.sh", args...)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("./dev.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The newcomer's lifecycle: reload keeps conversations and skills; down then
// up keeps everything; token and status work.
func TestDevShLifecycleKeepsData(t *testing.T) {
	user := "devsh-" + strings.ToLower(t.Name()[len(t.Name())-4:])
	tok := strings.TrimSpace(devsh(t, "token", user))
	if len(tok) < 20 {
		t.Fatalf("./dev.sh token printed %q", tok)
	}
	prompt(t, user, tok, map[string]any{"text": "write keep.txt: kept across reloads"})
	if r := post(t, user, tok, "/skills/install", `{"name":"markdown-toc"}`); r.Code != 201 {
		t.Fatalf("install: %d %s", r.Code, r.Body)
	}
	before := inspectOf(t, user, tok).EntryCount

	devsh(t, "reload")
	if got := inspectOf(t, user, tok).EntryCount; got != before {
		t.Fatalf("entries after reload: %d, want %d", got, before)
	}
	if s := skillsOf(t, user, tok); len(s) != 1 || !s[0].OK {
		t.Fatalf("skills after reload: %+v", s)
	}

	devsh(t, "down")
	if out, _ := dockerTry("inspect", "-f", "{{.State.Running}}", managerName()); strings.TrimSpace(out) != "false" {
		t.Fatalf("manager still running after down: %s", out)
	}
	devsh(t, "up")
	if got := inspectOf(t, user, tok).EntryCount; got != before {
		t.Fatalf("entries after down/up: %d, want %d", got, before)
	}
	r := prompt(t, user, tok, map[string]any{"text": "read keep.txt"})
	if !strings.Contains(r.Reply, "kept across reloads") {
		t.Fatalf("workspace after down/up: %q", r.Reply)
	}
	if out := devsh(t, "status"); !strings.Contains(out, user) || !strings.Contains(out, stack+"-"+user+"-workspace") {
		t.Fatalf("status does not show the sandbox and its volumes:\n%s", out)
	}
}
