package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckVMMAD(t *testing.T) {
	for _, tc := range []struct {
		name, conf string
		ok         bool
	}{
		{"enabled", `VM_MAD = [
    NAME = "kvm",
    ARGUMENTS = "-t 15 -r 0 kvm -l deploy=deploy-rbdfence,restore=restore-rbdfence",
]`, true},
		{"only on another driver", `VM_MAD = [ NAME = "lxc", ARGUMENTS = "-l deploy=deploy-rbdfence,restore=restore-rbdfence" ]
VM_MAD = [ NAME = "kvm", ARGUMENTS = "-t 15 -r 0 kvm" ]`, false},
		{"deploy only", `VM_MAD = [ NAME = "kvm", ARGUMENTS = "-t 15 kvm -l deploy=deploy-rbdfence" ]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.MkdirAll(filepath.Join(root, "etc/one"), 0o755)
			os.WriteFile(filepath.Join(root, "etc/one/oned.conf"), []byte(tc.conf), 0o644)
			r := checkVMMAD(root)
			if r.OK != tc.ok || (!r.OK && r.Fix == "") {
				t.Fatalf("%+v", r)
			}
		})
	}
	if r := checkVMMAD(t.TempDir()); r.OK || !strings.Contains(r.Detail, "cannot read") {
		t.Fatalf("missing oned.conf: %+v", r)
	}
}

func TestCheckHook(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "etc/libvirt/hooks/qemu.d")
	os.MkdirAll(dir, 0o755)
	if r := checkHook(root); r.OK || !strings.Contains(r.Fix, "install.sh host") {
		t.Fatalf("missing hook: %+v", r)
	}
	bin := filepath.Join(root, "usr/local/libexec/rbdfence/rbdfence-hook")
	os.MkdirAll(filepath.Dir(bin), 0o755)
	os.WriteFile(filepath.Join(dir, "10-rbdfence"), []byte("#!/bin/sh\nexec "+bin+" --config /etc/one/rbdfence.yaml -- \"$@\"\n"), 0o755)
	if r := checkHook(root); r.OK || !strings.Contains(r.Detail, "missing") {
		t.Fatalf("wrapper without binary: %+v", r)
	}
	os.WriteFile(bin, []byte("x"), 0o755)
	if r := checkHook(root); !r.OK {
		t.Fatalf("installed: %+v", r)
	}
}
