// Command restore-rbdfence is the VMM local restore action for KVM
// (VM_MAD ARGUMENTS "-l restore=restore-rbdfence"): it runs rbdfence's start
// check for the VM and then exactly what the normal restore does, the remote
// <remote_dir>/vmm/kvm/restore on the host, relaying its output.
//
//	restore-rbdfence <checkpoint> <host> <deploy_id> <vmid> <host>   (stdin: base64 driver action XML)
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
		return run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	})
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return frontend.RunAction(ctx, frontend.Restore, args, stdin, stdout, stderr)
}
