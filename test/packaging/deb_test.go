package packaging_test

import (
	"crypto/md5"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/test/testenv"
)

const (
	installed  = "install ok installed"
	notThere   = "not-installed"
	hookLink   = "/etc/libvirt/hooks/qemu.d/10-rbdfence"
	timerWants = "/etc/systemd/system/timers.target.wants/rbdfence-events.timer"
)

// everything is what a scratch root's snapshot covers: all but dpkg's
// database and logs.
var everything = []string{"/"}

// root is a scratch root with its own dpkg database.
type root struct {
	t   *testing.T
	dir string
}

// libsStatus: the libraries the packages depend on, as Debian 12 has them,
// so that dpkg installs without --force-depends and configures in
// dependency order, as on a real machine.
var libsStatus = func() string {
	var b strings.Builder
	for _, l := range [][2]string{{"libc6", "2.36-9+deb12u14"}, {"libgcc-s1", "12.2.0-14+deb12u1"}, {"libstdc++6", "12.2.0-14+deb12u1"},
		{"librados2", "16.2.15+ds-0+deb12u2"}, {"librbd1", "16.2.15+ds-0+deb12u2"}} {
		fmt.Fprintf(&b, "Package: %s\nStatus: install ok installed\nPriority: optional\nSection: libs\nMaintainer: stand-in\nArchitecture: amd64\nVersion: %s\nDescription: stand-in\n\n", l[0], l[1])
	}
	return b.String()
}()

// newRoot makes a scratch root: dpkg's database with status (libsStatus
// unless given), and systemd's unit directories as a Debian system has them
// (another timer enabled).
func newRoot(t *testing.T, status ...string) *root {
	t.Helper()
	r := &root{t: t, dir: t.TempDir()}
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers", "var/log", "var/lib/systemd"} {
		if err := os.MkdirAll(r.path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	st := libsStatus
	if len(status) > 0 {
		st = status[0]
	}
	writeFile(t, r.path("var/lib/dpkg/status"), st, 0o644)
	if err := os.MkdirAll(r.path("etc/systemd/system/timers.target.wants"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/lib/systemd/system/apt-daily.timer", r.path("etc/systemd/system/timers.target.wants/apt-daily.timer")); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *root) path(rel string) string { return filepath.Join(r.dir, rel) }

func (r *root) snapshot() map[string]string {
	return snapshot(r.t, r.dir, everything, "/var/lib/dpkg", "/var/log")
}

// libvirt puts a stand-in of a KVM host's hook directory into r: empty, or
// with another product's hook.
func (r *root) libvirt(otherHook bool) {
	r.t.Helper()
	if err := os.MkdirAll(r.path("etc/libvirt/hooks/qemu.d"), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if otherHook {
		writeFile(r.t, r.path("etc/libvirt/hooks/qemu.d/50-other"), "#!/bin/sh\n# another hook\nexit 0\n", 0o755)
	}
}

// dpkg runs dpkg on the root, as an image builder does (--root, maintainer
// scripts outside a chroot with $DPKG_ROOT set).
func (r *root) dpkg(args ...string) (string, int) {
	r.t.Helper()
	all := append([]string{"--root=" + r.dir, "--log=" + r.path("var/log/dpkg.log"), "--force-script-chrootless"}, args...)
	stdout, stderr, code := run(r.t, "", []string{"DEBIAN_FRONTEND=noninteractive"}, "dpkg", all...)
	return stdout + stderr, code
}

func (r *root) mustDpkg(args ...string) string {
	r.t.Helper()
	out, code := r.dpkg(args...)
	if code != 0 {
		r.t.Fatalf("dpkg %v: exit %d\n%s", args, code, out)
	}
	return out
}

func (r *root) query(args ...string) (string, int) {
	r.t.Helper()
	out, _, code := run(r.t, "", nil, "dpkg-query", append([]string{"--admindir=" + r.path("var/lib/dpkg")}, args...)...)
	return out, code
}

func (r *root) wantStatus(pkg, want string) {
	r.t.Helper()
	got, code := r.query("-W", "-f=${Status}", pkg)
	if code != 0 || strings.HasSuffix(got, " not-installed") {
		got = notThere
	}
	if got != want {
		r.t.Fatalf("dpkg status of %s: %q, want %q", pkg, got, want)
	}
}

// scriptState is what the maintainer scripts keep at run time, as every
// Debian package that enables a unit does (deb-systemd-helper's links and
// state) or as rbdfence-onedconf records an oned.conf change: not files the
// packages ship.
var scriptState = regexp.MustCompile(`^(` + regexp.QuoteMeta(timerWants) + `|/var/lib/systemd/deb-systemd-helper-(enabled|masked)(/.*)?|/var/lib/rbdfence/(oned-conf(/.*)?|host-dirs))$`)

// unowned returns the paths among ps (all new since before) that no
// package owns (dpkg -S finds none) and that are not scriptState.
func (r *root) unowned(ps []string) []string {
	r.t.Helper()
	var out []string
	for _, p := range ps {
		if scriptState.MatchString(p) {
			continue
		}
		if _, code := r.query("-S", p); code != 0 {
			out = append(out, p)
		}
	}
	return out
}

// wantOwned checks that dpkg -S finds a package for every path new since
// before, and that there are some.
func (r *root) wantOwned(before map[string]string) int {
	r.t.Helper()
	ps := newPaths(before, r.snapshot())
	if u := r.unowned(ps); len(u) > 0 {
		r.t.Fatalf("%d of %d installed paths are no package's (dpkg -S):\n%s", len(u), len(ps), strings.Join(u, "\n"))
	}
	if len(ps) < 10 {
		r.t.Fatalf("only %d new paths: %v", len(ps), ps)
	}
	return len(ps)
}

// wantTimer checks that the package enabled rbdfence-events.timer as
// deb-systemd-helper does.
func (r *root) wantTimer() {
	r.t.Helper()
	if l, err := os.Readlink(r.path(timerWants)); err != nil || l != "/lib/systemd/system/rbdfence-events.timer" {
		r.t.Fatalf("%s: %q %v, want the link deb-systemd-helper makes", timerWants, l, err)
	}
}

// TestFrontendDeb: the front-end packages on a stand-in OpenNebula: every
// file at its path and owned (dpkg -S), the timer enabled, the VM_MAD
// change shown, not made; rbdfence-onedconf --apply makes it; the removal
// undoes it byte for byte; the purge leaves the tree as it was.
func TestFrontendDeb(t *testing.T) {
	t.Parallel()
	p := release(t)
	r := newRoot(t)
	opennebula(t, r.dir)
	before := r.snapshot()

	out := r.mustDpkg("-i", p.deb["rbdfence"], p.deb["rbdfence-frontend"])
	for _, want := range []string{vmMadChange, "make the oned.conf change above by hand, or run: rbdfence-onedconf --prefix " + r.dir + " --apply", "onehost sync --force", "onehook create"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the post-install does not say %q:\n%s", want, out)
		}
	}
	r.wantStatus("rbdfence", installed)
	r.wantStatus("rbdfence-frontend", installed)
	wantInstalled(t, r.dir, "rbdfence", "deb", p.bin)
	wantInstalled(t, r.dir, "rbdfence-frontend", "deb", p.bin)
	n := r.wantOwned(before)
	t.Logf("%d paths installed, every one owned by its package", n)
	r.wantTimer()
	if got := string(readFile(t, r.path("etc/one/oned.conf"))); got != onedConf {
		t.Fatalf("oned.conf changed by the install:\n%s", got)
	}
	// OpenNebula's /etc/one keeps its mode although the package has a file in it.
	if st, err := os.Stat(r.path("etc/one")); err != nil || st.Mode().Perm() != 0o750 {
		t.Fatalf("etc/one: %v %v, want OpenNebula's 0750 kept", st.Mode(), err)
	}
	// The local actions run from where OpenNebula calls them.
	if o, e, code := run(t, "", nil, r.path("var/lib/one/remotes/vmm/kvm/deploy-rbdfence")); code != 2 || !strings.Contains(o+e, "usage: deploy-rbdfence") {
		t.Fatalf("installed deploy-rbdfence: exit %d\n%s%s", code, o, e)
	}
	if got := strings.TrimSpace(mustRun(t, "dpkg-query", "--admindir="+r.path("var/lib/dpkg"), "-W", "-f=${Conffiles}", "rbdfence")); !strings.Contains(got, fmt.Sprintf("/etc/one/rbdfence.yaml %x", md5.Sum(readFile(t, r.path("etc/one/rbdfence.yaml"))))) ||
		!strings.Contains(got, "/etc/logrotate.d/rbdfence ") {
		t.Fatalf("conffiles of rbdfence: %q", got)
	}

	onedconf := r.path("usr/sbin/rbdfence-onedconf")
	mustRunIn(t, "", nil, onedconf, "--prefix", r.dir, "--apply")
	if got := string(readFile(t, r.path("etc/one/oned.conf"))); !strings.Contains(got, appliedArgs) {
		t.Fatalf("rbdfence-onedconf --apply:\n%s", got)
	}
	// Reconfiguring says the change is made, and nothing "above".
	out = r.mustDpkg("-i", p.deb["rbdfence-frontend"])
	if strings.Contains(out, "above") || !strings.Contains(out, "already runs the rbdfence local actions (kvm)") {
		t.Fatalf("a reinstall over an applied change:\n%s", out)
	}

	out = r.mustDpkg("-r", "rbdfence-frontend")
	if !strings.Contains(out, "oned.conf: restored as it was before rbdfence") {
		t.Fatalf("the removal does not say it restored oned.conf:\n%s", out)
	}
	if got := string(readFile(t, r.path("etc/one/oned.conf"))); got != onedConf {
		t.Fatalf("oned.conf after the removal is not the original:\n%s", got)
	}
	r.wantStatus("rbdfence-frontend", "deinstall ok config-files")
	wantGone(t, r.dir, "var/lib/one/remotes/vmm/kvm/deploy-rbdfence", "var/lib/one/remotes/rbdfence", "var/lib/rbdfence/oned-conf", "lib/systemd/system/rbdfence-events.timer")
	wantInstalled(t, r.dir, "rbdfence", "deb", p.bin)

	r.mustDpkg("-P", "rbdfence-frontend", "rbdfence")
	r.wantStatus("rbdfence", notThere)
	sameTree(t, "after purge", before, r.snapshot())
}

// TestHostDeb: the host packages next to another product's hook: the hook
// link and binary in place and owned, the tree as it was after the purge.
func TestHostDeb(t *testing.T) {
	t.Parallel()
	p := release(t)
	r := newRoot(t)
	r.libvirt(true)
	before := r.snapshot()

	r.mustDpkg("-i", p.deb["rbdfence"], p.deb["rbdfence-host"])
	r.wantStatus("rbdfence-host", installed)
	wantInstalled(t, r.dir, "rbdfence-host", "deb", p.bin)
	t.Logf("%d paths installed, every one owned by its package", r.wantOwned(before))
	w := string(readFile(t, r.path("usr/lib/rbdfence/bin/qemu-hook")))
	if !strings.HasPrefix(w, "#!/bin/sh\n") || !strings.Contains(w, "\nexec '/usr/lib/rbdfence/bin/rbdfence-hook' -- \"$@\"\n") {
		t.Fatalf("the hook wrapper does not run the hook:\n%s", w)
	}
	if got := strings.TrimSpace(mustRun(t, "dpkg-query", "--admindir="+r.path("var/lib/dpkg"), "-W", "-f=${Conffiles}", "rbdfence-host")); got != "" {
		t.Fatalf("rbdfence-host has conffiles (its hook must go with a removal): %q", got)
	}

	r.mustDpkg("-r", "rbdfence-host")
	wantGone(t, r.dir, hookLink, "usr/lib/rbdfence/bin/rbdfence-hook")
	r.mustDpkg("-P", "rbdfence-host", "rbdfence")
	sameTree(t, "after purge", before, r.snapshot())
}

// TestAllInOneDeb: a front-end that is also a KVM host takes all three
// packages (no file is in two); removing one role leaves the other; the
// purge leaves the tree as it was: no /var/lib/rbdfence, and the empty hook
// directory that was there before is there again.
func TestAllInOneDeb(t *testing.T) {
	t.Parallel()
	p := release(t)
	r := newRoot(t)
	opennebula(t, r.dir)
	r.libvirt(false)
	before := r.snapshot()

	r.mustDpkg("-i", p.deb["rbdfence"], p.deb["rbdfence-frontend"], p.deb["rbdfence-host"])
	for _, pkg := range pkgNames {
		r.wantStatus(pkg, installed)
		wantInstalled(t, r.dir, pkg, "deb", p.bin)
	}
	r.wantOwned(before)
	mustRunIn(t, "", nil, r.path("usr/sbin/rbdfence-onedconf"), "--prefix", r.dir, "--apply")
	// The hook's migration marks, as the hook writes them.
	writeFile(t, r.path("var/lib/rbdfence/migrating/one-7"), "{}\n", 0o600)

	r.mustDpkg("-r", "rbdfence-host")
	wantGone(t, r.dir, hookLink)
	wantInstalled(t, r.dir, "rbdfence-frontend", "deb", p.bin)
	r.mustDpkg("-r", "rbdfence-frontend")
	if got := string(readFile(t, r.path("etc/one/oned.conf"))); got != onedConf {
		t.Fatalf("oned.conf after the removal:\n%s", got)
	}
	r.mustDpkg("-P", "rbdfence-host", "rbdfence-frontend", "rbdfence")
	wantGone(t, r.dir, "var/lib/rbdfence")
	sameTree(t, "after purge", before, r.snapshot())
}

// TestNoOpenNebulaDeb: the front-end package where there is no OpenNebula
// completes (no half-configured package: apt's exit 100), says so, and
// rbdfence doctor names what is missing; the purge leaves nothing.
func TestNoOpenNebulaDeb(t *testing.T) {
	t.Parallel()
	p := release(t)
	r := newRoot(t)
	before := r.snapshot()
	out := r.mustDpkg("-i", p.deb["rbdfence"], p.deb["rbdfence-frontend"])
	if !strings.Contains(out, "no OpenNebula front-end here") || !strings.Contains(out, "rbdfence doctor --role frontend") {
		t.Fatalf("the post-install does not say OpenNebula is missing:\n%s", out)
	}
	r.wantStatus("rbdfence-frontend", installed)
	o, e, code := run(t, "", nil, r.path("usr/bin/rbdfence"), "doctor", "--role", "frontend", "--root", r.dir)
	if code == 0 || !strings.Contains(o, "FAIL  vm-mad") || !strings.Contains(o, r.path("etc/one/oned.conf")) {
		t.Fatalf("doctor on a machine without OpenNebula: exit %d\n%s%s", code, o, e)
	}
	r.mustDpkg("-P", "rbdfence-frontend", "rbdfence")
	sameTree(t, "after purge", before, r.snapshot())
}

// TestUncoverableDeb: a kvm VM_MAD whose ARGUMENTS run another local
// deploy cannot be covered: the install still completes and names it;
// rbdfence-onedconf --apply refuses and changes nothing.
func TestUncoverableDeb(t *testing.T) {
	t.Parallel()
	p := release(t)
	r := newRoot(t)
	opennebula(t, r.dir)
	conf := strings.Replace(onedConf, `"-t 15 -r 0 kvm -p"`, `"-t 15 -r 0 kvm -l deploy=deploy-tweaks"`, 1)
	writeFile(t, r.path("etc/one/oned.conf"), conf, 0o640)
	out := r.mustDpkg("-i", p.deb["rbdfence"], p.deb["rbdfence-frontend"])
	if !strings.Contains(out, "NO rbdfence protection") || !strings.Contains(out, "deploy-tweaks") || strings.Contains(out, "change above") {
		t.Fatalf("the post-install over an uncoverable VM_MAD:\n%s", out)
	}
	o, e, code := run(t, "", nil, r.path("usr/sbin/rbdfence-onedconf"), "--prefix", r.dir, "--apply")
	if code != 3 || !strings.Contains(o+e, "deploy=deploy-tweaks") {
		t.Fatalf("--apply over deploy-tweaks: exit %d\n%s%s", code, o, e)
	}
	if got := string(readFile(t, r.path("etc/one/oned.conf"))); got != conf {
		t.Fatalf("a refused --apply changed oned.conf:\n%s", got)
	}
}

// TestUpgradeDeb: the previous release's packages (which put their files in
// place by script) are upgraded to this tree's, with the VM_MAD change
// applied and the config edited: afterwards every file is owned by its
// package and nothing of the scripts' is left, oned.conf still runs the
// actions, the edit is kept; removal and purge give the tree back.
func TestUpgradeDeb(t *testing.T) {
	t.Parallel()
	a, b := previous(t), release(t)
	if _, _, code := run(t, "", nil, "dpkg", "--compare-versions", b.version, "gt", a.version); code != 0 {
		t.Fatalf("version %s is not later than the previous release's %s", b.version, a.version)
	}
	r := newRoot(t)
	opennebula(t, r.dir)
	r.libvirt(true)
	before := r.snapshot()

	r.mustDpkg("-i", a.deb["rbdfence"], a.deb["rbdfence-frontend"], a.deb["rbdfence-host"])
	old := newPaths(before, r.snapshot())
	unowned := r.unowned(old)
	files := 0
	for _, p := range unowned {
		if st, err := os.Lstat(r.path(p)); err == nil && !st.IsDir() {
			files++
		}
	}
	t.Logf("the previous release: %d of %d installed paths no package's (dpkg -S), %d of them files", len(unowned), len(old), files)
	mustRunIn(t, "", []string{"RBDFENCE_BIN=" + r.path("usr/lib/rbdfence/bin")}, "bash", r.path("usr/lib/rbdfence/install.sh"), "frontend", "--prefix", r.dir, "--apply")
	applied := readFile(t, r.path("etc/one/oned.conf"))
	if !strings.Contains(string(applied), appliedArgs) {
		t.Fatalf("the previous release's --apply did not change oned.conf:\n%s", applied)
	}
	edited := append(readFile(t, r.path("etc/one/rbdfence.yaml")), "# edited by the operator\n"...)
	writeFile(t, r.path("etc/one/rbdfence.yaml"), string(edited), 0o644)

	out := r.mustDpkg("-i", b.deb["rbdfence"], b.deb["rbdfence-frontend"], b.deb["rbdfence-host"])
	if strings.Contains(out, "above") || !strings.Contains(out, "already runs the rbdfence local actions") {
		t.Fatalf("the upgrade's post-install:\n%s", out)
	}
	for _, pkg := range pkgNames {
		r.wantStatus(pkg, installed)
		if v, _ := r.query("-W", "-f=${Version}", pkg); v != b.version+"-1" {
			t.Fatalf("%s is at %q after the upgrade, want %s-1", pkg, v, b.version)
		}
		wantInstalled(t, r.dir, pkg, "deb", b.bin, "/etc/one/rbdfence.yaml")
	}
	if got := readFile(t, r.path("etc/one/oned.conf")); string(got) != string(applied) {
		t.Fatalf("oned.conf changed in the upgrade:\n%s", got)
	}
	if got := readFile(t, r.path("etc/one/rbdfence.yaml")); string(got) != string(edited) {
		t.Fatalf("the edited config was not kept:\n%s", got)
	}
	wantGone(t, r.dir, "var/lib/rbdfence/install-frontend", "var/lib/rbdfence/install-host",
		"etc/systemd/system/rbdfence-events.service", "etc/systemd/system/rbdfence-events.timer", "usr/lib/rbdfence/install.sh")
	r.wantTimer()
	t.Logf("after the upgrade: %d paths installed, every one owned by its package", r.wantOwned(before))

	r.mustDpkg("-r", "rbdfence-frontend", "rbdfence-host")
	if got := string(readFile(t, r.path("etc/one/oned.conf"))); got != onedConf {
		t.Fatalf("oned.conf after the removal is not the one before the first install:\n%s", got)
	}
	r.mustDpkg("-P", "rbdfence-frontend", "rbdfence-host", "rbdfence")
	sameTree(t, "after purge", before, r.snapshot())
}

// TestDebControl: the dependencies are computed from the binaries (the
// libc6 version is the newest GLIBC_ symbol version the CLI needs) and
// split by what each package runs: the front-end's drivers are pure Go, so
// rbdfence-frontend depends on nothing and installs where there is no Ceph
// library (nor any other package).
func TestDebControl(t *testing.T) {
	t.Parallel()
	p := release(t)
	field := func(pkg, f string) string {
		return strings.TrimSpace(mustRun(t, "dpkg-deb", "-f", p.deb[pkg], f))
	}
	glibc := "0"
	for _, m := range regexp.MustCompile(`GLIBC_([0-9]+\.[0-9]+)`).FindAllStringSubmatch(mustRun(t, "objdump", "-T", filepath.Join(p.bin, "rbdfence")), -1) {
		if _, _, code := run(t, "", nil, "dpkg", "--compare-versions", m[1], "gt", glibc); code == 0 {
			glibc = m[1]
		}
	}
	ceph := regexp.MustCompile(`^libc6 \(>= ` + regexp.QuoteMeta(glibc) + `\), libgcc-s1 \(>= [0-9.]+\), librados2 \(>= 16\.2[^)]*\), libstdc\+\+6 \(>= [0-9.]+\), librbd1 \(>= 16\.2[^)]*\)$`)
	if d := field("rbdfence", "Depends"); !ceph.MatchString(d) {
		t.Fatalf("rbdfence: Depends %q, want %s", d, ceph)
	}
	exact := "rbdfence (= " + p.version + "-1)"
	if d := field("rbdfence-host", "Depends"); !strings.HasPrefix(d, exact+", ") || !ceph.MatchString(strings.TrimPrefix(d, exact+", ")) {
		t.Fatalf("rbdfence-host: Depends %q", d)
	}
	if d, s := field("rbdfence-frontend", "Depends"), field("rbdfence-frontend", "Suggests"); d != "" || s != exact {
		t.Fatalf("rbdfence-frontend: Depends %q Suggests %q; want none and %s", d, s, exact)
	}
	for _, pkg := range pkgNames {
		for f, want := range map[string]string{"Package": pkg, "Source": "rbdfence", "Version": p.version + "-1", "Architecture": strings.TrimSpace(mustRun(t, "go", "env", "GOARCH")), "Section": "admin"} {
			if got := field(pkg, f); got != want {
				t.Fatalf("%s: %s is %q, want %q", pkg, f, got, want)
			}
		}
	}
	// Alone, on a system that has nothing installed at all.
	r := newRoot(t, "")
	r.mustDpkg("-i", p.deb["rbdfence-frontend"])
	r.wantStatus("rbdfence-frontend", installed)
}

// TestMakePackage: `make package` builds the binaries first and writes the
// packages to dist/.
func TestMakePackage(t *testing.T) {
	out, errOut, code := run(t, testenv.Root(), nil, "make", "-n", "package")
	if code != 0 {
		t.Fatalf("make -n package: exit %d\n%s%s", code, out, errOut)
	}
	b := strings.Index(out, "go build")
	pk := strings.Index(out, "packaging/package.sh --out dist")
	if b < 0 || pk < 0 || pk < b {
		t.Fatalf("make package does not build, then run packaging/package.sh --out dist:\n%s", out)
	}
}
