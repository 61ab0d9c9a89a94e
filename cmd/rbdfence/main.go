// Command rbdfence is the operator's CLI and the host-side step of the
// OpenNebula drivers: it finds every client of a VM's RBD images and fences
// the foreign ones. Run "rbdfence help" for the verbs and exit codes,
// "rbdfence VERB --help" for a verb's flags.
//
// Flags are GNU style (github.com/spf13/pflag, imported as flag: the same
// FlagSet methods as the standard library's): --long names, -j for --json,
// -v for --verbose, -h/--help on every verb, flags before or after
// positional arguments, and the common flags also before the verb.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func (e *usageError) Outcome() outcome.Kind { return outcome.Usage }

func usagef(format string, a ...any) error { return &usageError{fmt.Sprintf(format, a...)} }

var errFound = outcome.Errorf(outcome.Found, "foreign clients found")

// runFunc runs one verb with the arguments after it.
type runFunc func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error

// verbs maps each verb to its run function; its help is in help.go.
var verbs = map[string]runFunc{
	"check": func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
		return runCheck(ctx, args, stdout, stderr, true)
	},
	"fence": func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
		return runCheck(ctx, args, stdout, stderr, false)
	},
	"host": runHost,
	"spool": func(ctx context.Context, args []string, stdin io.Reader, stdout, _ io.Writer) error {
		return runSpool(ctx, args, stdin, stdout)
	},
	"claim": func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
		return runClaim(ctx, args, stdout, stderr)
	},
	"events": func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
		return runEvents(ctx, args, stdout, stderr)
	},
	"blocklist": func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
		return runBlocklist(ctx, args, stdout, stderr)
	},
	"unfence":    runUnfence,
	"fence-host": runFenceHost,
	"doctor": func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
		return runDoctor(ctx, args, stdout, stderr)
	},
	"version": func(_ context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
		if err := parseFlags(flag.NewFlagSet("version", flag.ContinueOnError), args); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "rbdfence", version)
		return nil
	},
}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, ceph.QuietLibrados()))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	globals, args, err := splitGlobals(args)
	if err != nil {
		return exitCode(err, stderr)
	}
	if len(args) == 0 {
		if len(globals) > 0 && isHelpArg(globals[len(globals)-1]) {
			fmt.Fprint(stdout, usage())
			return 0
		}
		if len(globals) > 0 && globals[len(globals)-1] == "--version" {
			fmt.Fprintln(stdout, "rbdfence", version)
			return 0
		}
		fmt.Fprint(stderr, usage())
		return outcome.Usage.Code()
	}
	name, rest := args[0], args[1:]
	if name == "help" {
		return help(rest, stdout, stderr)
	}
	f, ok := verbs[name]
	if !ok {
		return exitCode(usagef("unknown verb %q (verbs: %s; try: rbdfence help)", name, strings.Join(verbNames(), ", ")), stderr)
	}
	// A verb of sub-verbs (claim show, ...) asked for its help.
	if len(rest) > 0 && isHelpArg(rest[0]) && len(subVerbs(name)) > 0 && name != "events" {
		fmt.Fprint(stdout, groupHelp(name))
		return 0
	}
	err = f(ctx, withGlobals(rest, globals), stdin, stdout, stderr)
	var h *helpRequest
	if errors.As(err, &h) {
		fmt.Fprint(stdout, h.text())
		return 0
	}
	return exitCode(err, stderr)
}

// exitCode maps an error to its exit code (internal/outcome) and prints it
// as one line.
func exitCode(err error, stderr io.Writer) int {
	var r interface{ reported() bool }
	if err == nil || errors.Is(err, errFound) || (errors.As(err, &r) && r.reported()) {
		return outcome.Of(err).Code()
	}
	fmt.Fprintln(stderr, "rbdfence: "+strings.Join(strings.Fields(err.Error()), " "))
	return outcome.Of(err).Code()
}
