// Command sshwarm-rbdfence is an oned state hook, created with `onehook
// create` from packaging/files/prolog_ssh.hook (on PROLOG: while PROLOG
// copies a VM's disks it opens rbdfence's own ssh master to the VM's host)
// and packaging/files/migrate_ssh.hook (on MIGRATE: while a live
// migration's tm premigrate runs, to its source and destination), so that
// the deploy or migrate action that follows does not open connections of
// its own. It fences nothing and touches no claim; it does nothing where
// oneadmin's ssh config already multiplexes (the packages' does).
//
//	sshwarm-rbdfence   (stdin: the VM's base64 XML, oned's $TEMPLATE)
//
// Exit codes: rbdfence's one table (internal/outcome; README: Exit codes).
package main

import (
	"context"
	"os"

	"github.com/rbdfence/rbdfence/internal/frontend"
)

func main() {
	frontend.Main(func(ctx context.Context) int {
		return frontend.RunAction(ctx, frontend.WarmSSH, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	})
}
