// Command migrate-rbdfence is the VMM local migrate action for KVM
// (VM_MAD ARGUMENTS "-l migrate=migrate-rbdfence"): it protects a live
// migration whatever the system datastore's TM. It opens the handover
// window, runs the real migration (the remote <remote_dir>/vmm/kvm/migrate
// on the source, as the driver would), then closes the window: on success
// it fences lock owners not on the destination, on failure the copy on the
// destination. Installed as "<script>-rbdfence" it wraps the admin's own
// local migrate script <script> (e.g. migrate_local) instead.
//
//	migrate-rbdfence <deploy_id> <dst_host> <src_host> <vmid> <src_host>   (stdin: base64 driver action XML)
//
// Exit codes: 0 migrated; the migration's own code when it failed;
// 2 bad arguments, input or config; 3 the window could not be opened
// (Ceph, ssh or oned); 4 refused by the VM's claim. With 2-4 the migration
// was not started.
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
	return frontend.RunAction(ctx, func(ctx context.Context, e *frontend.Env, args []string, stdin io.Reader) error {
		return frontend.MigrateVMM(ctx, e, self, args, stdin)
	}, args, stdin, stdout, stderr)
}
