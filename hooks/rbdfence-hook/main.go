// Command rbdfence-hook is rbdfence's libvirt qemu hook, installed on every
// KVM host by `install.sh host` as /etc/libvirt/hooks/qemu.d/10-rbdfence (a
// wrapper script that passes --config). libvirtd runs it as
//
//	rbdfence-hook [--config FILE] [--domains REGEX] [--] <domain> <op> <subop> <extra>
//
// with the domain XML on stdin. `prepare begin` claims the VM and fences
// every foreign client of its RBD disks before QEMU starts; see package
// internal/hook for every operation.
//
// Exit codes are rbdfence's (internal/outcome, the README's exit table):
// libvirt stops the start on any non-zero exit of `prepare` and shows the
// one stderr line in its error. A start goes on (0) also when there is
// nothing to do, or when Ceph is unreachable and fence.fail_open is true.
//
// Successful runs print nothing; on failure stderr is exactly one line.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/hook"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, ceph.QuietLibrados()))
}

func run(args []string, stdin io.Reader, stderr io.Writer) int {
	fs := flag.NewFlagSet("rbdfence-hook", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configPath := fs.String("config", "", "config file (default $RBDFENCE_CONFIG or "+config.DefaultPath+")")
	domains := fs.String("domains", "", "act only on domains whose name matches this regular expression")
	showVersion := fs.Bool("version", false, "print the version and the claim format (hoststep.HookVersionLine)")
	if err := fs.Parse(args); err != nil {
		hook.Drain(stdin, hook.ReadTimeout)
		return exitCode(outcome.Errorf(outcome.Usage, "usage: %v", err), stderr)
	}
	if *showVersion {
		// The host step reads this line to know which claim format the
		// hook beside it reads (a start is refused on a host whose hook
		// is older than the front-end's).
		fmt.Fprintln(stderr, hoststep.HookVersionLine(version))
		return outcome.OK.Code()
	}
	inv, err := hook.ParseArgs(fs.Args())
	if err != nil {
		hook.Drain(stdin, hook.ReadTimeout)
		return exitCode(outcome.Errorf(outcome.Usage, "usage: %v", err), stderr)
	}
	opts := hook.Options{ConfigPath: *configPath, Stdin: stdin}
	if *domains != "" {
		re, err := regexp.Compile(*domains)
		if err != nil {
			hook.Drain(stdin, hook.ReadTimeout)
			return exitCode(outcome.Errorf(outcome.Usage, "usage: --domains: %v", err), stderr)
		}
		opts.Domains = re
	}
	// Log lines are held back: on failure libvirt shows the hook's whole
	// stderr as its error, which must be the one line that says why.
	var logs bytes.Buffer
	opts.Log = hook.NewLogger(&logs, true)
	err = hook.Run(context.Background(), inv, opts)
	if err == nil {
		_, _ = stderr.Write(logs.Bytes())
	}
	return exitCode(err, stderr)
}

// exitCode maps an error to its exit code (internal/outcome) and prints it
// as one line.
func exitCode(err error, stderr io.Writer) int {
	if err != nil {
		fmt.Fprintln(stderr, "rbdfence: "+strings.Join(strings.Fields(err.Error()), " "))
	}
	return outcome.Code(err)
}
