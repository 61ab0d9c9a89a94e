// Command premigrate wraps the Ceph TM's premigrate (kept as
// premigrate.rbdfence-orig next to it, always run with the same arguments and
// stdin). It opens the live-migration handover window in the VM's claim (fences
// nothing), then runs the original premigrate. If the window cannot be
// opened it exits non-zero so that oned aborts the migration: without the
// window the destination would fence the running source.
//
//	premigrate <src_host> <dst_host> <remote_system_dir> <vmid> <sys_dsid> [caller_tm]   (stdin: base64 VM XML)
//
// Exit codes: the original's; 1 incomplete fence or original missing;
// 2 bad arguments, input or config; 3 the step could not be done (Ceph,
// ssh or oned); 4 refused by the VM's claim.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rbdfence/rbdfence/internal/frontend"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, frontend.SelfPath(os.Args[0]), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, self string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e, err := frontend.LoadEnv("", stdout, stderr)
	if err != nil {
		// rbdfence cannot act without its config, but the original must run.
		e = frontend.BrokenEnv(err, stdout, stderr)
	}
	err = frontend.Migrate(ctx, e, "premigrate", self, args, stdin)
	return frontend.Exit(err, stderr)
}
