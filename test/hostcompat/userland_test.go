package hostcompat_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// userland returns a copy, in the test's directory, of the cached Debian
// suite userland (test/hostcompat/userland.sh makes the cache once).
func userland(t *testing.T, r *rig, suite string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", filepath.Join(testenv.Root(), "test/hostcompat/userland.sh"), suite).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("test/hostcompat/userland.sh %s: %v\n%s", suite, err, stderr)
	}
	root := r.path("userland-" + suite)
	run(t, "cp", "-a", strings.TrimSpace(string(out)), root)
	return root
}

// TestOlderUserland (issue 20 item 1): a Debian 11 host (glibc 2.31,
// Ceph 14's librados2), reached over ssh, where onehost sync put this
// front-end's host binary. The loader refuses it before it reads a byte;
// the first contact says so in one line naming the host, what the binary
// needs, what the host has and the fix, for each way it cannot start
// (glibc too old, librados.so.2 missing, another architecture), and
// nothing runs there. Doctor on the front-end says the same of that host.
func TestOlderUserland(t *testing.T) {
	r := newRig(t)
	root := userland(t, r, "bullseye")
	h := r.addHost("rbdf-bullseye", root, true)
	r.sync(h, testenv.Bin(t, "rbdfence"))
	r.write("hostremotes/vmm/kvm/deploy", "#!/bin/sh\necho ran >> "+r.path("deploy-ran")+"\n", 0o755)
	cfg := r.frontendConfig("rbdfence.yaml", "", "")
	vm := newVMID()
	if err := r.sim.Put(onedsim.VM{ID: vm, Host: h.name, HostID: 1, State: onedsim.StateActive, LCMState: onedsim.LCMBoot,
		Disks: []onedsim.Disk{{ID: 0, ImageID: vm, Persistent: true, CephHost: "127.0.0.1:6789"}}}); err != nil {
		t.Fatal(err)
	}
	fix := "; fix: install the rbdfence and rbdfence-host packages built for Debian GNU/Linux 11 (bullseye) on rbdf-bullseye: the host step then runs its /usr/bin/rbdfence instead of the synced binary (README: Host platforms)"
	for _, tc := range []struct {
		name    string
		prepare func()
		why     string // what the loader or the shell said, shortened
		has     string
	}{
		{"glibc too old", func() {}, "GLIBC_2.3", "rbdf-bullseye has Debian GNU/Linux 11 (bullseye), x86_64, glibc 2.31, librados2 14.2.21-1, no librbd.so.1"},
		{"librados.so.2 missing", func() {
			run(t, "chroot", root, "dpkg", "--purge", "--force-depends", "librados2")
		}, "librados.so.2 not found", "rbdf-bullseye has Debian GNU/Linux 11 (bullseye), x86_64, glibc 2.31, no librados.so.2, no librbd.so.1"},
		{"another architecture", func() {
			// An aarch64 ELF header: exec says "Exec format error".
			elf := append([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"), make([]byte, 200)...)
			if err := os.WriteFile(h.at(syncedBinary), elf, 0o755); err != nil {
				t.Fatal(err)
			}
		}, "exec format error: built for another architecture", "rbdf-bullseye has Debian GNU/Linux 11 (bullseye), x86_64, glibc 2.31, no librados.so.2, no librbd.so.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.prepare()
			args, stdin := deployment(r, vm, h, fmt.Sprintf("one/one-%d", vm), "127.0.0.1:6789")
			res := runBin(t, cfg, testenv.Bin(t, "deploy-rbdfence"), stdin, args...)
			p := res.plain()
			head := fmt.Sprintf("rbdfence: refused, nothing fenced: rbdfence cannot start on rbdf-bullseye; fix in the VM log | host rbdf-bullseye cannot start rbdfence's host binary %s (%s", syncedBinary, tc.why)
			if res.code != 3 || len(p) != 1 || !strings.HasPrefix(p[0], head) || !strings.Contains(p[0], "; "+tc.has+"; ") || !strings.HasSuffix(p[0], fix) {
				t.Fatalf("exit %d, plain lines %q\nwant one line %q ... %q ... %q\nstderr:\n%s", res.code, p, head, tc.has, fix, res.stderr)
			}
			if tc.name != "another architecture" && !strings.Contains(p[0], "): it needs x86_64, glibc 2.") {
				t.Errorf("the line does not say which glibc the binary needs: %q", p[0])
			}
			if _, err := os.Stat(r.path("deploy-ran")); err == nil {
				t.Fatal("the remote deploy ran")
			}
			// doctor on the front-end checks every KVM host the same way.
			d := runBin(t, cfg, testenv.Bin(t, "rbdfence"), "", "doctor", "--role", "frontend", "--root", r.path("no-frontend-files"))
			line := ""
			for _, l := range strings.Split(d.stdout, "\n") {
				if strings.Contains(l, " host rbdf-bullseye ") {
					line = l
				}
			}
			t.Logf("deploy-rbdfence: exit %d: %s", res.code, p[0])
			t.Logf("doctor: %s", line)
			if !strings.HasPrefix(line, "FAIL  host rbdf-bullseye cannot start rbdfence's host binary") || !strings.Contains(line, tc.has) ||
				!strings.HasSuffix(line, fix) {
				t.Fatalf("doctor's line for the host: %q\n%s", line, d.stdout)
			}
		})
	}
}
