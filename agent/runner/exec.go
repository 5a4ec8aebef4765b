package runner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// ExecLimited is the trampoline between the runner and a command: given
// "--cpu N --fsize N -- PROGRAM ARGS...", it sets RLIMIT_CPU and
// RLIMIT_FSIZE (soft and hard, so the command cannot raise them) and
// executes PROGRAM in its own place. It returns only on error.
func ExecLimited(args []string) error {
	var cpu, fsize uint64
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			return fmt.Errorf("tool-exec: %s needs a value", args[0])
		}
		n, err := strconv.ParseUint(args[1], 10, 64)
		if err != nil {
			return fmt.Errorf("tool-exec: %s %q: %w", args[0], args[1], err)
		}
		switch args[0] {
		case "--cpu":
			cpu = n
		case "--fsize":
			fsize = n
		default:
			return fmt.Errorf("tool-exec: unknown option %s", args[0])
		}
		args = args[2:]
	}
	if len(args) < 2 {
		return errors.New("usage: tool-exec [--cpu SECONDS] [--fsize BYTES] -- PROGRAM [ARGS...]")
	}
	args = args[1:]
	if cpu > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_CPU, &syscall.Rlimit{Cur: cpu, Max: cpu}); err != nil {
			return fmt.Errorf("tool-exec: RLIMIT_CPU: %w", err)
		}
	}
	if fsize > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: fsize, Max: fsize}); err != nil {
			return fmt.Errorf("tool-exec: RLIMIT_FSIZE: %w", err)
		}
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		return fmt.Errorf("tool-exec: %w", err)
	}
	return syscall.Exec(path, args, os.Environ())
}
