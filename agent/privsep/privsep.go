// Package privsep splits the sandbox into its two identities at start-up.
//
// The container starts as root holding only CAP_SETUID and CAP_SETGID. Start
// launches the tool runner (agent/runner) as the tools' uid, then drops the
// agent process itself to the agent's uid, which clears both capabilities
// before the agent serves its first request. From then on:
//
//   - /data (session database, corpus, skill records) belongs to the agent,
//     mode 0700: the tools can neither read nor write it;
//   - /workspace belongs to the agent and the shared group, mode 2770 (the
//     setgid bit keeps new files in the group), so both can work there;
//   - the agent's /proc entries are not readable by the tools (a process that
//     changed its uid is not dumpable), so its environment, with the gateway
//     token, stays out of their reach;
//   - no process in the container holds a capability.
package privsep

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/affido/affido/agent/runner"
)

// The identities, as the agent image's /etc/passwd and /etc/group name them.
const (
	AgentUID = 10001 // the agent process; owns /data and /workspace
	ToolsUID = 10002 // the tool runner and every command the model runs
	WorkGID  = 10003 // "work": the agent and the tools, sharing /workspace
)

// ErrNotRoot is returned when Start runs without the root start it needs.
var ErrNotRoot = errors.New("privilege separation needs the container to start as root with CAP_SETUID and CAP_SETGID")

// Config says what to start and which directories to hand over.
type Config struct {
	Self      string   // this binary (the runner is "Self runner ...")
	RunnerArg []string // the runner's arguments after "runner"
	Workspace string
	Data      string
}

// Start starts the tool runner under ToolsUID and drops this process to
// AgentUID. It returns a client to the runner and the runner's process,
// whose end the caller must treat as fatal (nothing could start another).
func Start(cfg Config) (*runner.Client, *exec.Cmd, error) {
	if os.Getuid() != 0 {
		return nil, nil, ErrNotRoot
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("runner socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "runner"), os.NewFile(uintptr(fds[1]), "agent")
	cmd := exec.Command(cfg.Self, append([]string{"runner"}, cfg.RunnerArg...)...)
	cmd.Dir = cfg.Workspace
	cmd.Env = []string{"PATH=/bin", "LANG=C.UTF-8"}
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: ToolsUID, Gid: ToolsUID, Groups: []uint32{WorkGID}}}
	if err := cmd.Start(); err != nil {
		ours.Close()
		theirs.Close()
		return nil, nil, fmt.Errorf("start the tool runner: %w", err)
	}
	theirs.Close()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, nil, fmt.Errorf("runner socket: %w", err)
	}
	if err := drop(); err != nil {
		_ = cmd.Process.Kill()
		return nil, nil, err
	}
	if err := prepare(cfg.Data, cfg.Workspace); err != nil {
		_ = cmd.Process.Kill()
		return nil, nil, err
	}
	return runner.NewClient(conn), cmd, nil
}

// drop makes this process the agent: groups, gid, then uid (Go applies
// them to every thread), which clears every capability; then it checks that
// no thread kept one.
func drop() error {
	if err := syscall.Setgroups([]int{WorkGID}); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(AgentUID); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(AgentUID); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	syscall.Umask(0o002) // files the agent writes in the workspace stay group-writable
	tasks, err := filepath.Glob("/proc/self/task/*/status")
	if err != nil || len(tasks) == 0 {
		return fmt.Errorf("read thread status: %v", err)
	}
	for _, t := range tasks {
		eff, err := capEff(t)
		if err != nil {
			return err
		}
		if eff != 0 {
			return fmt.Errorf("a thread still holds capabilities (CapEff %x) after dropping to uid %d", eff, AgentUID)
		}
	}
	return nil
}

// capEff reads the effective capability set from a /proc status file.
func capEff(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapEff in %s", path)
}

// prepare gives the directories their modes, as the agent (their owner):
// /data closed to everyone else; /workspace shared with the work group. A
// volume made by an older image (owned by the agent, group agent, 0755) is
// brought over the same way, file by file.
func prepare(data, ws string) error {
	if err := os.Chmod(data, 0o700); err != nil {
		return fmt.Errorf("close %s: %w", data, err)
	}
	st, err := os.Stat(ws)
	if err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Gid) == WorkGID && st.Mode()&fs.ModeSetgid != 0 && st.Mode().Perm() == 0o770 {
		return nil
	}
	err = filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return nil // not ours to fix, or a link (its target is not the workspace's business)
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if sys, ok := info.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != AgentUID {
			return nil
		}
		_ = os.Lchown(p, -1, WorkGID)
		mode := info.Mode().Perm() | 0o060
		if d.IsDir() {
			mode |= 0o010 | fs.ModeSetgid
		}
		_ = os.Chmod(p, mode)
		return nil
	})
	if err != nil {
		return err
	}
	if err := os.Chmod(ws, 0o770|fs.ModeSetgid); err != nil {
		return fmt.Errorf("share %s: %w", ws, err)
	}
	return nil
}
