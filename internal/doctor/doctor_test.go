package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/config"
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

// TestConfigCheck: the config line says whether the file exists; without it,
// which defaults apply (never "is valid" for a file that is not there).
func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	present := filepath.Join(dir, "rbdfence.yaml")
	os.WriteFile(present, []byte("ceph:\n  user: admin\n"), 0o644)
	for _, tc := range []struct {
		name, path string
		err        error
		ok         bool
		want       []string
		not        string
	}{
		{"present", present, nil, true, []string{present + " is valid"}, "absent"},
		{"absent", filepath.Join(dir, "none.yaml"), nil, true, []string{"none.yaml is absent: built-in defaults apply", "ceph.user libvirt", "ceph.keyring /etc/ceph/ceph.client.libvirt.keyring", "monitors from the default ceph.conf", "fence.expire 7d", "fence.fail_open false"}, "is valid"},
		{"invalid", present, errors.New("config x: fence.expire: bad duration"), false, []string{"fence.expire"}, "is valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Root: t.TempDir(), ConfigPath: tc.path, ConfigErr: tc.err}
			if tc.err == nil {
				o.Config = config.Default()
			}
			r := Run(t.Context(), o)[0]
			if r.Check != "config" || r.OK != tc.ok {
				t.Fatalf("%+v", r)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Detail, w) {
					t.Errorf("detail %q does not say %q", r.Detail, w)
				}
			}
			if strings.Contains(r.Detail, tc.not) {
				t.Errorf("detail %q says %q", r.Detail, tc.not)
			}
		})
	}
}
