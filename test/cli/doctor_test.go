package cli_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/test/testenv"
)

const onedConf = `# oned.conf (excerpt)
VM_MAD = [
    NAME           = "kvm",
    SUNSTONE_NAME  = "KVM",
    EXECUTABLE     = "one_vmm_exec",
    ARGUMENTS      = "-t 15 -r 0 kvm",
    DEFAULT        = "vmm_exec/vmm_exec_kvm.conf",
    TYPE           = "kvm"
]
`

// installed installs both parts into a scratch root, as an operator would.
func installed(t *testing.T, cfg string) string {
	t.Helper()
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "etc/one"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/one/oned.conf"), []byte(onedConf), 0o644)
	for _, d := range []string{"var/lib/one/remotes/tm/ceph", "var/lib/one/remotes/vmm/kvm"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	for _, op := range []string{"premigrate", "postmigrate", "failmigrate"} {
		os.WriteFile(filepath.Join(root, "var/lib/one/remotes/tm/ceph", op), []byte("#!/bin/sh\nexit 0\n"), 0o755)
	}
	bin := filepath.Dir(testenv.Bin(t, "rbdfence"))
	testenv.Bin(t, "rbdfence-hook")
	for _, args := range [][]string{{"frontend", "--prefix", root, "--apply"}, {"host", "--prefix", root, "--config", cfg}} {
		cmd := exec.Command("bash", append([]string{filepath.Join(testenv.Root(), "install.sh")}, args...)...)
		cmd.Env = append(os.Environ(), "RBDFENCE_BIN="+bin)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("install.sh %v: %v\n%s", args, err, out)
		}
	}
	// onehost sync --force: the host binary where the hosts run it.
	b, err := os.ReadFile(filepath.Join(root, "var/lib/one/remotes/rbdfence/rbdfence-host"))
	if err == nil {
		os.MkdirAll(filepath.Join(root, "var/tmp/one/rbdfence"), 0o755)
		err = os.WriteFile(filepath.Join(root, "var/tmp/one/rbdfence/rbdfence-host"), b, 0o755)
	}
	if err != nil {
		t.Fatalf("onehost sync stand-in: %v", err)
	}
	return root
}

func TestDoctor(t *testing.T) {
	c := testenv.StartCeph(t)
	sim, cfg, _ := withOned(t, c, "doctorpass")
	dir := t.TempDir()
	b, _ := os.ReadFile(cfg)
	good := string(b)
	root := installed(t, cfg)

	r := rbdfence(t, "", "doctor", "--config", cfg, "--root", root, "--role", "all")
	if r.code != 0 || strings.Contains(r.stdout, "FAIL") {
		t.Fatalf("doctor on a good install: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, check := range []string{"config", "ceph ", "ceph-read", "ceph-blocklist", "libvirt-hook", "vmm-wrappers", "tm-ceph", "host-binary", "vm-mad", "oned", "ssh-hooks", "host-fences"} {
		if !strings.Contains(r.stdout, "PASS  "+check) {
			t.Errorf("no PASS line for %q:\n%s", check, r.stdout)
		}
	}
	if strings.Contains(r.stdout+r.stderr, "doctorpass") {
		t.Fatal("doctor printed the oned password")
	}

	fails := func(name, cfgText string, mutate func(), want ...string) {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "rbdfence.yaml")
			os.WriteFile(p, []byte(cfgText), 0o600)
			if mutate != nil {
				mutate()
			}
			r := rbdfence(t, "", "doctor", "--config", p, "--root", root, "--role", "all")
			if r.code != 1 {
				t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
			}
			for _, w := range want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("want %q in:\n%s", w, r.stdout)
				}
			}
		})
	}
	badKey := filepath.Join(dir, "bad.keyring")
	os.WriteFile(badKey, []byte("[client.libvirt]\n\tkey = AQBnP0hlAAAAABAAq8bD4W0KQd1Iem1Hh7mYgg==\n"), 0o600)
	fails("broken keyring", strings.Replace(good, c.Keyring, badKey, 1), nil, "FAIL  ceph ", "fix: set ceph.mon_host, ceph.user and ceph.keyring in")
	fails("unreachable oned", strings.Replace(good, sim.URL(), "http://127.0.0.1:1/RPC2", 1), nil, "FAIL  oned", "fix: check opennebula.endpoint")
	fails("missing hook", good, func() { os.Remove(filepath.Join(root, "etc/libvirt/hooks/qemu.d/10-rbdfence")) }, "FAIL  libvirt-hook", "install.sh host")
}
