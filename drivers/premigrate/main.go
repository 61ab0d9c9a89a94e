// Command premigrate wraps the Ceph TM's premigrate (kept as
// premigrate.rbdfence-orig next to it, always run with the same arguments and
// stdin). It opens the live-migration handover window in the VM's claim (fences
// nothing), then runs the original premigrate. If the window cannot be
// opened it exits non-zero so that oned aborts the migration: without the
// window the destination would fence the running source.
//
//	premigrate <src_host> <dst_host> <remote_system_dir> <vmid> <sys_dsid> [caller_tm]   (stdin: base64 VM XML)
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
	return frontend.RunMigrate(ctx, "premigrate", self, args, stdin, stdout, stderr)
}
