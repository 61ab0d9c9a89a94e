// Command restore-rbdfence is the VMM local restore action for KVM
// (VM_MAD ARGUMENTS "-l restore=restore-rbdfence"): it runs rbdfence's start
// check for the VM and then exactly what the normal restore does, the remote
// <remote_dir>/vmm/kvm/restore on the host, relaying its output.
//
//	restore-rbdfence <checkpoint> <host> <deploy_id> <vmid> <host>   (stdin: base64 driver action XML)
//
// Exit codes: 0 restored; the remote restore's own code when it failed;
// 1 incomplete fence; 2 bad arguments, input or config; 3 the check could
// not be done (Ceph, ssh or oned); 4 refused by the VM's claim.
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
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e, err := frontend.LoadEnv("", stdout, stderr)
	if err == nil {
		err = frontend.Restore(ctx, e, args, stdin)
	}
	return frontend.Exit(err, stderr)
}
