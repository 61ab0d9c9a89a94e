package frontend_test

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSSHHopFails: the host cannot be reached over ssh. The start is refused
// (fail closed) with one plain line, within the ssh timeout, and the remote
// deploy never runs; a failmigrate whose destination cannot be reached
// reports it and still runs the original TM script.
func TestSSHHopFails(t *testing.T) {
	f := setup(t)
	const dead = "nosuchhost.invalid"
	vm, specs := f.newVM(dead, 0, "persistent")

	r := f.deployVM(vm, 0, dead, specs)
	wantRefused(t, f, r, 3, fmt.Sprintf("VM %d", vm))
	if r.took > 30*time.Second {
		t.Fatalf("refusal took %s", r.took)
	}

	args := []string{f.hs.A.Name, dead, fmt.Sprintf("/var/lib/one//datastores/0/%d", vm), fmt.Sprint(vm), "0"}
	r = f.tmRun("failmigrate", f.vmXML64(vm), args...) // checks the original ran, same args and stdin
	if r.code == 0 {
		t.Fatalf("failmigrate with an unreachable destination must not report success:\n%s", r.stderr)
	}
	if !strings.Contains(r.stderr, fmt.Sprintf("VM %d", vm)) || !strings.Contains(r.stderr, dead) {
		t.Fatalf("failmigrate must say which VM and host it could not reach:\n%s", r.stderr)
	}
}
