package tools

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestRunShellTimeoutKillsTheProcessGroup(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	out, code, err := RunShell(context.Background(), "/bin/sh", dir, "sleep 30 & sleep 30; echo never", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if code != 124 || !strings.Contains(out, "killed after") || strings.Contains(out, "never") {
		t.Fatalf("code %d out %q", code, out)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("the timeout did not stop the background child: %v", time.Since(start))
	}
}

func TestRunShellCapsOutputAndReportsExitCodes(t *testing.T) {
	out, code, err := RunShell(context.Background(), "/bin/sh", t.TempDir(), "yes abcdefgh | head -c 100000; exit 3", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != 3 || len(out) > ShellOutputCap+100 || !strings.Contains(out, "output cut") {
		t.Fatalf("code %d, %d bytes: %q", code, len(out), out[len(out)-60:])
	}
	if _, _, err := RunShell(context.Background(), "/bin/sh", t.TempDir(), "  ", time.Second); err == nil {
		t.Fatal("empty command accepted")
	}
}

func TestRunShellHasACleanEnvironment(t *testing.T) {
	t.Setenv("AFFIDO_GATEWAY_TOKEN", "tok-secret-123")
	out, _, err := RunShell(context.Background(), "/bin/sh", t.TempDir(), "env", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "tok-secret-123") || !strings.Contains(out, "PATH=/bin:/usr/bin") {
		t.Fatalf("env: %q", out)
	}
}

func TestRedactorReplacesLongestFirst(t *testing.T) {
	r := NewRedactor(map[string]string{"SHORT": "abcdef", "LONG": "abcdef-ghijkl", "TINY": "ab", "EMPTY": ""})
	got := r.Redact("x abcdef-ghijkl y abcdef z ab")
	if got != "x [redacted LONG] y [redacted SHORT] z ab" {
		t.Fatalf("%q", got)
	}
}
