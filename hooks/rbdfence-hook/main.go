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
// Exit codes (libvirt stops the start on any non-zero exit of `prepare` and
// shows the one stderr line in its error):
//
//	0  go on (also: nothing to do, or Ceph unreachable with fence.fail_open)
//	1  the fence did not complete
//	2  bad arguments, config or domain XML
//	3  Ceph unreachable or credentials refused (fail closed)
//	4  refused by the VM's claim (another run, or another host's deploy)
//
// Successful runs print nothing; on failure stderr is exactly one line.
package main

import (
	"bytes"
	"context"
	"errors"
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
)

// Exit codes: see the package doc.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	exitCeph    = 3
	exitRefused = 4
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
	showVersion := fs.Bool("version", false, "print the version")
	if err := fs.Parse(args); err != nil {
		hook.Drain(stdin, hook.ReadTimeout)
		return exitCode(fmt.Errorf("usage: %v", err), stderr)
	}
	if *showVersion {
		fmt.Fprintln(stderr, "rbdfence-hook", version)
		return exitOK
	}
	inv, err := hook.ParseArgs(fs.Args())
	if err != nil {
		hook.Drain(stdin, hook.ReadTimeout)
		return exitCode(fmt.Errorf("usage: %v", err), stderr)
	}
	opts := hook.Options{ConfigPath: *configPath, Stdin: stdin}
	if *domains != "" {
		re, err := regexp.Compile(*domains)
		if err != nil {
			hook.Drain(stdin, hook.ReadTimeout)
			return exitCode(fmt.Errorf("usage: --domains: %v", err), stderr)
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

// exitCode maps an error to its exit code and prints it as one line.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "rbdfence: "+strings.Join(strings.Fields(err.Error()), " "))
	var he *hook.Error
	if !errors.As(err, &he) {
		return exitUsage
	}
	switch he.Kind {
	case hoststep.KindUsage:
		return exitUsage
	case hoststep.KindCeph:
		return exitCeph
	case hoststep.KindRefused:
		return exitRefused
	}
	return exitFailure
}
