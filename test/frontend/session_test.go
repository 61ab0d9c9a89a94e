package frontend_test

import (
	"fmt"
	"testing"
	"time"
)

// waitSessionGone waits until no remote start script of this test (sh -c
// ... rbdfence-start ..., with a host config in this test's directory)
// runs any more: a remote shell that outlives its ssh client is seen here.
func (f *fe) waitSessionGone() {
	f.t.Helper()
	f.waitGone("the remote start script, a minute after the front-end gave up,", []byte("\x00rbdfence-start\x00"), time.Minute)
}

// TestSessionStartOnlyWhileWaited (issue 18 item 13): the one-session
// start's answer reaches the front-end only after the step's budget (here
// the ssh client's output is held back 15 s, as by a slow link; the budget
// is timeouts.ssh 2s + timeouts.total 3s + 5s). The front-end gives up:
// the start is refused (exit 3, one plain line) and it kills its ssh. The
// host's shell outlives the ssh client (no pty, no SIGHUP) and its step
// had admitted the start; still the remote deploy never runs, because it
// waits for the front-end's go, which only an answer in time gets. On
// 0300e58 the deploy ran on the host while oned was told it failed.
func TestSessionStartOnlyWhileWaited(t *testing.T) {
	f := setup(t)
	f.sshTimeout, f.totalTimeout = "2s", "3s"
	f.writeConfig()
	f.write(f.path("ssh"), fmt.Sprintf("#!/bin/sh\n{ printf '%%s' \"$*\" | tr '\\n' ' '; echo; } >> %s\nssh -F %s \"$@\" | { sleep 15; cat; }\n", f.path("ssh.log"), f.hs.SSHConfig), 0o755)
	a := f.hs.A
	vm, specs := f.newVM(a.Name, 0, "persistent")
	r := f.deployVM(vm, 0, a.Name, specs)
	f.waitSessionGone()
	wantRefused(t, f, r, 3, "rbdfence: refused, fencing unknown: ", "did not answer in", "did not answer within")
	if r.took > 40*time.Second {
		t.Errorf("the refusal took %s", r.took)
	}
}
