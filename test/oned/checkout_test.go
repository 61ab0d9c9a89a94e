package oned

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestCheckoutVisibleInMachines (issue 28 item 1): the machines of the
// suite make /run, /tmp, /var/tmp, /var/log and /root their own (lib.sh),
// and install rbdfence from the checkout: a clone under /tmp, under /root
// or in a path with a space must stay where it is inside them
// (keep_checkout, restore_checkout), as fe_ns and host_ns do it.
func TestCheckoutVisibleInMachines(t *testing.T) {
	for _, parent := range []string{"/tmp", "/root", "/var/tmp"} {
		t.Run(parent, func(t *testing.T) {
			dir, err := os.MkdirTemp(parent, "rbdfence checkout ")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(dir) })
			co := filepath.Join(dir, "x y")
			if err := os.MkdirAll(co, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(co, "install.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			script := `set -e
source "$LIB"
CHECKOUT=$CO
keep_checkout
mount -t tmpfs t /run
mount -t tmpfs t /tmp
mount -t tmpfs t /var/tmp
mount -t tmpfs t /root
[ ! -e "$CHECKOUT/install.sh" ] || { echo "the test is wrong: the checkout was not hidden"; exit 1; }
restore_checkout
test -e "$CHECKOUT/install.sh"
echo visible`
			cmd := exec.Command("unshare", "-m", "--propagation", "slave", "bash", "-c", script)
			cmd.Env = append(os.Environ(), "LIB="+filepath.Join(testenv.Root(), "test/oned/lib.sh"), "CO="+co)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "visible") {
				t.Fatalf("checkout %q inside a machine: %v\n%s", co, err, out)
			}
		})
	}
}
