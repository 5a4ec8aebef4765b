package runner

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary plays both the runner process and the trampoline, chosen
// by AFFIDO_RUNNER_TEST_ROLE, so the tests run the real process tree.
func TestMain(m *testing.M) {
	switch os.Getenv("AFFIDO_RUNNER_TEST_ROLE") {
	case "runner":
		conn, err := AgentConn()
		if err != nil {
			os.Exit(2)
		}
		var cfg Config
		cfg.Shell, cfg.Dir, cfg.OutputCap = "/bin/sh", os.Getenv("AFFIDO_RUNNER_TEST_DIR"), 16<<10
		cfg.Env = []string{"PATH=/bin:/usr/bin", "AFFIDO_RUNNER_TEST_ROLE=exec", "HOME=" + cfg.Dir}
		cfg.Limits = Limits{CPUSeconds: 2, FileSize: 1024}
		cfg.Trampoline = []string{os.Args[0]}
		cfg.Scratch = []string{filepath.Join(cfg.Dir, "shm")}
		if err := Serve(conn, cfg); err != nil {
			os.Exit(3)
		}
		os.Exit(0)
	case "exec":
		err := ExecLimited(os.Args[1:])
		os.Stderr.WriteString(err.Error())
		os.Exit(126)
	}
	os.Exit(m.Run())
}

type proc struct {
	c   *Client
	cmd *exec.Cmd
	dir string
}

// start runs a runner process (this test binary) and returns a client to it.
func start(t *testing.T) proc {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "runner"), os.NewFile(uintptr(fds[1]), "agent")
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0])
	cmd.Env = []string{"AFFIDO_RUNNER_TEST_ROLE=runner", "AFFIDO_RUNNER_TEST_DIR=" + dir, "AFFIDO_GATEWAY_TOKEN=tok-secret-123"}
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cmd.Wait() })
	return proc{NewClient(conn), cmd, dir}
}

func (p proc) run(t *testing.T, command string, timeout time.Duration) (string, int) {
	t.Helper()
	out, code, err := p.c.Run(context.Background(), command, timeout)
	if err != nil {
		t.Fatalf("run %q: %v", command, err)
	}
	return out, code
}

// noDescendants fails if anything the runner started is still alive.
func (p proc) noDescendants(t *testing.T) {
	t.Helper()
	if left := descendants(p.cmd.Process.Pid); len(left) > 0 {
		t.Fatalf("processes outlived their call: %v", left)
	}
}

func TestOutputAndExitCode(t *testing.T) {
	p := start(t)
	out, code := p.run(t, "echo hi; exit 3", 30*time.Second)
	if out != "hi\n" || code != 3 {
		t.Fatalf("%q %d", out, code)
	}
	out, _ = p.run(t, "env", 30*time.Second)
	if strings.Contains(out, "tok-secret-123") {
		t.Fatalf("the runner's environment reached the command: %q", out)
	}
	if _, _, err := p.c.Run(context.Background(), "  ", time.Second); err == nil {
		t.Fatal("an empty command was accepted")
	}
	// The agent's socket is not open in a command: it cannot answer for the runner.
	if out, _ := p.run(t, `[ -e /proc/$$/fd/3 ] && echo leaked || echo clean`, 30*time.Second); out != "clean\n" {
		t.Fatalf("fd 3 in a command: %q", out)
	}
	// An over-long command is refused before it reaches the runner, which goes on.
	if _, _, err := p.c.Run(context.Background(), strings.Repeat("<", MaxCommand+1), time.Second); err == nil {
		t.Fatal("an over-long command was accepted")
	}
	if out, _ := p.run(t, "echo still here", 30*time.Second); out != "still here\n" {
		t.Fatalf("after an over-long command: %q", out)
	}
}

// A process left in the background, even one detached into its own session,
// ends with the call; the call does not wait for it.
func TestNoProcessOutlivesItsCall(t *testing.T) {
	p := start(t)
	begin := time.Now()
	out, code := p.run(t, "sleep 300 & (setsid sleep 301 &) ; echo started", 60*time.Second)
	if code != 0 || !strings.Contains(out, "started") {
		t.Fatalf("%q %d", out, code)
	}
	if took := time.Since(begin); took > 30*time.Second {
		t.Fatalf("the call waited for its background processes (%v)", took)
	}
	p.noDescendants(t)
}

func TestTimeoutKillsTheTree(t *testing.T) {
	p := start(t)
	out, code := p.run(t, "sleep 300 & sleep 300; echo never", 300*time.Millisecond)
	if code != 124 || !strings.Contains(out, "killed after") || strings.Contains(out, "never") {
		t.Fatalf("%q %d", out, code)
	}
	p.noDescendants(t)
}

func TestCancelKillsTheTree(t *testing.T) {
	p := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	marker := filepath.Join(p.dir, "started")
	done := make(chan error, 1)
	go func() {
		_, _, err := p.c.Run(ctx, "touch started; sleep 300", time.Minute)
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	p.noDescendants(t)
	// The runner goes on serving.
	if out, _ := p.run(t, "echo again", 30*time.Second); out != "again\n" {
		t.Fatalf("after a cancel: %q", out)
	}
}

func TestFileSizeAndCPULimits(t *testing.T) {
	p := start(t)
	out, code := p.run(t, "head -c 4096 /dev/zero > big", 30*time.Second)
	st, err := os.Stat(filepath.Join(p.dir, "big"))
	if err != nil || st.Size() > 1024 || code == 0 {
		t.Fatalf("writing past RLIMIT_FSIZE: code %d out %q size %v", code, out, st)
	}
	// The command cannot raise its own limit.
	out, code = p.run(t, "ulimit -f unlimited && echo raised", 30*time.Second)
	if code == 0 || strings.Contains(out, "raised") {
		t.Fatalf("raising the file limit: %d %q", code, out)
	}
	// CPU: a busy loop is stopped after its CPU seconds (wall time varies
	// with load, so the call's own timeout is generous).
	out, code = p.run(t, "while :; do :; done", 5*time.Minute)
	if code != 128+int(syscall.SIGXCPU) && code != 128+int(syscall.SIGKILL) {
		t.Fatalf("busy loop past RLIMIT_CPU: code %d out %q", code, out)
	}
}

func TestClientReportsAGoneRunner(t *testing.T) {
	p := start(t)
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.c.Run(context.Background(), "echo x", time.Second); !errors.Is(err, ErrGone) {
		t.Fatalf("after the runner died: %v", err)
	}
}

// A scratch directory (the sandbox's /dev/shm, outside the workspace
// quota) is empty at the next call: tried with a file, a hidden file, a
// nested directory without write permission, and a file a background
// process keeps writing after the shell ends.
func TestScratchIsEmptiedAfterEveryCall(t *testing.T) {
	p := start(t)
	shm := filepath.Join(p.dir, "shm")
	if err := os.Mkdir(shm, 0o777); err != nil {
		t.Fatal(err)
	}
	out, code := p.run(t, "echo x > shm/a; echo y > shm/.hidden; mkdir -p shm/d/e; echo z > shm/d/e/f; chmod 500 shm/d; (while :; do echo w >> shm/later; sleep 0.01; done) & until [ -e shm/later ]; do sleep 0.01; done; ls -A shm | wc -l", 30*time.Second)
	// The background writer outlives the shell and is killed with the
	// call's process group: the shell may say "Killed" after the count.
	if first, _, _ := strings.Cut(out, "\n"); code != 0 || first != "4" {
		t.Fatalf("first call: %d %q", code, out)
	}
	out, code = p.run(t, "ls -A shm | wc -l", 5*time.Second)
	if code != 0 || strings.TrimSpace(out) != "0" {
		t.Fatalf("the next call finds %q entries in the scratch directory (exit %d)", out, code)
	}
	if _, err := os.Stat(shm); err != nil {
		t.Fatalf("the scratch directory itself went: %v", err)
	}
}
