// Command postmigrate wraps the Ceph TM's postmigrate (kept as
// postmigrate.rbdfence-orig next to it, always run with the same arguments and
// stdin). It closes the handover window on the destination, fences a lock owner
// that is not on the destination and records the new instance, then runs
// the original postmigrate. Its exit code is always the original's: the VM
// already runs on the destination; rbdfence's failure is logged.
//
//	postmigrate <src_host> <dst_host> <remote_system_dir> <vmid> <sys_dsid> [caller_tm]   (stdin: base64 VM XML)
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
	return frontend.RunMigrate(ctx, "postmigrate", self, args, stdin, stdout, stderr)
}
