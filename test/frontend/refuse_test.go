package frontend_test

import (
	"encoding/base64"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/onedsim"
)

// deployVM runs the deploy wrapper for vm (seq) on host as oned would.
func (f *fe) deployVM(vm, seq int, host string, specs []diskSpec) result {
	f.t.Helper()
	local, _, domain := f.deployFiles(vm, seq, specs)
	return f.run(f.vmm("deploy-rbdfence"), base64.StdEncoding.EncodeToString([]byte(domain)), local, host, fmt.Sprint(vm), host)
}

// wantRefused checks a refused start: exit code, one plain line that
// says what it must, and no remote deploy.
func wantRefused(t *testing.T, f *fe, r result, code int, says ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstderr:\n%s", r.code, code, r.stderr)
	}
	plain := r.plainLines()
	if len(plain) != 1 {
		t.Fatalf("want exactly one plain stderr line (the VM's ERROR), got %d:\n%s", len(plain), r.stderr)
	}
	// oned shows the line on the VM and keeps its first 100 characters
	// (VirtualMachine.cc:3092-3097 of 7.4.0): no "VM <id>: ", the
	// headline ("rbdfence ...") first.
	if strings.HasPrefix(plain[0], "VM ") {
		t.Errorf("error line %q starts with the VM", plain[0])
	}
	for _, s := range says {
		if strings.HasPrefix(s, "rbdfence ") && !strings.HasPrefix(plain[0], s) {
			t.Errorf("error line %q does not start with %q", plain[0], s)
		} else if !strings.Contains(plain[0], s) {
			t.Errorf("error line %q does not say %q", plain[0], s)
		}
	}
	if r.stdout != "" {
		t.Errorf("stdout %q: no DEPLOY_ID may be printed", r.stdout)
	}
	if n := len(f.calls("deploy")); n != 0 {
		t.Fatalf("the remote deploy ran %d time(s) after a refusal", n)
	}
	for _, secret := range []string{"AQ", "opennebula"} {
		if strings.Contains(r.stderr, secret) {
			t.Errorf("stderr contains %q:\n%s", secret, r.stderr)
		}
	}
}

// vmWithCeph registers a VM whose single disk reaches Ceph through the
// given monitor and keyring (images created only when they can be).
func (f *fe) vmWithCeph(host, mon, keyring string) (int, []diskSpec) {
	f.t.Helper()
	vm := newVMID()
	d := onedsim.Disk{ID: 0, ImageID: vm * 10, Persistent: true, CephHost: mon, CephKey: keyring}
	if err := f.sim.Put(onedsim.VM{ID: vm, Host: host, HostID: 1, Seq: 0, Disks: []onedsim.Disk{d}}); err != nil {
		f.t.Fatal(err)
	}
	return vm, []diskSpec{{kind: "persistent", image: fmt.Sprintf("one/one-%d", d.ImageID), disk: d}}
}

func TestRefusals(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B

	t.Run("ceph unreachable", func(t *testing.T) {
		vm, specs := f.vmWithCeph(a.Name, f.hs.BridgeIP+":6999", f.ceph.Keyring)
		r := f.deployVM(vm, 0, a.Name, specs)
		wantRefused(t, f, r, 3, "rbdfence: refused, nothing fenced: ")
		// host.yaml: timeouts.connect 5s; the whole refusal stays well
		// within the front-end's timeouts.total (90s).
		if r.took > 30*time.Second {
			t.Fatalf("refusal took %s", r.took)
		}
	})

	t.Run("bad key", func(t *testing.T) {
		key, err := exec.Command("ceph-authtool", "--gen-print-key").Output()
		if err != nil {
			t.Fatal(err)
		}
		bad := f.path("bad.keyring")
		f.write(bad, fmt.Sprintf("[client.libvirt]\n\tkey = %s\n", strings.TrimSpace(string(key))), 0o600)
		vm, specs := f.vmWithCeph(a.Name, f.ceph.Mon, bad)
		f.createImage(specs[0].image)
		r := f.deployVM(vm, 0, a.Name, specs)
		wantRefused(t, f, r, 3, "rbdfence: refused, nothing fenced: ")
		if strings.Contains(r.stderr, strings.TrimSpace(string(key))) {
			t.Fatal("the key is in the error output")
		}
		if r.took > 30*time.Second {
			t.Fatalf("refusal took %s", r.took)
		}
	})

	t.Run("claimed by another host", func(t *testing.T) {
		vm, specs := f.newVM(b.Name, 5, "clone", "volatile")
		if r := f.deployVM(vm, 5, b.Name, specs); r.code != 0 {
			t.Fatalf("first deploy on %s: exit %d\n%s", b.Name, r.code, r.stderr)
		}
		calls := len(f.calls("deploy"))
		sessions := len(f.sshCalls())
		// The same deploy (#5) started again, on host A: refused, naming B.
		r := f.deployVM(vm, 5, a.Name, specs)
		if len(f.calls("deploy")) != calls {
			t.Fatal("the remote deploy ran for the refused start")
		}
		// The refusal came from the one session the deploy shares with
		// the start step, which ran nothing after it.
		if n := len(f.sshCalls()) - sessions; n != 1 {
			t.Errorf("the refused deploy opened %d ssh sessions, want 1", n)
		}
		if r.code != 4 || len(r.plainLines()) != 1 || !strings.Contains(r.plainLines()[0], "claimed by host "+b.Name) {
			t.Fatalf("exit %d, want 4 and one line naming %s:\n%s", r.code, b.Name, r.stderr)
		}
		// What oned keeps of it (the first 100 characters of "DEPLOY: " and
		// the line) says it all.
		if l := "DEPLOY: " + r.plainLines()[0]; !strings.HasPrefix(l[:min(len(l), 100)], "DEPLOY: rbdfence: refused, nothing fenced: deploy #5 claimed by "+b.Name+"; rbdfence claim show") {
			t.Errorf("what oned keeps of the refusal: %q", l[:min(len(l), 100)])
		}
		// An older deploy (#4) is refused too: never fence a newer instance.
		r = f.deployVM(vm, 4, a.Name, specs)
		if r.code != 4 || len(r.plainLines()) != 1 || !strings.Contains(r.plainLines()[0], b.Name) || !strings.Contains(r.plainLines()[0], "#5") {
			t.Fatalf("older deploy: exit %d:\n%s", r.code, r.stderr)
		}
		if c := f.claim(vm); c.Host != b.Name || c.Seq != 5 {
			t.Fatalf("the refused starts changed the claim: %+v", c)
		}
	})

	t.Run("fail open", func(t *testing.T) {
		f.extra = "fence:\n  fail_open: true\n"
		f.writeConfig()
		defer func() { f.extra = ""; f.writeConfig() }()
		vm, specs := f.vmWithCeph(a.Name, f.hs.BridgeIP+":6999", f.ceph.Keyring)
		r := f.deployVM(vm, 0, a.Name, specs)
		if r.code != 0 || strings.TrimSpace(r.stdout) != deployID {
			t.Fatalf("fail_open: exit %d stdout %q\n%s", r.code, r.stdout, r.stderr)
		}
		if !strings.Contains(r.stderr, "ERROR: "+fmt.Sprint(vm)+" rbdfence: ") || !strings.Contains(r.stderr, "fence.fail_open") {
			t.Fatalf("fail_open must be logged as an ERROR line:\n%s", r.stderr)
		}
		if len(r.plainLines()) != 0 {
			t.Fatalf("plain lines on success: %q", r.plainLines())
		}
	})
}
