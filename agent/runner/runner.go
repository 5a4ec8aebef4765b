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
	c.next++
	id := c.next
	if err := c.send(request{ID: id, Command: command, TimeoutMS: timeout.Milliseconds()}); err != nil {
		return "", 0, err
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
			return "", 0, fmt.Errorf("%w: no answer %v after the call's timeout", ErrGone, answerGrace)
		case r := <-got:
			if cancelled != nil {
				return r.Output, 130, cancelled
			}
			if r.Error != "" {
				return r.Output, r.ExitCode, errors.New(r.Error)
			}
			return r.Output, r.ExitCode, nil
		case err := <-failed:
			c.gone = true
			return "", 0, fmt.Errorf("%w: %v", ErrGone, err)
		case <-ctx.Done():
			cancelled = ctx.Err()
			if err := c.send(request{ID: id, Cancel: true}); err != nil {
				return "", 0, err
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
