// Command prestart runs rbdfence's start check for one OpenNebula VM from
// the front-end: it reads the VM from oned (one.vm.info), claims it for
// this deploy and fences every foreign client of its RBD images, on the
// target host over ssh (or locally with opennebula.remote: local). The
// deploy and restore wrappers do the same before the remote action; this
// binary is for admins and other wrappers.
//
//	prestart <vmid> [<host>]
//
// <host> defaults to the VM's host in oned (last HISTORY record).
//
// Exit codes: rbdfence's one table
// (internal/outcome; README: Exit codes).
package main

import (
	"context"
	"io"
	"os"

	"github.com/rbdfence/rbdfence/internal/frontend"
)

func main() {
	frontend.Main(func(ctx context.Context) int { return run(ctx, os.Args[1:], os.Stdout, os.Stderr) })
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	in, err := frontend.ParsePrestartArgs(args)
	var e *frontend.Env
	if err == nil {
		e, err = frontend.LoadEnv("", stdout, stderr)
	}
	if err == nil {
		_, err = frontend.Prestart(ctx, e, in)
	}
	return frontend.Exit(err, stderr)
}
