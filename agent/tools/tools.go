// Package tools are the agent's built-in tools: list_files, read_file
// (replay-safe), write_file and shell (not replay-safe), all confined to the
// workspace.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/affido/affido/agent/durable"
	"github.com/affido/affido/agent/runner"
	"github.com/affido/affido/agent/workspace"
)

// Limits of the built-in tools.
const (
	ReadLimit       = 64 << 10
	WriteLimit      = 4 << 20
	ShellOutputCap  = 16 << 10
	ShellDefault    = 30 * time.Second
	ShellMaxTimeout = 5 * time.Minute
)

func decode(args json.RawMessage, v any) error {
	if err := json.Unmarshal(args, v); err != nil {
		return fmt.Errorf("invalid arguments: %w", err)
	}
	return nil
}

// Shell runs one of the model's shell commands in the workspace, killing
// everything it started when it ends, times out or ctx is cancelled (then
// with ctx's error). In the sandbox it is the tool runner (agent/runner),
// under the tools' own uid.
type Shell interface {
	Run(ctx context.Context, command string, timeout time.Duration) (output string, exitCode int, err error)
}

// LocalShell runs commands as the agent's own user, in a process group. It
// is for tests and for running the agent outside its sandbox image, where
// there is no second identity to run the tools under.
type LocalShell struct {
	Path string // the shell, run as Path -c COMMAND
	Dir  string // the working directory
}

// Run runs command with RunShell.
func (l LocalShell) Run(ctx context.Context, command string, timeout time.Duration) (string, int, error) {
	return RunShell(ctx, l.Path, l.Dir, command, timeout)
}

// Builtin returns the built-in tools over ws, with shell running the
// shell tool's commands.
func Builtin(ws workspace.Workspace, shell Shell) []durable.Tool {
	return []durable.Tool{
		{
			Name:        "list_files",
			Description: "List the files in a workspace directory (default: the workspace root).",
			Parameters:  durable.Schema(`"path":{"type":"string","description":"directory, relative to the workspace"}`),
			Safe:        true,
			ReadOnly:    true,
			Execute: func(ctx context.Context, _ durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
				var a struct{ Path string }
				if err := decode(args, &a); err != nil {
					return durable.ToolResult{}, err
				}
				list, err := ws.List(a.Path)
				if err != nil {
					return durable.ToolResult{}, err
				}
				var b strings.Builder
				for _, f := range list {
					if f.Dir {
						fmt.Fprintf(&b, "%s/\n", f.Path)
					} else {
						fmt.Fprintf(&b, "%s\t%d bytes\n", f.Path, f.Size)
					}
				}
				if b.Len() == 0 {
					b.WriteString("(empty)")
				}
				return durable.ToolResult{Output: b.String()}, nil
			},
		},
		{
			Name:        "read_file",
			Description: "Read a text file from the workspace.",
			Parameters:  durable.Schema(`"path":{"type":"string"}`, "path"),
			Safe:        true,
			ReadOnly:    true,
			Execute: func(ctx context.Context, _ durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
				var a struct{ Path string }
				if err := decode(args, &a); err != nil {
					return durable.ToolResult{}, err
				}
				b, cut, err := ws.Read(a.Path, ReadLimit)
				if err != nil {
					return durable.ToolResult{}, err
				}
				out := string(b)
				if cut {
					out += fmt.Sprintf("\n[cut at %d bytes]", ReadLimit)
				}
				return durable.ToolResult{Output: out}, nil
			},
		},
		{
			Name:        "write_file",
			Description: "Write a text file in the workspace, replacing it if it exists.",
			Parameters:  durable.Schema(`"path":{"type":"string"},"content":{"type":"string"}`, "path", "content"),
			Execute: func(ctx context.Context, _ durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
				var a struct{ Path, Content string }
				if err := decode(args, &a); err != nil {
					return durable.ToolResult{}, err
				}
				n, err := ws.Write(a.Path, strings.NewReader(a.Content), WriteLimit)
				if err != nil {
					return durable.ToolResult{}, err
				}
				return durable.ToolResult{Output: fmt.Sprintf("wrote %d bytes to %s", n, a.Path)}, nil
			},
		},
		{
			Name:        "shell",
			Description: "Run a command with the sandbox's minimal shell in the workspace. No network, no package managers.",
			Parameters:  durable.Schema(`"command":{"type":"string"},"timeout_seconds":{"type":"integer"}`, "command"),
			Execute: func(ctx context.Context, _ durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
				var a struct {
					Command        string
					TimeoutSeconds int `json:"timeout_seconds"`
				}
				if err := decode(args, &a); err != nil {
					return durable.ToolResult{}, err
				}
				timeout := ShellDefault
				if a.TimeoutSeconds > 0 {
					timeout = min(time.Duration(a.TimeoutSeconds)*time.Second, ShellMaxTimeout)
				}
				out, code, err := shell.Run(ctx, a.Command, timeout)
				if err != nil {
					return durable.ToolResult{}, err
				}
				if room, used := ws.Room(); room == 0 && used > 0 {
					out += fmt.Sprintf("\n[the workspace and corpus hold %d bytes, at or over their quota of %d: delete files; uploads, ingest and write_file are refused until then]", used, ws.Quota)
				}
				return durable.ToolResult{Output: fmt.Sprintf("exit %d\n%s", code, out), IsError: code != 0}, nil
			},
		},
	}
}

// RunShell runs command with shell -c in dir, with a clean environment (no
// secrets), a timeout that kills the whole process group, and output capped.
func RunShell(ctx context.Context, shell, dir, command string, timeout time.Duration) (string, int, error) {
	if strings.TrimSpace(command) == "" {
		return "", 0, errors.New("empty command")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.Command(shell, "-c", command)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/bin:/usr/bin", "HOME=" + dir, "WORKSPACE=" + dir, "TMPDIR=/tmp", "LANG=C.UTF-8"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := runner.NewCappedOutput(ShellOutputCap)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return "", 127, fmt.Errorf("start shell: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	timedOut := false
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = <-done
		timedOut = true
	}
	text := out.String()
	if timedOut {
		if ctx.Err() == context.DeadlineExceeded {
			return text + fmt.Sprintf("\n[killed after %s]", timeout), 124, nil
		}
		return text, 130, ctx.Err()
	}
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		return text, 1, err
	}
	return text, code, nil
}

// Redactor replaces the value of every secret with [redacted NAME].
type Redactor struct {
	names  []string
	values map[string]string
}

// NewRedactor redacts the given secrets (name -> value); empty and very
// short values are ignored (they would redact ordinary text).
func NewRedactor(secrets map[string]string) *Redactor {
	r := &Redactor{values: map[string]string{}}
	for name, v := range secrets {
		if len(v) >= 6 {
			r.names = append(r.names, name)
			r.values[name] = v
		}
	}
	// Longest first, so a secret that contains another is replaced whole.
	sort.Slice(r.names, func(i, j int) bool { return len(r.values[r.names[i]]) > len(r.values[r.names[j]]) })
	return r
}

// SecretsFromEnv collects the agent's secrets: its gateway token and every
// AFFIDO_SECRET_* variable.
func SecretsFromEnv() map[string]string {
	out := map[string]string{}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if k == "AFFIDO_GATEWAY_TOKEN" || strings.HasPrefix(k, "AFFIDO_SECRET_") {
			out[k] = v
		}
	}
	return out
}

// Redact returns s with every secret value replaced.
func (r *Redactor) Redact(s string) string {
	for _, n := range r.names {
		s = strings.ReplaceAll(s, r.values[n], "[redacted "+n+"]")
	}
	return s
}
