package server_test

import (
	"strings"
	"testing"
)

// An agent's instructions (its job, in the owner's words) reach every one
// of its model requests in the system message, and only its own: main's
// requests do not carry them. Changing them takes effect at the next
// request. Tried: instructions over the limit (refused, nothing changed).
func TestInstructionsReachTheModel(t *testing.T) {
	a := newAgent(t)
	if code, m := a.do("POST", "/agents", `{"name":"gardener","instructions":"You look after the garden. Answer in one line."}`); code != 201 || m["instructions"] == nil {
		t.Fatalf("create: %d %v", code, m)
	}
	last := func() string {
		a.holdMu.Lock()
		defer a.holdMu.Unlock()
		if len(a.systems) == 0 {
			return ""
		}
		return a.systems[len(a.systems)-1]
	}
	if code, m := a.do("POST", "/agents/gardener/prompt", `{"text":"hello"}`); code != 200 {
		t.Fatalf("prompt gardener: %d %v", code, m)
	}
	if s := last(); !strings.Contains(s, "You look after the garden. Answer in one line.") {
		t.Fatalf("gardener's system message: %q", s)
	}
	a.prompt("hello main")
	if s := last(); strings.Contains(s, "garden") {
		t.Fatalf("main's system message carries gardener's instructions: %q", s)
	}
	if code, m := a.do("PATCH", "/agents/gardener", `{"instructions":"`+strings.Repeat("x", 8<<10+1)+`"}`); code != 400 {
		t.Fatalf("instructions over the limit: %d %v", code, m)
	}
	if code, m := a.do("PATCH", "/agents/main", `{"instructions":"You keep the homelab running."}`); code != 200 {
		t.Fatalf("main's instructions: %d %v", code, m)
	}
	a.prompt("hello again")
	if s := last(); !strings.Contains(s, "You keep the homelab running.") {
		t.Fatalf("main's system message after the change: %q", s)
	}
	if code, _ := a.do("POST", "/agents/gardener/prompt", `{"text":"and you?"}`); code != 200 {
		t.Fatal("prompt gardener again")
	}
	if s := last(); !strings.Contains(s, "You look after the garden.") || strings.Contains(s, "homelab") {
		t.Fatalf("gardener after main's change: %q", s)
	}
}
