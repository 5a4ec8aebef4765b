package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Limits bound one command.
type Limits struct {
	CPUSeconds uint64 // RLIMIT_CPU of every process the command starts
	FileSize   uint64 // RLIMIT_FSIZE: the largest file a command may write, in bytes
}

// Config is how the runner runs commands.
type Config struct {
	Shell     string   // the shell, run as Shell -c COMMAND
	Dir       string   // the working directory (the workspace)
	Env       []string // the whole environment of a command
	OutputCap int      // bytes of output kept; the rest is counted
	Limits    Limits
	// Trampoline is the argv prefix of a program that applies Limits and
	// then executes the rest of its arguments (affido-agent tool-exec).
	Trampoline []string
	// Scratch are directories emptied after every command (the sandbox's
	// /dev/shm, a tmpfs outside the workspace quota): nothing a command
	// leaves there outlives the call.
	Scratch []string
}

// AgentConn is the runner's connection to the agent, which hands it over
// as fd 3. fd 3 itself was inherited without close-on-exec; it is closed
// here (the connection uses a close-on-exec duplicate), or every command
// would inherit the agent's socket and could answer in the runner's name.
func AgentConn() (net.Conn, error) {
	f := os.NewFile(3, "agent")
	conn, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("runner: the agent's socket on fd 3: %w", err)
	}
	if err := f.Close(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("runner: close fd 3: %w", err)
	}
	return conn, nil
}

// Serve is the runner process: it makes itself a child subreaper, then runs
// the commands that arrive on conn one at a time until conn closes. It must
// run in a process of its own (it reaps every child of the process).
func Serve(conn net.Conn, cfg Config) error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become a subreaper: %w", err)
	}
	// Not dumpable: the commands, which run under the same uid, cannot
	// ptrace the runner or read its memory.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set not dumpable: %w", err)
	}
	// What the commands write stays writable by the workspace's group (the
	// agent), as what the agent writes does for them.
	syscall.Umask(0o002)
	reqs := make(chan request)
	go readRequests(conn, reqs)
	for req := range reqs {
		if req.Cancel {
			continue // for a command that has already finished
		}
		var resp response
		if req.Repair != "" {
			resp.ID = req.ID
			if err := cfg.repair(req.Repair); err != nil {
				resp.Error = err.Error()
			}
		} else {
			resp = cfg.run(req, reqs)
		}
		b, _ := json.Marshal(resp)
		if _, err := conn.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("answer the agent: %w", err)
		}
	}
	killDescendants()
	return nil
}

// run runs one command, watching reqs for its cancellation.
func (cfg Config) run(req request, reqs <-chan request) response {
	out := NewCappedOutput(cfg.OutputCap)
	if strings.TrimSpace(req.Command) == "" {
		return response{ID: req.ID, Error: "empty command"}
	}
	args := append(append([]string{}, cfg.Trampoline...),
		"--cpu", strconv.FormatUint(cfg.Limits.CPUSeconds, 10),
		"--fsize", strconv.FormatUint(cfg.Limits.FileSize, 10),
		"--", cfg.Shell, "-c", req.Command)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = cfg.Dir
	cmd.Env = cfg.Env
	// Output goes through a pipe we read ourselves, so Wait returns when the
	// shell exits even if something it started still holds the pipe; that
	// something is killed below, and then the pipe ends.
	pr, pw, err := os.Pipe()
	if err != nil {
		return response{ID: req.ID, ExitCode: 127, Error: "output pipe: " + err.Error()}
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return response{ID: req.ID, ExitCode: 127, Error: "start shell: " + err.Error()}
	}
	pw.Close()
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(out, pr)
		close(copied)
	}()
	defer pr.Close()
	timeout := time.Duration(req.TimeoutMS) * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	why := ""
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-ctx.Done():
			why = fmt.Sprintf("\n[killed after %s]", timeout)
			// The shell's group at once (one signal to all its members, so
			// the shell cannot go on after its child dies), then the rest.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			killDescendants()
			err = <-done
			break wait
		case r, ok := <-reqs:
			if !ok || (r.Cancel && r.ID == req.ID) {
				why = "\n[cancelled]"
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				killDescendants()
				err = <-done
				break wait
			}
		}
	}
	// Whatever the shell left running (in the background, detached with
	// setsid, or reparented to us) ends with the call, and so does what it
	// left in the scratch directories.
	killDescendants()
	for _, dir := range cfg.Scratch {
		emptyDir(dir)
	}
	select {
	case <-copied:
	case <-time.After(5 * time.Second): // nothing can hold the pipe now; never wait forever
		pr.Close()
		<-copied
	}
	text := out.String()
	switch {
	case why == "\n[cancelled]":
		return response{ID: req.ID, Output: text + why, ExitCode: 130}
	case why != "":
		return response{ID: req.ID, Output: text + why, ExitCode: 124}
	}
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
		if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
			if ws.Signal() == syscall.SIGXFSZ {
				text += "\n[stopped: a file grew past the size limit]"
			}
			if ws.Signal() == syscall.SIGXCPU || ws.Signal() == syscall.SIGKILL {
				text += fmt.Sprintf("\n[stopped by signal %s]", ws.Signal())
			}
		}
	} else if err != nil {
		return response{ID: req.ID, Output: text, ExitCode: 1, Error: err.Error()}
	}
	return response{ID: req.ID, Output: text, ExitCode: code}
}

// emptyDir removes what dir holds (what this uid may remove: the commands
// run under it), keeping dir itself. Directories a command made read-only
// are made writable first, or their content could not be removed.
func emptyDir(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		_ = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = os.Chmod(path, 0o700)
			}
			return nil
		})
		_ = os.RemoveAll(p)
	}
}

// killDescendants kills every descendant of this process and reaps them,
// scanning /proc until a scan finds none (a process forked during a scan is
// found by the next one: as a subreaper we inherit the orphans).
func killDescendants() {
	self := os.Getpid()
	for range 100 {
		pids := descendants(self)
		if len(pids) == 0 {
			break
		}
		for _, p := range pids {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		reap(false)
	}
	reap(false)
}

// reap collects exited children; with block it waits for all of them.
func reap(block bool) {
	for {
		opts := syscall.WNOHANG
		if block {
			opts = 0
		}
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, opts, nil)
		if pid <= 0 || err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if !block && pid == 0 {
				// children still exiting: give the kernel a moment, then look again
				time.Sleep(time.Millisecond)
				if len(descendants(os.Getpid())) == 0 {
					continue
				}
			}
			return
		}
	}
}

// descendants lists the live descendants of root from /proc.
func descendants(root int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may contain spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 || f[0] == "Z" {
			continue // a zombie is dead already; reaping collects it
		}
		ppid, _ := strconv.Atoi(f[1])
		parent[pid] = ppid
	}
	var out []int
	for pid := range parent {
		for p, n := parent[pid], 0; p != 0 && n < 64; p, n = parent[p], n+1 {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// CappedOutput keeps the first n bytes written and counts the rest; String
// ends with a note of how much was cut.
type CappedOutput struct {
	buf     bytes.Buffer
	n       int
	dropped int
}

// NewCappedOutput keeps up to n bytes.
func NewCappedOutput(n int) *CappedOutput { return &CappedOutput{n: n} }

func (c *CappedOutput) Write(p []byte) (int, error) {
	room := c.n - c.buf.Len()
	if room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	if len(p) > room {
		c.dropped += len(p) - max(room, 0)
	}
	return len(p), nil
}

func (c *CappedOutput) String() string {
	if c.dropped > 0 {
		return c.buf.String() + fmt.Sprintf("\n[output cut: %d more bytes]", c.dropped)
	}
	return c.buf.String()
}
