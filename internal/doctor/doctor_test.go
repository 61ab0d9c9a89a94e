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
	const ours = "deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence"
	mad := func(name, args string) string {
		return "VM_MAD = [\n    NAME = \"" + name + "\",\n    EXECUTABLE = \"one_vmm_exec\",\n    ARGUMENTS = \"" + args + "\",\n]\n"
	}
	for _, tc := range []struct {
		name, conf, want string
		ok               bool
	}{
		{"enabled", mad("kvm", "-t 15 -r 0 kvm -l "+ours), `"kvm"`, true},
		{"only on another driver", mad("lxc", "lxc -l "+ours) + mad("kvm", "-t 15 -r 0 kvm"), `"kvm" (no rbdfence`, false},
		{"deploy only", mad("kvm", "-t 15 kvm -l deploy=deploy-rbdfence"), "restore, migrate", false},
		// The driver reads only the last -l (one_vmm_exec.rb:1555-1556).
		{"ours then another -l", mad("kvm", "-t 15 kvm -l "+ours+" -l save"), "no rbdfence deploy", false},
		{"abbreviated", mad("kvm", "-t 15 kvm --loc="+ours), `"kvm"`, true},
		// NAME "qemu" runs the same kvm driver (share/etc/oned.conf:488-498).
		{"qemu not covered", mad("kvm", "kvm -l "+ours) + mad("qemu", "-t 15 -r 0 kvm"), `"qemu" (no rbdfence`, false},
		{"no kvm driver", mad("lxc", "lxc"), "no VM_MAD runs the kvm driver", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			os.MkdirAll(filepath.Join(root, "etc/one"), 0o755)
			os.WriteFile(filepath.Join(root, "etc/one/oned.conf"), []byte(tc.conf), 0o644)
			os.MkdirAll(filepath.Join(root, "var/lib/one/remotes/vmm/kvm"), 0o755)
			os.WriteFile(filepath.Join(root, "var/lib/one/remotes/vmm/kvm/migrate-rbdfence"), []byte("x"), 0o755)
			r := checkVMMAD(root, fixes{})
			if r.OK != tc.ok || (!r.OK && r.Fix == "") || !strings.Contains(r.Detail, tc.want) {
				t.Fatalf("%+v", r)
			}
		})
	}
	// A wrapped local migrate script: both it and its wrapper must be there.
	root := t.TempDir()
	vmm := filepath.Join(root, "var/lib/one/remotes/vmm/kvm")
	os.MkdirAll(vmm, 0o755)
	os.MkdirAll(filepath.Join(root, "etc/one"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/one/oned.conf"), []byte(mad("kvm", "kvm -l deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate_local-rbdfence,attach_disk=attach-rbdfence")), 0o644)
	if r := checkVMMAD(root, fixes{}); r.OK || !strings.Contains(r.Detail, "migrate_local-rbdfence") {
		t.Fatalf("missing wrapper: %+v", r)
	}
	os.WriteFile(filepath.Join(vmm, "migrate_local-rbdfence"), []byte("x"), 0o755)
	if r := checkVMMAD(root, fixes{}); r.OK || !strings.Contains(r.Detail, "vmm/kvm/migrate_local") {
		t.Fatalf("missing wrapped script: %+v", r)
	}
	os.WriteFile(filepath.Join(vmm, "migrate_local"), []byte("x"), 0o755)
	if r := checkVMMAD(root, fixes{}); !r.OK {
		t.Fatalf("wrapper and script installed: %+v", r)
	}
	if r := checkVMMAD(t.TempDir(), fixes{}); r.OK || !strings.Contains(r.Detail, "cannot read") {
		t.Fatalf("missing oned.conf: %+v", r)
	}
}

func TestCheckWrappersTMLeftovers(t *testing.T) {
	root := t.TempDir()
	vmm := filepath.Join(root, "var/lib/one/remotes/vmm/kvm")
	tm := filepath.Join(root, "var/lib/one/remotes/tm/ceph")
	os.MkdirAll(vmm, 0o755)
	os.MkdirAll(tm, 0o755)
	for _, f := range []string{"deploy-rbdfence", "restore-rbdfence", "migrate-rbdfence", "attach-rbdfence"} {
		os.WriteFile(filepath.Join(vmm, f), []byte("x"), 0o755)
	}
	byName := func() map[string]Result {
		m := map[string]Result{}
		for _, r := range checkWrappers(root, fixes{}) {
			m[r.Check] = r
		}
		return m
	}
	if r := byName()["vmm-wrappers"]; !r.OK {
		t.Fatalf("vmm-wrappers: %+v", r)
	}
	if r := byName()["tm-ceph"]; !r.OK {
		t.Fatalf("tm-ceph: %+v", r)
	}
	os.WriteFile(filepath.Join(tm, "premigrate.rbdfence-orig"), []byte("x"), 0o755)
	if r := byName()["tm-ceph"]; r.OK || !strings.Contains(r.Detail, "tm/ceph/premigrate") {
		t.Fatalf("leftover wrapper not reported: %+v", r)
	}
	os.Remove(filepath.Join(vmm, "migrate-rbdfence"))
	if r := byName()["vmm-wrappers"]; r.OK || !strings.Contains(r.Detail, "migrate-rbdfence") {
		t.Fatalf("missing migrate action not reported: %+v", r)
	}
}

func TestCheckHook(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "etc/libvirt/hooks/qemu.d")
	os.MkdirAll(dir, 0o755)
	if r := checkHook(root, fixes{}); r.OK || !strings.Contains(r.Fix, "install.sh host") {
		t.Fatalf("missing hook: %+v", r)
	}
	bin := filepath.Join(root, "usr/local/libexec/rbdfence/rbdfence-hook")
	os.MkdirAll(filepath.Dir(bin), 0o755)
	os.WriteFile(filepath.Join(dir, "10-rbdfence"), []byte("#!/bin/sh\nexec "+bin+" --config /etc/one/rbdfence.yaml -- \"$@\"\n"), 0o755)
	if r := checkHook(root, fixes{}); r.OK || !strings.Contains(r.Detail, "missing") {
		t.Fatalf("wrapper without binary: %+v", r)
	}
	os.WriteFile(bin, []byte("x"), 0o755)
	if r := checkHook(root, fixes{}); !r.OK {
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

// TestCheckHostSpool: a host without oned credentials is the expected
// state (never a failure); the spool's waiting events are counted.
func TestCheckHostSpool(t *testing.T) {
	saved := collectorUID
	t.Cleanup(func() { collectorUID = saved })
	collectorUID = func() (int, bool) { return 0, false } // no oneadmin here
	dir := t.TempDir()
	spool := filepath.Join(dir, "spool")
	auth := filepath.Join(dir, "one_auth")
	for _, tc := range []struct {
		name     string
		prepare  func()
		frontend bool
		ok       bool
		want     string
	}{
		{"no spool, no credentials", func() {}, false, true, "no event waiting; no oned credentials here"},
		{"events waiting", func() {
			os.MkdirAll(filepath.Join(spool, "bad"), 0o700)
			os.WriteFile(filepath.Join(spool, "a.json"), []byte("{}"), 0o600)
			os.WriteFile(filepath.Join(spool, "b.json"), []byte("{}"), 0o600)
			os.WriteFile(filepath.Join(spool, ".tmp-c.json-1"), []byte("{}"), 0o600)
		}, false, true, "2 event(s) waiting in " + spool},
		{"credentials on a host", func() { os.WriteFile(auth, []byte("oneadmin:x\n"), 0o600) }, false, true, "discouraged"},
		{"credentials on an all-in-one front-end", func() {}, true, true, "2 event(s) waiting"},
		{"root's files in a oneadmin host's spool", func() {
			collectorUID = func() (int, bool) { return os.Getuid() + 4242, true }
		}, false, false, "not owned by oneadmin"},
		{"spool not a directory", func() {
			collectorUID = func() (int, bool) { return 0, false }
			os.RemoveAll(spool)
			os.WriteFile(spool, nil, 0o600)
		}, false, false, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.prepare()
			cfg := config.Default()
			cfg.SpoolDir, cfg.OpenNebula.AuthFile = spool, auth
			r := checkHostSpool(cfg, tc.frontend)
			if r.OK != tc.ok || !strings.Contains(r.Detail, tc.want) {
				t.Fatalf("%+v, want ok=%v and %q", r, tc.ok, tc.want)
			}
			if tc.frontend && strings.Contains(r.Detail, "discouraged") {
				t.Fatalf("the front-end's own credentials flagged: %+v", r)
			}
		})
	}
}

// TestFixes: each failing check's fix is the installer's own step with its
// full path (the package's, or the one beside this binary), the VM_MAD
// change complete (attach_disk included), the caps as client.admin grants
// them.
func TestFixes(t *testing.T) {
	cfg := config.Default()
	pkg := fixes{installer: PackagedInstaller, configPath: "/etc/one/rbdfence.yaml"}
	src := fixes{installer: "/srv/rbdfence/install.sh", configPath: "/etc/one/rbdfence.yaml"}
	// Today's packages: no install.sh, rbdfence-onedconf for oned.conf.
	debRoot := t.TempDir()
	os.MkdirAll(filepath.Join(debRoot, "usr/sbin"), 0o755)
	os.WriteFile(filepath.Join(debRoot, PackagedOnedConf), []byte("#!/bin/sh\n"), 0o755)
	deb := newFixes(Options{Root: debRoot, ConfigPath: "/etc/one/rbdfence.yaml"})
	deb.prefix = "" // as on a machine whose root is /
	if !deb.packaged {
		t.Fatalf("rbdfence-onedconf installed, no install.sh: not seen as the packages' install")
	}
	for _, tc := range []struct{ got, want string }{
		{pkg.vmMAD("/etc/one/oned.conf"), "run '/usr/lib/rbdfence/install.sh frontend --apply' (or add '-l deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence' to the last -l of the ARGUMENTS of each such VM_MAD in /etc/one/oned.conf), then 'systemctl restart opennebula'"},
		{src.vmMAD("/etc/one/oned.conf"), "run '/srv/rbdfence/install.sh frontend --apply' (or add '-l deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence' to the last -l of the ARGUMENTS of each such VM_MAD in /etc/one/oned.conf), then 'systemctl restart opennebula'"},
		{pkg.hook(), "run '/usr/lib/rbdfence/install.sh host --hook-bin /usr/lib/rbdfence/bin/rbdfence-hook' on this host (it installs /etc/libvirt/hooks/qemu.d/10-rbdfence), then 'systemctl restart libvirtd' once if libvirtd started before any qemu hook existed"},
		{src.hook(), "run '/srv/rbdfence/install.sh host' on this host (it installs /etc/libvirt/hooks/qemu.d/10-rbdfence), then 'systemctl restart libvirtd' once if libvirtd started before any qemu hook existed"},
		{pkg.wrappers(), "run '/usr/lib/rbdfence/install.sh frontend', then 'onehost sync --force' as oneadmin"},
		{pkg.tmCeph(), "run '/usr/lib/rbdfence/install.sh frontend': it puts OpenNebula's scripts back"},
		{pkg.cephCaps(cfg, "one"), `as client.admin run 'ceph auth caps client.libvirt mon "profile rbd" osd "profile rbd pool=one"'`},
		{pkg.config(), "correct the key named in the message in /etc/one/rbdfence.yaml (docs/CONFIGURATION.md)"},
		{deb.vmMAD("/etc/one/oned.conf"), "run '/usr/sbin/rbdfence-onedconf --apply' (or add '-l deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence' to the last -l of the ARGUMENTS of each such VM_MAD in /etc/one/oned.conf), then 'systemctl restart opennebula'"},
		{deb.wrappers(), "reinstall the rbdfence-frontend package ('apt install --reinstall rbdfence-frontend', or 'dnf reinstall rbdfence-frontend'), then 'onehost sync --force' as oneadmin"},
		{deb.hook(), "reinstall the rbdfence-host package ('apt install --reinstall rbdfence-host', or 'dnf reinstall rbdfence-host') on this host, then 'systemctl restart libvirtd' once if libvirtd started before any qemu hook existed"},
		{deb.tmCeph(), "reinstall the rbdfence-frontend package ('apt install --reinstall rbdfence-frontend', or 'dnf reinstall rbdfence-frontend'): it puts OpenNebula's scripts back"},
		{fixes{}.wrappers(), "run './install.sh frontend' from the rbdfence source tree after 'make build', then 'onehost sync --force' as oneadmin"},
		{fixes{installer: PackagedInstaller, prefix: " --prefix /srv/root"}.wrappers(), "run '/usr/lib/rbdfence/install.sh frontend --prefix /srv/root', then 'onehost sync --force' as oneadmin"},
	} {
		if tc.got != tc.want {
			t.Errorf("got  %s\nwant %s", tc.got, tc.want)
		}
	}
	// The installer beside the binary (bin/../install.sh), else the package's.
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "src/bin"), 0o755)
	os.WriteFile(filepath.Join(root, "src/install.sh"), []byte("#!/bin/sh\n"), 0o755)
	if got := Installer(root, filepath.Join(root, "src/bin/rbdfence")); got != filepath.Join(root, "src/install.sh") {
		t.Errorf("beside the binary: %q", got)
	}
	if got := Installer(root, "/nonexistent/bin/rbdfence"); got != "" {
		t.Errorf("none: %q", got)
	}
	os.MkdirAll(filepath.Join(root, "usr/lib/rbdfence"), 0o755)
	os.WriteFile(filepath.Join(root, PackagedInstaller), []byte("#!/bin/sh\n"), 0o755)
	if got := Installer(root, "/nonexistent/bin/rbdfence"); got != PackagedInstaller {
		t.Errorf("packaged: %q", got)
	}
}

// TestNeedsCeph: each role runs the Ceph checks only where it does Ceph
// work: a host always; a front-end with remote: local or with Ceph access
// configured (fence-host); a plain front-end (remote: ssh) never.
func TestNeedsCeph(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		name           string
		host, frontend bool
		edit           func(c *config.Config)
		want           bool
	}{
		{"host", true, false, nil, true},
		{"front-end, remote ssh", false, true, nil, false},
		{"all-in-one", true, true, nil, true},
		{"front-end, remote local", false, true, func(c *config.Config) { c.OpenNebula.Remote = "local" }, true},
		{"front-end with mon_host for fence-host", false, true, func(c *config.Config) { c.Ceph.MonHost = "10.0.0.1:6789" }, true},
		{"front-end with a keyring", false, true, func(c *config.Config) {
			c.Ceph.Keyring = "/etc/ceph/k"
			os.MkdirAll(filepath.Join(root, "etc/ceph"), 0o755)
			os.WriteFile(filepath.Join(root, "etc/ceph/k"), []byte("x"), 0o600)
		}, true},
	} {
		cfg := config.Default()
		if tc.edit != nil {
			tc.edit(cfg)
		}
		got, why := needsCeph(Options{Root: root, Config: cfg, Host: tc.host, Frontend: tc.frontend})
		if got != tc.want || (!got && !strings.Contains(why, "not needed on this front-end")) {
			t.Errorf("%s: %v %q", tc.name, got, why)
		}
	}
}
