package packaging_test

import (
	"crypto/md5"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/test/testenv"
)

const (
	installed   = "install ok installed"
	configFiles = "deinstall ok config-files"
	notThere    = "not-installed"
	remotes     = "var/lib/one/remotes/"
	hookWrapper = "etc/libvirt/hooks/qemu.d/10-rbdfence"
	hookCopy    = "usr/local/libexec/rbdfence/rbdfence-hook"
	vmMadChange = `+ ARGUMENTS      = "-t 15 -r 0 kvm -p -l deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence",`
)

// conffiles returns dpkg's Conffiles field of pkg in r.
func (r *root) conffiles(pkg string) string {
	r.t.Helper()
	out, errOut, code := run(r.t, "", nil, "dpkg-query", "--admindir="+r.path("var/lib/dpkg"), "-W", "-f=${Conffiles}", pkg)
	if code != 0 {
		r.t.Fatalf("dpkg-query %s: %s", pkg, errOut)
	}
	return strings.TrimSpace(out)
}

// wantCommon checks what the rbdfence package installs: the CLI (0755, also
// on PATH through a relative symlink that works inside the root),
// install.sh, the config (0644, a registered conffile), the docs.
func (r *root) wantCommon(p *pkgs) {
	r.t.Helper()
	for _, b := range commonBins {
		r.wantFile("usr/lib/rbdfence/bin/"+b, 0o755, readFile(r.t, filepath.Join(p.bin, b)))
	}
	if l, err := os.Readlink(r.path("usr/bin/rbdfence")); err != nil || l != "../lib/rbdfence/bin/rbdfence" {
		r.t.Fatalf("usr/bin/rbdfence: %q %v, want a symlink to ../lib/rbdfence/bin/rbdfence", l, err)
	}
	// Through the symlink, the CLI runs.
	if out, errOut, code := run(r.t, "", nil, r.path("usr/bin/rbdfence"), "version"); code != 0 {
		r.t.Fatalf("usr/bin/rbdfence version: exit %d\n%s%s", code, out, errOut)
	}
	r.wantFile("usr/lib/rbdfence/install.sh", 0o755, readFile(r.t, filepath.Join(testenv.Root(), "install.sh")))
	conf := readFile(r.t, filepath.Join(testenv.Root(), "packaging/nfpm/files/rbdfence.yaml"))
	r.wantFile(confPath, 0o644, conf)
	if got, want := r.conffiles("rbdfence"), fmt.Sprintf("/%s %x", confPath, md5.Sum(conf)); got != want {
		r.t.Fatalf("conffiles of rbdfence: %q, want %q", got, want)
	}
	r.wantFile("usr/share/doc/rbdfence/README.md", 0o644, readFile(r.t, filepath.Join(testenv.Root(), "README.md")))
	r.wantFile("usr/share/doc/rbdfence/SECURITY.md", 0o644, readFile(r.t, filepath.Join(testenv.Root(), "docs/SECURITY.md")))
}

// wantFrontend checks the rbdfence-frontend package's files and what its
// post-install put in OpenNebula's remotes (binaries from bin).
func (r *root) wantFrontend(bin string) {
	r.t.Helper()
	for _, b := range frontendBins {
		r.wantFile("usr/lib/rbdfence/bin/"+b, 0o755, readFile(r.t, filepath.Join(bin, b)))
	}
	r.wantFile("usr/lib/rbdfence/packaging/install-frontend.sh", 0o755, readFile(r.t, filepath.Join(testenv.Root(), "packaging/install-frontend.sh")))
	r.wantFile(remotes+"vmm/kvm/deploy-rbdfence", 0o755, readFile(r.t, filepath.Join(bin, "deploy-rbdfence")))
	r.wantFile(remotes+"vmm/kvm/restore-rbdfence", 0o755, readFile(r.t, filepath.Join(bin, "restore-rbdfence")))
	r.wantFile(remotes+"vmm/kvm/migrate-rbdfence", 0o755, readFile(r.t, filepath.Join(bin, "migrate-rbdfence")))
	r.wantFile(remotes+"vmm/kvm/attach-rbdfence", 0o755, readFile(r.t, filepath.Join(bin, "attach-rbdfence")))
	// OpenNebula's TM scripts are not replaced (migration is a VMM local action).
	for _, op := range tmOps {
		r.wantFile(remotes+"tm/ceph/"+op, 0o755, r.orig[remotes+"tm/ceph/"+op])
		r.wantGone(remotes + "tm/ceph/" + op + ".rbdfence-orig")
	}
	r.wantFile(remotes+"rbdfence/rbdfence-host", 0o755, readFile(r.t, filepath.Join(bin, "rbdfence")))
	r.wantFile(remotes+"rbdfence/prestart", 0o755, readFile(r.t, filepath.Join(bin, "prestart")))
	// The timer that delivers spooled events (here and the hosts').
	r.wantFile("etc/systemd/system/rbdfence-events.timer", 0o644, nil)
	if svc := string(r.read("etc/systemd/system/rbdfence-events.service")); !strings.Contains(svc, "ExecStart=/var/lib/one/remotes/rbdfence/rbdfence-host events flush") {
		r.t.Fatalf("rbdfence-events.service:\n%s", svc)
	}
	// OpenNebula's /etc/one keeps its mode although the package has a file in it.
	if st, err := os.Stat(r.path("etc/one")); err != nil || st.Mode().Perm() != 0o750 {
		r.t.Fatalf("etc/one: %v %v, want OpenNebula's 0750 kept", st.Mode(), err)
	}
}

// wantFrontendUndone checks that install.sh frontend's work is undone:
// OpenNebula's files are back and nothing of ours is in its paths.
func (r *root) wantFrontendUndone() {
	r.t.Helper()
	r.wantOriginals("var/lib/one/")
	r.wantOriginals("etc/one/")
	gone := []string{remotes + "vmm/kvm/deploy-rbdfence", remotes + "vmm/kvm/restore-rbdfence", remotes + "vmm/kvm/migrate-rbdfence", remotes + "vmm/kvm/attach-rbdfence", remotes + "rbdfence",
		"var/lib/rbdfence/install-frontend", "etc/systemd/system/rbdfence-events.service", "etc/systemd/system/rbdfence-events.timer"}
	for _, op := range tmOps {
		gone = append(gone, remotes+"tm/ceph/"+op+".rbdfence-orig")
	}
	for _, g := range gone {
		if _, ours := r.orig[g]; !ours {
			r.wantGone(g)
		}
	}
}

// wantFrontendGone checks that nothing of rbdfence-frontend is left and
// OpenNebula's files are back.
func (r *root) wantFrontendGone() {
	r.t.Helper()
	r.wantFrontendUndone()
	r.wantGone("usr/lib/rbdfence/packaging/install-frontend.sh")
	for _, b := range frontendBins {
		r.wantGone("usr/lib/rbdfence/bin/" + b)
	}
}

// wantHost checks the rbdfence-host package's files and the hook its
// post-install put in libvirt's qemu.d/.
func (r *root) wantHost(bin string) {
	r.t.Helper()
	hook := readFile(r.t, filepath.Join(bin, "rbdfence-hook"))
	r.wantFile("usr/lib/rbdfence/bin/rbdfence-hook", 0o755, hook)
	r.wantFile("usr/lib/rbdfence/packaging/install-host.sh", 0o755, readFile(r.t, filepath.Join(testenv.Root(), "packaging/install-host.sh")))
	r.wantFile(hookWrapper, 0o755, nil)
	r.wantGone(hookCopy) // the package's binary runs in place: nothing under /usr/local
	// The wrapper runs the packaged hook by the path the installed system
	// sees (not under $DPKG_ROOT) and reads the default config.
	w := string(r.read(hookWrapper))
	if !strings.HasPrefix(w, "#!/bin/sh\n") || !strings.Contains(w, "exec '/usr/lib/rbdfence/bin/rbdfence-hook' -- \"$@\"\n") {
		r.t.Fatalf("%s does not run /usr/lib/rbdfence/bin/rbdfence-hook:\n%s", hookWrapper, w)
	}
	r.wantOriginals("etc/libvirt/")
}

func (r *root) wantHostGone() {
	r.t.Helper()
	r.wantOriginals("etc/libvirt/")
	r.wantGone(hookWrapper, "usr/local", "var/lib/rbdfence/install-host",
		"usr/lib/rbdfence/bin/rbdfence-hook", "usr/lib/rbdfence/packaging/install-host.sh")
}

// TestFrontendDeb: the front-end packages install into a stand-in
// OpenNebula front-end; the post-install puts the wrappers in place, keeps
// the Ceph TM's scripts as originals and prints the VM_MAD change without
// making it; removal puts OpenNebula's files back byte for byte; the config
// survives a removal and goes with the purge, after which the tree is as it
// was before.
func TestFrontendDeb(t *testing.T) {
	t.Parallel()
	p := release(t)
	r := newRoot(t)
	r.opennebula()
	before := r.snapshot()

	out := r.mustDpkg("-i", p.deb["rbdfence"], p.deb["rbdfence-frontend"])
	if !strings.Contains(out, vmMadChange) || !strings.Contains(out, "onehost sync --force") ||
		!strings.Contains(out, "install.sh frontend --prefix "+r.dir+" --apply") {
		t.Fatalf("the post-install did not print the VM_MAD change and what to do:\n%s", out)
	}
	r.wantStatus("rbdfence", installed)
	r.wantStatus("rbdfence-frontend", installed)
	r.wantFile("etc/one/oned.conf", 0o640, []byte(onedConf)) // not changed without --apply
	r.wantCommon(p)
	r.wantFrontend(p.bin)
	// The wrappers run from where OpenNebula calls them.
	o, e, code := run(t, "", nil, r.path(remotes+"vmm/kvm/deploy-rbdfence"))
	if code != 2 || !strings.Contains(o+e, "usage: deploy-rbdfence") {
		t.Fatalf("installed deploy-rbdfence: exit %d\n%s%s", code, o, e)
	}
	// The packaged config is valid (strict: no unknown key).
	if err := config.Parse(r.read(confPath), config.Default()); err != nil {
		t.Fatalf("packaged config: %v", err)
	}

	r.mustDpkg("-r", "rbdfence-frontend")
	r.wantStatus("rbdfence-frontend", notThere)
	r.wantFrontendGone()
	r.wantCommon(p) // the other package is untouched

	r.mustDpkg("-r", "rbdfence")
	r.wantStatus("rbdfence", configFiles)
	r.wantFile(confPath, 0o644, nil)
	r.wantGone("usr/lib/rbdfence", "usr/bin/rbdfence")

	r.mustDpkg("-P", "rbdfence")
	r.wantStatus("rbdfence", notThere)
	sameTree(t, "after purge", before, r.snapshot())
}

// TestHostDeb: the host packages install into a stand-in KVM host whose
// qemu.d/ already has another product's hook; the post-install adds our
// wrapper and the hook binary; removal and purge leave the tree as it was.
func TestHostDeb(t *testing.T) {
	t.Parallel()
	p := release(t)
	r := newRoot(t)
	r.libvirt()
	before := r.snapshot()

	r.mustDpkg("-i", p.deb["rbdfence"], p.deb["rbdfence-host"])
	r.wantStatus("rbdfence", installed)
	r.wantStatus("rbdfence-host", installed)
	r.wantCommon(p)
	r.wantHost(p.bin)

	r.mustDpkg("-r", "rbdfence-host")
	r.wantStatus("rbdfence-host", notThere)
	r.wantHostGone()

	r.mustDpkg("-P", "rbdfence")
	r.wantStatus("rbdfence", notThere)
	sameTree(t, "after purge", before, r.snapshot())
}

// TestAllInOneDeb: a front-end that is also a KVM host takes all three
// packages in one dpkg call (no file is in two packages); removing one role
// leaves the other as it was.
func TestAllInOneDeb(t *testing.T) {
	t.Parallel()
	p := release(t)
	r := newRoot(t)
	r.opennebula()
	r.libvirt()
	before := r.snapshot()

	r.mustDpkg("-i", p.deb["rbdfence"], p.deb["rbdfence-frontend"], p.deb["rbdfence-host"])
	for _, pkg := range []string{"rbdfence", "rbdfence-frontend", "rbdfence-host"} {
		r.wantStatus(pkg, installed)
	}
	r.wantCommon(p)
	r.wantFrontend(p.bin)
	r.wantHost(p.bin)

	r.mustDpkg("-r", "rbdfence-host")
	r.wantHostGone()
	r.wantFrontend(p.bin)
	r.wantCommon(p)

	r.mustDpkg("-r", "rbdfence-frontend")
	r.wantFrontendGone()

	r.mustDpkg("-P", "rbdfence")
	sameTree(t, "after purge", before, r.snapshot())
}

// TestUpgradeDeb: an upgrade keeps the install. The operator applied the
// VM_MAD change and edited the config; a newer version (its drivers
// changed) is installed over it: the wrappers are the new ones, OpenNebula's
// scripts are still the originals, oned.conf still enables the wrappers (the
// old version's pre-removal did not uninstall) and the edited config is
// kept. The purge then restores oned.conf and the rest.
func TestUpgradeDeb(t *testing.T) {
	t.Parallel()
	a := release(t)
	// The new version: every binary changed (a trailer appended, which an
	// ELF binary ignores).
	binB := t.TempDir()
	for _, b := range append(append(append([]string{}, commonBins...), frontendBins...), hostBins...) {
		copyFile(t, filepath.Join(a.bin, b), filepath.Join(binB, b))
		f, err := os.OpenFile(filepath.Join(binB, b), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString("\nrbdfence upgrade test\n"); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	b := build(t, "upgrade", binB, a.version+".1", "deb")
	if _, _, code := run(t, "", nil, "dpkg", "--compare-versions", b.version, "gt", a.version); code != 0 {
		t.Fatalf("version %s is not later than %s for dpkg", b.version, a.version)
	}

	r := newRoot(t)
	r.opennebula()
	before := r.snapshot()
	r.mustDpkg("-i", a.deb["rbdfence"], a.deb["rbdfence-frontend"])
	if o, e, code := run(t, "", nil, "bash", r.path("usr/lib/rbdfence/install.sh"), "frontend", "--prefix", r.dir, "--apply"); code != 0 {
		t.Fatalf("install.sh frontend --apply: exit %d\n%s%s", code, o, e)
	}
	applied := r.read("etc/one/oned.conf")
	if !strings.Contains(string(applied), "-l deploy=deploy-rbdfence,restore=restore-rbdfence") {
		t.Fatalf("--apply did not change oned.conf:\n%s", applied)
	}
	edited := append(r.read(confPath), "# edited by the operator\n"...)
	if err := os.WriteFile(r.path(confPath), edited, 0o644); err != nil {
		t.Fatal(err)
	}

	out := r.mustDpkg("-i", b.deb["rbdfence"], b.deb["rbdfence-frontend"])
	for _, pkg := range []string{"rbdfence", "rbdfence-frontend"} {
		r.wantStatus(pkg, installed)
		if v, _, _ := run(t, "", nil, "dpkg-query", "--admindir="+r.path("var/lib/dpkg"), "-W", "-f=${Version}", pkg); v != b.version+"-1" {
			t.Fatalf("%s is at version %q after the upgrade, want %s-1", pkg, v, b.version)
		}
	}
	r.wantFrontend(binB)
	r.wantFile("etc/one/oned.conf", 0o640, applied)
	r.wantFile(confPath, 0o644, edited)
	if strings.Contains(out, "uninstalled") {
		t.Fatalf("the upgrade ran the uninstall:\n%s", out)
	}

	r.mustDpkg("-P", "rbdfence-frontend", "rbdfence")
	r.wantFrontendGone()
	sameTree(t, "after purge", before, r.snapshot())
}

// TestFailedPostinstDeb: when install.sh frontend fails in the post-install,
// dpkg says so and leaves the package unconfigured, and the half-done
// install is rolled back: OpenNebula's files are as they were. Once the
// cause is fixed, dpkg --configure -a finishes the install.
func TestFailedPostinstDeb(t *testing.T) {
	t.Parallel()
	p := release(t)

	t.Run("fails half-way", func(t *testing.T) {
		t.Parallel()
		r := newRoot(t)
		r.opennebula()
		// remotes/rbdfence is a file: install.sh frontend fails after it has
		// put the VMM and TM wrappers in place.
		r.write(remotes+"rbdfence", "in the way\n", 0o644)
		before := r.snapshot()

		out, code := r.dpkg("-i", p.deb["rbdfence"], p.deb["rbdfence-frontend"])
		if code == 0 {
			t.Fatalf("dpkg -i succeeded although install.sh failed:\n%s", out)
		}
		for _, want := range []string{"undoing what it did", "rolled back: rbdfence-frontend is NOT active", "dpkg --configure -a", "dpkg: error processing package rbdfence-frontend"} {
			if !strings.Contains(out, want) {
				t.Fatalf("dpkg output does not say %q:\n%s", want, out)
			}
		}
		r.wantStatus("rbdfence", installed)
		r.wantStatus("rbdfence-frontend", "install ok half-configured")
		r.wantFrontendUndone()

		// Fix the cause; dpkg finishes the install.
		if err := os.Remove(r.path(remotes + "rbdfence")); err != nil {
			t.Fatal(err)
		}
		delete(r.orig, remotes+"rbdfence")
		delete(before, remotes+"rbdfence")
		r.mustDpkg("--configure", "-a")
		r.wantStatus("rbdfence-frontend", installed)
		r.wantFrontend(p.bin)

		r.mustDpkg("-P", "rbdfence-frontend", "rbdfence")
		sameTree(t, "after purge", before, r.snapshot())
	})

	t.Run("no OpenNebula", func(t *testing.T) {
		t.Parallel()
		r := newRoot(t)
		before := r.snapshot()
		out, code := r.dpkg("-i", p.deb["rbdfence"], p.deb["rbdfence-frontend"])
		if code == 0 || !strings.Contains(out, "is this an OpenNebula front-end") || !strings.Contains(out, "NOT active") {
			t.Fatalf("dpkg -i on a machine without OpenNebula: exit %d\n%s", code, out)
		}
		r.wantStatus("rbdfence-frontend", "install ok half-configured")
		// A package that never got configured can be purged cleanly.
		r.mustDpkg("-P", "rbdfence-frontend", "rbdfence")
		sameTree(t, "after purge", before, r.snapshot())
	})
}

// TestDebControl: names, architecture, and the dependencies: the Ceph
// client libraries for the packages with cgo binaries (rbdfence,
// rbdfence-host), not for the pure-Go drivers; the role packages need the
// rbdfence of the same build.
func TestDebControl(t *testing.T) {
	p := release(t)
	arch := strings.TrimSpace(mustRun(t, "go", "env", "GOARCH"))
	ceph := "librados2 (>= 16.2), librbd1 (>= 16.2)"
	exact := "rbdfence (= " + p.version + "-1)"
	for name, depends := range map[string]string{
		"rbdfence":          ceph,
		"rbdfence-frontend": exact,
		"rbdfence-host":     exact + ", " + ceph,
	} {
		for field, want := range map[string]string{"Package": name, "Version": p.version + "-1", "Architecture": arch, "Depends": depends} {
			if got := strings.TrimSpace(mustRun(t, "dpkg-deb", "-f", p.deb[name], field)); got != want {
				t.Fatalf("%s: %s is %q, want %q", name, field, got, want)
			}
		}
		if m := strings.TrimSpace(mustRun(t, "dpkg-deb", "-f", p.deb[name], "Maintainer")); !strings.Contains(m, "@") {
			t.Fatalf("%s: Maintainer %q", name, m)
		}
	}
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

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
