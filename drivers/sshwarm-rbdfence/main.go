// Command sshwarm-rbdfence is an oned state hook on PROLOG, created from
// packaging/files/prolog_ssh.hook (`onehook create`): while PROLOG copies a
// VM's disks it opens rbdfence's own ssh master to the VM's host, so that
// the deploy action that follows does not open a connection of its own.
// It fences nothing and touches no claim; it does nothing where oneadmin's
// ssh config already multiplexes (the packages' does).
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
