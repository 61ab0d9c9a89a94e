package packaging_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// machineRoots are the paths of this machine that the packages (and the
// previous release's scripts) touch: compared before and after. Left out:
// what rbdfence's binaries write at run time (/var/lib/one/rbdfence,
// /var/log/one), which other test packages running at the same time may
// write too (a CLI with the default config spools there); the purge removes
// it.
var machineRoots = []string{
	"/etc/one", "/var/lib/one", "/var/lib/rbdfence", "/etc/libvirt/hooks",
	"/usr/lib/rbdfence", "/usr/bin/rbdfence", "/usr/sbin/rbdfence-onedconf", "/usr/local/libexec/rbdfence",
	"/usr/share/doc/rbdfence", "/usr/share/doc/rbdfence-frontend", "/usr/share/doc/rbdfence-host",
	"/usr/share/lintian/overrides", "/etc/logrotate.d",
	"/lib/systemd/system", "/etc/systemd/system", "/var/lib/systemd/deb-systemd-helper-enabled", "/var/lib/systemd/deb-systemd-helper-masked",
}

func machineSnapshot(t *testing.T) map[string]string {
	return snapshot(t, "/", machineRoots, "/var/lib/one/rbdfence")
}

// removeNew removes the paths of now that are not in before, deepest first.
func removeNew(t *testing.T, before map[string]string) {
	t.Helper()
	ps := newPaths(before, machineSnapshot(t))
	for i := len(ps) - 1; i >= 0; i-- {
		if err := os.RemoveAll(ps[i]); err != nil {
			t.Error(err)
		}
	}
}

// keepAside copies every path of snap that is rbdfence's or OpenNebula's
// (its name says rbdfence, or it is below /etc/one or /var/lib/one) to a
// scratch directory; the function it returns puts back each of them that is
// missing.
func keepAside(t *testing.T, snap map[string]string) func() {
	t.Helper()
	dir := t.TempDir()
	var kept []string
	for p := range snap {
		if strings.Contains(p, "rbdfence") || p == "/etc/one" || p == "/var/lib/one" || strings.HasPrefix(p, "/etc/one/") || strings.HasPrefix(p, "/var/lib/one/") || strings.HasPrefix(p, "/var/log/one") {
			kept = append(kept, p)
		}
	}
	sort.Strings(kept) // parents first
	for _, p := range kept {
		if st, err := os.Lstat(p); err == nil && !st.IsDir() {
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
				t.Fatal(err)
			}
			mustRun(t, "cp", "-a", "--no-dereference", p, filepath.Join(dir, p))
		}
	}
	return func() {
		for _, p := range kept {
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				continue
			}
			if strings.HasPrefix(snap[p], "d") {
				perm, _ := strconv.ParseUint(modeBits(snap[p]), 8, 32)
				if err := os.Mkdir(p, os.FileMode(perm)); err != nil {
					t.Error(err)
				}
				os.Chmod(p, os.FileMode(perm))
				continue
			}
			if out, err := exec.Command("cp", "-a", "--no-dereference", filepath.Join(dir, p), p).CombinedOutput(); err != nil {
				t.Errorf("putting %s back: %v %s", p, err, out)
			}
		}
	}
}

// modeBits is the octal permission of a snapshot value ("drwxr-x--- 0:0").
func modeBits(v string) string {
	m := strings.Fields(v)[0]
	bits := 0
	for i, c := range m[len(m)-9:] {
		if c != '-' {
			bits |= 1 << (8 - i)
		}
	}
	return strconv.FormatInt(int64(bits), 8)
}

// apt runs apt-get as an operator does, non-interactively.
func apt(t *testing.T, args ...string) string {
	t.Helper()
	return mustRunIn(t, "", []string{"DEBIAN_FRONTEND=noninteractive"}, "apt-get", append([]string{"-y", "--no-install-recommends"}, args...)...)
}

// machineUnowned returns the paths among ps that dpkg -S (this machine's
// database) finds no package for, the scripts' state aside.
func machineUnowned(t *testing.T, ps []string) []string {
	t.Helper()
	var out []string
	for _, p := range ps {
		if scriptState.MatchString(p) {
			continue
		}
		if _, _, code := run(t, "", nil, "dpkg-query", "-S", p); code != 0 {
			out = append(out, p)
		}
	}
	return out
}

// TestMachineApt: the packages as an operator installs them on this machine
// (Debian 12), with apt: the previous release's on a stand-in OpenNebula
// front-end that is also a KVM host, with the VM_MAD change applied; the
// upgrade to this tree's (every installed path then owned by its package,
// dpkg -S; nothing of the previous scripts left; the change kept); removal
// (oned.conf back byte for byte) and purge (the machine as it was). Then the
// front-end package where there is no OpenNebula: it installs, doctor says
// what is missing, the purge leaves nothing.
//
// It changes the machine's own /etc, /usr and /var: run it only under the
// machine lock (RULES.md). It holds the system lock (testenv.OwnSystem): the
// hook the package installs acts on every libvirt domain, so no test process
// starts domains in the machine's libvirtd meanwhile.
func TestMachineApt(t *testing.T) {
	a, b := previous(t), release(t)
	testenv.OwnSystem(t)
	for _, pkg := range pkgNames {
		if out, _, code := run(t, "", nil, "dpkg-query", "-W", "-f=${Status}", pkg); code == 0 && !strings.HasSuffix(out, "not-installed") {
			t.Fatalf("%s is installed on this machine (%s): purge it first (apt-get purge rbdfence-frontend rbdfence-host rbdfence)", pkg, out)
		}
	}
	for _, p := range []string{"/etc/one/oned.conf", "/var/lib/one/remotes"} {
		if _, err := os.Lstat(p); err == nil {
			t.Fatalf("%s exists: this test needs a machine without OpenNebula (it puts a stand-in there)", p)
		}
	}
	pristine := machineSnapshot(t)
	// What is there of rbdfence's without a package (a copy of the config,
	// files of a package-less install) is taken over by dpkg and goes with
	// the purge: kept aside and put back as it was.
	// The purge removes rbdfence's run-time data too (not compared: other
	// test packages may write it meanwhile): what was there goes back.
	restore, restoreRuntime := keepAside(t, pristine), keepAside(t, snapshot(t, "/", []string{"/var/lib/one/rbdfence", "/var/log/one"}))
	t.Cleanup(func() {
		// Whatever happened: nothing of the test stays.
		run(t, "", []string{"DEBIAN_FRONTEND=noninteractive"}, "dpkg", "--purge", "rbdfence-host", "rbdfence-frontend", "rbdfence")
		removeNew(t, pristine)
		restore()
		restoreRuntime()
		sameTree(t, "the machine after the test", pristine, machineSnapshot(t))
	})

	t.Run("upgrade from the previous release", func(t *testing.T) {
		opennebula(t, "/")
		before := machineSnapshot(t)
		apt(t, "install", a.deb["rbdfence"], a.deb["rbdfence-frontend"], a.deb["rbdfence-host"])
		old := newPaths(before, machineSnapshot(t))
		t.Logf("the previous release: %d of %d installed paths no package's (dpkg -S)", len(machineUnowned(t, old)), len(old))
		mustRunIn(t, "", []string{"RBDFENCE_BIN=/usr/lib/rbdfence/bin"}, "bash", "/usr/lib/rbdfence/install.sh", "frontend", "--apply")
		applied := string(readFile(t, "/etc/one/oned.conf"))
		if !strings.Contains(applied, appliedArgs) {
			t.Fatalf("the previous release's --apply:\n%s", applied)
		}

		out := apt(t, "install", b.deb["rbdfence"], b.deb["rbdfence-frontend"], b.deb["rbdfence-host"])
		if strings.Contains(out, "above") || !strings.Contains(out, "already runs the rbdfence local actions") {
			t.Fatalf("apt-get install (upgrade):\n%s", out)
		}
		for _, pkg := range pkgNames {
			if v := mustRun(t, "dpkg-query", "-W", "-f=${Status} ${Version}", pkg); v != installed+" "+b.version+"-1" {
				t.Fatalf("%s after the upgrade: %q", pkg, v)
			}
			wantInstalled(t, "/", pkg, "deb", b.bin)
		}
		if got := string(readFile(t, "/etc/one/oned.conf")); got != applied {
			t.Fatalf("oned.conf changed in the upgrade:\n%s", got)
		}
		wantGone(t, "/", "var/lib/rbdfence/install-frontend", "var/lib/rbdfence/install-host",
			"etc/systemd/system/rbdfence-events.service", "etc/systemd/system/rbdfence-events.timer", "usr/lib/rbdfence/install.sh")
		if l, err := os.Readlink(timerWants); err != nil || l != "/lib/systemd/system/rbdfence-events.timer" {
			t.Fatalf("%s: %q %v", timerWants, l, err)
		}
		ps := newPaths(before, machineSnapshot(t))
		if u := machineUnowned(t, ps); len(u) > 0 {
			t.Fatalf("%d of %d installed paths are no package's (dpkg -S):\n%s", len(u), len(ps), strings.Join(u, "\n"))
		}
		t.Logf("after the upgrade: %d paths installed, every one owned by its package", len(ps))

		apt(t, "remove", "rbdfence-frontend", "rbdfence-host")
		if got := string(readFile(t, "/etc/one/oned.conf")); got != onedConf {
			t.Fatalf("oned.conf after the removal:\n%s", got)
		}
		wantGone(t, "/", hookLink, "var/lib/one/remotes/vmm/kvm/deploy-rbdfence")
		apt(t, "purge", "rbdfence-frontend", "rbdfence-host", "rbdfence")
		restore()
		sameTree(t, "after the purge", before, machineSnapshot(t))
		removeNew(t, pristine)
		sameTree(t, "the stand-in gone", pristine, machineSnapshot(t))
	})

	t.Run("no OpenNebula", func(t *testing.T) {
		removeNew(t, pristine)
		restore()
		sameTree(t, "before", pristine, machineSnapshot(t))
		out := apt(t, "install", b.deb["rbdfence"], b.deb["rbdfence-frontend"])
		if !strings.Contains(out, "no OpenNebula front-end here") {
			t.Fatalf("apt-get install without OpenNebula:\n%s", out)
		}
		o, e, code := run(t, "", nil, "/usr/bin/rbdfence", "doctor", "--role", "frontend")
		if code == 0 || !strings.Contains(o, "FAIL  vm-mad") || !strings.Contains(o, "/etc/one/oned.conf") {
			t.Fatalf("rbdfence doctor without OpenNebula: exit %d\n%s%s", code, o, e)
		}
		apt(t, "purge", "rbdfence-frontend", "rbdfence")
		restore()
		sameTree(t, "after the purge", pristine, machineSnapshot(t))
	})
}
