// Package failpoint lets fault tests kill a process at a named point, to
// prove that a crash there leaves a recoverable state. It does nothing unless
// RBDFENCE_FAILPOINT names the point; it is never set in production.
package failpoint

import (
	"os"
	"syscall"
)

// envVar is the variable that arms one failpoint.
const envVar = "RBDFENCE_FAILPOINT"

// Hit kills the process with SIGKILL (no deferred code runs, like a crash or
// the OOM killer) when RBDFENCE_FAILPOINT equals name.
func Hit(name string) {
	if os.Getenv(envVar) == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
