// Command attach-rbdfence is the VMM local attach_disk action for KVM
// (VM_MAD ARGUMENTS "-l attach_disk=attach-rbdfence"): before a hot-attached
// RBD disk reaches the host, it fences every foreign client of the image
// under the VM's claim, then runs exactly what the normal action does, the
// remote <remote_dir>/vmm/kvm/attach_disk on the host, and records the VM's
// new client of the image.
//
//	attach-rbdfence <deploy_id> <disk_target_path> <target> <target_index> <drv_message> <vmid> <host>   (stdin: base64 driver action XML)
//
// Exit codes: 0 attached; the remote attach_disk's own code when it
// failed; 1 incomplete fence; 2 bad arguments, input or config; 3 the check
// could not be done (Ceph, ssh or oned); 4 refused by the VM's claim.
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
	return frontend.RunAction(ctx, frontend.Attach, args, stdin, stdout, stderr)
}
