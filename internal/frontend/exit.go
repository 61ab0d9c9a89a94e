package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rbdfence/rbdfence/internal/outcome"
)

// Exit maps a driver's error to its exit code (internal/outcome) and writes
// the one stderr line oned shows: every driver main ends here. A wrapped action's own
// failure (*ExitError) keeps its code; its stderr was relayed as it came.
func Exit(err error, stderr io.Writer) int {
	var (
		fe *Error
		xe *ExitError
	)
	switch {
	case err == nil:
	case errors.As(err, &xe):
		return xe.Code
	case errors.As(err, &fe):
		fmt.Fprintln(stderr, fe.Msg)
	default:
		fmt.Fprintln(stderr, "rbdfence: "+err.Error())
	}
	return outcome.Code(err)
}

// Main runs a driver's body with SIGTERM/SIGINT cancelling its context and
// exits with the code it returns.
func Main(body func(ctx context.Context) int) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := body(ctx)
	stop()
	os.Exit(code)
}

// Action is a driver action: Deploy, Restore or (with its path) MigrateVMM.
type Action func(ctx context.Context, e *Env, args []string, stdin io.Reader) error

// RunAction is a VMM action's whole run: load the config, do the action,
// map the result to the exit code.
//
// stderr is written when the action ends, the refusal's plain line first:
// oned reads it all at the end anyway. 7.x files the "INFO: <vmid> ..."
// lines in the VM log and shows the other lines as the VM's ERROR
// (DriverExecHelper.rb:167-207 of release-7.4.0); 6.x shows the whole
// stderr as the ERROR (CommandManager.rb:97-101 of release-6.10.5), which
// thus starts with the reason, and drops the stderr of a success (the
// event in the VM's user template is the durable record there).
func RunAction(ctx context.Context, act Action, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	var lines bytes.Buffer
	e, err := LoadEnv("", stdout, &lines)
	if err == nil {
		err = act(ctx, e, args, stdin)
	}
	var plain bytes.Buffer
	code := Exit(err, &plain)
	_, _ = stderr.Write(plain.Bytes())
	_, _ = stderr.Write(lines.Bytes())
	return code
}
