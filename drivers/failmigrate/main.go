// Command failmigrate wraps the Ceph TM's failmigrate (kept as
// failmigrate.rbdfence-orig next to it, always run with the same arguments and
// stdin). It closes the handover window on the destination and fences every client
// of the VM's images there (a copy that "failed" but runs), keeping the
// source, then runs the original failmigrate. A non-zero code of the
// original wins; otherwise rbdfence's failure exits non-zero.
//
//	failmigrate <src_host> <dst_host> <remote_system_dir> <vmid> <sys_dsid> [caller_tm]   (stdin: base64 VM XML)
//
// Exit codes: the wrapped action's own code when it failed, else rbdfence's one table
// (internal/outcome; README: Exit codes).
package main

import (
	"context"
	"io"
	"os"

	"github.com/rbdfence/rbdfence/internal/frontend"
)

func main() {
	frontend.Main(func(ctx context.Context) int {
		return run(ctx, frontend.SelfPath(os.Args[0]), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	})
}

func run(ctx context.Context, self string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return frontend.RunMigrate(ctx, "failmigrate", self, args, stdin, stdout, stderr)
}
