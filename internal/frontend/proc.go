package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// errTimeout marks a command ended by its timeout.
var errTimeout = errors.New("timed out")

// proc is one child process run with a deadline.
type proc struct {
	argv  []string
	stdin io.Reader
	// feed, when set instead of stdin, writes the process's stdin from a
	// goroutine of its own and closes it (the session writes the action's
	// input only once the step admitted it); run does not wait for it,
	// and its writes fail once the process has ended.
	feed    func(w io.WriteCloser)
	stdout  io.Writer
	stderr  io.Writer
	timeout time.Duration
	env     []string // extra environment, appended
}

// run runs p and returns its exit code. The error is non-nil only when the
// process could not be started or was killed by the timeout (or ctx); the
// whole process group is killed then, so nothing outlives the driver.
func run(ctx context.Context, p proc) (int, error) {
	if p.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.stdin, p.stdout, p.stderr
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		return nil
	}
	cmd.WaitDelay = 2 * time.Second
	var feed io.WriteCloser
	if p.feed != nil {
		w, err := cmd.StdinPipe()
		if err != nil {
			return -1, err
		}
		feed = w
	}
	err := cmd.Start()
	if err == nil {
		if feed != nil {
			go p.feed(feed)
		}
		err = cmd.Wait()
	}
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return -1, fmt.Errorf("%s: %w after %s", p.argv[0], errTimeout, p.timeout)
		}
		return -1, fmt.Errorf("%s: %w", p.argv[0], ctx.Err())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}

// capBuffer keeps the first max bytes written to it and counts the rest.
type capBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
			c.over = true
		} else {
			c.buf.Write(p)
		}
	} else if len(p) > 0 {
		c.over = true
	}
	return len(p), nil
}

// lastLine returns the last non-empty line of b, clipped.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return clip(l)
		}
	}
	return ""
}
