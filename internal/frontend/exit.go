package frontend

import (
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

// RunAction is a VMM wrapper's whole run: load the config, do the action,
// map the result to the exit code.
func RunAction(ctx context.Context, act Action, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e, err := LoadEnv("", stdout, stderr)
	if err == nil {
		err = act(ctx, e, args, stdin)
	}
	return Exit(err, stderr)
}
