package testenv

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Result is one run of a program: its exit code and what it printed.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run runs prog with args and stdin, env added to the test's own
// environment, for at most timeout. A program that cannot start or that
// panics fails the test; any exit code (-1: killed at the timeout) is
// the caller's to judge.
func Run(t T, timeout time.Duration, env []string, stdin, prog string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.Code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", prog, args, err)
	}
	if strings.Contains(r.Stderr, "panic: ") || strings.Contains(r.Stderr, "goroutine ") {
		t.Fatalf("%s %v panicked:\n%s", prog, args, r.Stderr)
	}
	return r
}
