// Package runner runs the model's shell commands in a process of their own,
// under the tools' uid: the agent hands it one command at a time over a
// socket, and it answers with the capped output and the exit code.
//
// The runner is a child subreaper, so everything a command starts, even a
// daemon that detaches with setsid, stays its descendant; when the call ends,
// times out or is cancelled, every descendant is killed and reaped before the
// answer goes back. No process outlives its tool call. Each command runs with
// per-call limits (CPU seconds, file size) set by a small trampoline
// (ExecLimited) just before the shell is executed.
package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"time"
)

// ErrGone is returned when the runner process has stopped answering: the
// agent cannot run tools any more and should restart.
var ErrGone = errors.New("the tool runner is gone")

// answerGrace is how long past a call's timeout the agent waits for the
// runner's answer.
const answerGrace = 30 * time.Second

// MaxCommand is the longest command the runner takes.
const MaxCommand = 64 << 10

// request is one message from the agent.
type request struct {
	ID        uint64 `json:"id"`
	Command   string `json:"command,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	Cancel    bool   `json:"cancel,omitempty"`
	// Repair, instead of a command, asks the runner to give the workspace's
	// group back a path under the workspace (see Client.Repair).
	Repair string `json:"repair,omitempty"`
}

// response is the runner's answer to a command.
type response struct {
	ID       uint64 `json:"id"`
	Output   string `json:"output"`
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
}

// Client is the agent's side: it implements the tools' Shell over a
// connection to the runner. Calls are serialised: one command runs at a time.
type Client struct {
	mu   sync.Mutex
	conn net.Conn
	rd   *bufio.Reader
	next uint64
	gone bool
}

// NewClient talks to a runner over conn.
func NewClient(conn net.Conn) *Client {
	return &Client{conn: conn, rd: bufio.NewReaderSize(conn, 64<<10)}
}

// Run runs command in the workspace with timeout. A cancelled ctx kills the
// command (and everything it started) and returns ctx's error.
func (c *Client) Run(ctx context.Context, command string, timeout time.Duration) (string, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return "", 0, ErrGone
	}
	if len(command) > MaxCommand {
		return "", 0, fmt.Errorf("the command is %d bytes; at most %d", len(command), MaxCommand)
	}
	r, err := c.call(ctx, request{Command: command, TimeoutMS: timeout.Milliseconds()}, timeout)
	if err != nil {
		return r.Output, r.ExitCode, err
	}
	if r.Error != "" {
		return r.Output, r.ExitCode, errors.New(r.Error)
	}
	return r.Output, r.ExitCode, nil
}

// RepairTimeout bounds one repair (the runner stops its walk by then).
const RepairTimeout = 20 * time.Second

// Repair asks the runner, which runs under the uid that owns what the tools
// wrote, to give the workspace's group back rel (relative to the
// workspace), everything under it and the directories on the way to it:
// read and write for files, read, write and search for directories, the
// workspace's group, no sticky bit and no ACL. It works in Go, never through
// a shell, follows no link and never leaves the workspace; what the tools'
// uid does not own is left as it is. It returns an error only when the
// runner could not do it; a path that does not exist is not an error.
func (c *Client) Repair(ctx context.Context, rel string) error {
	if !filepath.IsLocal(rel) {
		return fmt.Errorf("repair %q: not a path inside the workspace", rel)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return ErrGone
	}
	r, err := c.call(ctx, request{Repair: rel}, RepairTimeout)
	if err != nil {
		return err
	}
	if r.Error != "" {
		return fmt.Errorf("repair %s: %s", rel, r.Error)
	}
	return nil
}

// call sends req (under a fresh id) and waits for its answer: until
// timeout plus the grace, after which the runner counts as gone. A
// cancelled ctx asks the runner to stop, then waits for its answer.
func (c *Client) call(ctx context.Context, req request, timeout time.Duration) (response, error) {
	c.next++
	id := c.next
	req.ID = id
	if err := c.send(req); err != nil {
		return response{}, err
	}
	got := make(chan response, 1)
	failed := make(chan error, 1)
	go func() {
		for {
			line, err := c.rd.ReadBytes('\n')
			if err != nil {
				failed <- err
				return
			}
			var r response
			if json.Unmarshal(line, &r) == nil && r.ID == id {
				got <- r
				return
			}
		}
	}()
	// The runner answers within the call's timeout (it kills the command
	// then); a runner that does not (stopped or killed by a command, which
	// shares its uid) is gone, and the agent restarts rather than wait.
	late := time.NewTimer(timeout + answerGrace)
	defer late.Stop()
	var cancelled error
	for {
		select {
		case <-late.C:
			c.gone = true
			return response{}, fmt.Errorf("%w: no answer %v after the call's timeout", ErrGone, answerGrace)
		case r := <-got:
			if cancelled != nil {
				r.ExitCode = 130
				return r, cancelled
			}
			return r, nil
		case err := <-failed:
			c.gone = true
			return response{}, fmt.Errorf("%w: %v", ErrGone, err)
		case <-ctx.Done():
			cancelled = ctx.Err()
			if err := c.send(request{ID: id, Cancel: true}); err != nil {
				return response{}, err
			}
			ctx = context.Background() // now wait for the runner to confirm the kill
		}
	}
}

func (c *Client) send(r request) error {
	b, _ := json.Marshal(r)
	if _, err := c.conn.Write(append(b, '\n')); err != nil {
		c.gone = true
		return fmt.Errorf("%w: %v", ErrGone, err)
	}
	return nil
}

// readRequests feeds lines from r to out until r ends, then closes out.
func readRequests(r io.Reader, out chan<- request) {
	defer close(out)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 8*MaxCommand) // JSON escaping grows a command at most 6 times
	for sc.Scan() {
		var req request
		if json.Unmarshal(sc.Bytes(), &req) == nil {
			out <- req
		}
	}
}
