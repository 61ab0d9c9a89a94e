package packaging_test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// rpmFile is one line of `rpm -qlp --dump`.
type rpmFile struct {
	mode   string // octal, with the file type: 0100755, 040755, 0120777
	digest string // sha256 of a regular file
	config bool
	doc    bool
	link   string // symlink target
	owner  string // user:group
}

// needRPM fails the test, saying how to fix it, when rpm's tools are missing.
func needRPM(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"rpm", "rpmbuild", "rpmlint"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the Debian packages rpm and rpmlint provide it (test/deps.sh installs them)", tool)
		}
	}
}

func rpmDump(t *testing.T, file string) map[string]rpmFile {
	t.Helper()
	out, errOut, code := run(t, "", nil, "rpm", "-qlp", "--dump", file)
	if code != 0 {
		t.Fatalf("rpm -qlp --dump %s: exit %d: %s", file, code, errOut)
	}
	files := map[string]rpmFile{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		// path size mtime digest mode owner group isconfig isdoc rdev symlink
		f := strings.Fields(l)
		if len(f) != 11 {
			t.Fatalf("rpm --dump line %q: want 11 fields", l)
		}
		files[f[0]] = rpmFile{mode: f[4], digest: f[3], owner: f[5] + ":" + f[6], config: f[7] == "1", doc: f[8] == "1", link: f[10]}
	}
	return files
}

func rpmQuery(t *testing.T, file string, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, "", nil, "rpm", append([]string{"-qp"}, append(args, file)...)...)
	if code != 0 {
		t.Fatalf("rpm -qp %v %s: exit %d: %s", args, file, code, errOut)
	}
	return out
}

// TestRPMContents reads each .rpm with rpm: exactly the layout's files with
// their modes, content, %config(noreplace) and links, the docs and licenses,
// the directories it owns; the requires that rpm computed from the binaries
// (the front-end's: none of a library), Group and %changelog.
func TestRPMContents(t *testing.T) {
	needRPM(t)
	p := release(t)
	for _, name := range pkgNames {
		t.Run(name, func(t *testing.T) {
			rpm := p.rpm[name]
			if got := rpmQuery(t, rpm, "--qf", "%{NAME} %{VERSION}-%{RELEASE} %{LICENSE} %{GROUP}"); got != name+" "+p.version+"-1 Apache-2.0 Applications/System" {
				t.Fatalf("name, version, license, group: %q", got)
			}
			files := rpmDump(t, rpm)
			want := map[string]bool{}
			for _, e := range packaged(t, name, "rpm") {
				want[e.path] = true
				f, ok := files[e.path]
				if !ok {
					t.Fatalf("%s is not in the package", e.path)
				}
				if f.owner != "root:root" || f.config != e.flags["conf"] {
					t.Fatalf("%s: owner %s config %v; want root:root, config %v", e.path, f.owner, f.config, e.flags["conf"])
				}
				switch e.mode {
				case "dir":
					if f.mode != "040755" {
						t.Fatalf("%s: mode %s, want a directory", e.path, f.mode)
					}
				case "link":
					if !strings.HasPrefix(f.mode, "0120") || f.link != e.src {
						t.Fatalf("%s: mode %s link %q, want a link to %s", e.path, f.mode, f.link, e.src)
					}
				default:
					if f.mode != "0100"+strings.TrimPrefix(e.mode, "0") || f.digest != fmt.Sprintf("%x", sha256.Sum256(e.content(t, p.bin))) {
						t.Fatalf("%s: mode %s, or not %s", e.path, f.mode, e.src)
					}
				}
			}
			var extra []string
			for path, f := range files {
				switch {
				case want[path]:
				case strings.HasPrefix(path, "/usr/share/licenses/"+name):
				case name == "rbdfence" && strings.HasPrefix(path, "/usr/share/doc/rbdfence"):
					if !f.doc && path != "/usr/share/doc/rbdfence" {
						t.Fatalf("%s is not %%doc", path)
					}
				case strings.HasPrefix(f.mode, "040") && strings.Contains(path, "rbdfence"):
				default:
					extra = append(extra, path)
				}
			}
			sort.Strings(extra)
			if len(extra) > 0 {
				t.Fatalf("files that are not in packaging/layout: %v", extra)
			}
			req := "\n" + rpmQuery(t, rpm, "--requires")
			has := func(r string) bool { return strings.Contains(req, "\n"+r+"\n") }
			switch name {
			case "rbdfence-frontend":
				if strings.Contains(req, ".so") {
					t.Fatalf("the front-end's drivers are pure Go, yet it requires:%s", req)
				}
				if s := rpmQuery(t, rpm, "--suggests"); s != "rbdfence = "+p.version+"-1\n" {
					t.Fatalf("suggests %q", s)
				}
			default:
				for _, r := range []string{"libc.so.6(GLIBC_2.34)(64bit)", "librados.so.2()(64bit)", "libstdc++.so.6()(64bit)", "librbd.so.1()(64bit)"} {
					if !has(r) {
						t.Fatalf("does not require %s:%s", r, req)
					}
				}
				if name == "rbdfence-host" && !has("rbdfence = "+p.version+"-1") {
					t.Fatalf("does not require its rbdfence:%s", req)
				}
				if name == "rbdfence" && !has("logrotate") {
					t.Fatalf("does not require logrotate:%s", req)
				}
			}
			if cl := rpmQuery(t, rpm, "--changelog"); !strings.Contains(cl, "> - "+p.version+"-1\n- rbdfence "+p.version+"; every change:") {
				t.Fatalf("%%changelog:\n%s", cl)
			}
		})
	}
}

// rroot is a scratch root with its own rpm database. rpm --root would
// chroot into it for the scriptlets, which needs a whole system: the files
// go in with --noscripts, and each scriptlet runs as rpm runs it (sh SCRIPT
// ARG), in rpm's order, with $DPKG_ROOT set to the root (the scripts honour it).
type rroot struct {
	t   *testing.T
	dir string
}

func newRRoot(t *testing.T) *rroot {
	t.Helper()
	r := &rroot{t: t, dir: t.TempDir()}
	// The directories a distribution's own packages (filesystem, systemd,
	// logrotate) own.
	for _, d := range []string{"etc/systemd/system/timers.target.wants", "etc/logrotate.d", "usr/bin", "usr/sbin", "usr/lib/systemd/system", "usr/share/doc", "usr/share/licenses"} {
		if err := os.MkdirAll(filepath.Join(r.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/usr/lib/systemd/system/dnf-makecache.timer", filepath.Join(r.dir, "etc/systemd/system/timers.target.wants/dnf-makecache.timer")); err != nil {
		t.Fatal(err)
	}
	mustRun(t, "rpm", "--root", r.dir, "--initdb")
	return r
}

func (r *rroot) snapshot() map[string]string {
	return snapshot(r.t, r.dir, everything, "/root", "/var/lib/rpm", "/var/log", "/usr/lib/sysimage")
}

func (r *rroot) rpm(args ...string) string {
	r.t.Helper()
	return mustRun(r.t, "rpm", append([]string{"--root", r.dir, "--nodeps", "--noscripts"}, args...)...)
}

// scriptlet runs the scriptlet tag (PREIN, POSTIN, PREUN, POSTUN) of file
// with arg; a missing one is none.
func (r *rroot) scriptlet(file, tag, arg string) string {
	r.t.Helper()
	s := rpmQuery(r.t, file, "--qf", "%{"+tag+"}")
	if s == "(none)" {
		return ""
	}
	f := filepath.Join(r.t.TempDir(), "scriptlet")
	if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
		r.t.Fatal(err)
	}
	o, e, code := run(r.t, "", []string{"DPKG_ROOT=" + r.dir}, "sh", f, arg)
	if code != 0 {
		r.t.Fatalf("%s %%%s %s: exit %d\n%s%s", filepath.Base(file), strings.ToLower(tag), arg, code, o, e)
	}
	return o + e
}

// install is rpm -i of files: %pre 1, the files, %post 1 of each.
func (r *rroot) install(files ...string) string {
	r.t.Helper()
	var out string
	for _, f := range files {
		out += r.scriptlet(f, "PREIN", "1")
	}
	r.rpm(append([]string{"-i"}, files...)...)
	for _, f := range files {
		out += r.scriptlet(f, "POSTIN", "1")
	}
	return out
}

// upgrade is rpm -U of old to new: new %pre 2, the files, new %post 2, old
// %preun 1, old %postun 1 (rpm's order).
func (r *rroot) upgrade(old, new string) string {
	r.t.Helper()
	out := r.scriptlet(new, "PREIN", "2")
	r.rpm("-U", new)
	out += r.scriptlet(new, "POSTIN", "2")
	out += r.scriptlet(old, "PREUN", "1")
	return out + r.scriptlet(old, "POSTUN", "1")
}

// erase is rpm -e of name (file: its package): %preun 0, the files, %postun 0.
func (r *rroot) erase(name, file string) string {
	r.t.Helper()
	out := r.scriptlet(file, "PREUN", "0")
	r.rpm("-e", name)
	return out + r.scriptlet(file, "POSTUN", "0")
}

// wantOwned checks that rpm -qf finds a package for every path new since
// before but the scripts' state.
func (r *rroot) wantOwned(before map[string]string) int {
	r.t.Helper()
	ps := newPaths(before, r.snapshot())
	var unowned []string
	for _, p := range ps {
		if scriptState.MatchString(p) {
			continue
		}
		if _, _, code := run(r.t, "", nil, "rpm", "--root", r.dir, "-qf", p); code != 0 {
			unowned = append(unowned, p)
		}
	}
	if len(unowned) > 0 {
		r.t.Fatalf("%d of %d installed paths are no package's (rpm -qf):\n%s", len(unowned), len(ps), strings.Join(unowned, "\n"))
	}
	return len(ps)
}

// TestRPMUpgrade: the previous release's .rpm packages, with the VM_MAD
// change applied, upgraded to this tree's: every installed path is owned
// (rpm -qf), nothing of the previous scripts is left, oned.conf keeps the
// change; the erase gives OpenNebula's and libvirt's files back.
func TestRPMUpgrade(t *testing.T) {
	needRPM(t)
	t.Parallel()
	a, b := previous(t), release(t)
	r := newRRoot(t)
	opennebula(t, r.dir)
	if err := os.MkdirAll(filepath.Join(r.dir, "etc/libvirt/hooks/qemu.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := r.snapshot()

	r.install(a.rpm["rbdfence"], a.rpm["rbdfence-frontend"], a.rpm["rbdfence-host"])
	mustRunIn(t, "", []string{"RBDFENCE_BIN=" + filepath.Join(r.dir, "usr/lib/rbdfence/bin")}, "bash", filepath.Join(r.dir, "usr/lib/rbdfence/install.sh"), "frontend", "--prefix", r.dir, "--apply")
	applied := string(readFile(t, filepath.Join(r.dir, "etc/one/oned.conf")))

	for _, pkg := range pkgNames {
		out := r.upgrade(a.rpm[pkg], b.rpm[pkg])
		if strings.Contains(out, "above") {
			t.Fatalf("%s's upgrade speaks of a change above:\n%s", pkg, out)
		}
	}
	for _, pkg := range pkgNames {
		wantInstalled(t, r.dir, pkg, "rpm", b.bin)
	}
	if got := string(readFile(t, filepath.Join(r.dir, "etc/one/oned.conf"))); got != applied {
		t.Fatalf("oned.conf changed in the upgrade:\n%s", got)
	}
	wantGone(t, r.dir, "var/lib/rbdfence/install-frontend", "var/lib/rbdfence/install-host", "etc/systemd/system/rbdfence-events.timer", "usr/lib/rbdfence/install.sh")
	t.Logf("after the upgrade: %d paths installed, every one owned by its package", r.wantOwned(before))

	r.erase("rbdfence-frontend", b.rpm["rbdfence-frontend"])
	if got := string(readFile(t, filepath.Join(r.dir, "etc/one/oned.conf"))); got != onedConf {
		t.Fatalf("oned.conf after the erase:\n%s", got)
	}
	r.erase("rbdfence-host", b.rpm["rbdfence-host"])
	r.erase("rbdfence", b.rpm["rbdfence"])
	sameTree(t, "after the erase", before, r.snapshot())
}

// TestRPMInstall: a fresh install of the three .rpm packages: every path
// owned (rpm -qf); the erase leaves the tree as it was, the hook
// directory that was there before included.
func TestRPMInstall(t *testing.T) {
	needRPM(t)
	t.Parallel()
	p := release(t)
	r := newRRoot(t)
	opennebula(t, r.dir)
	if err := os.MkdirAll(filepath.Join(r.dir, "etc/libvirt/hooks/qemu.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := r.snapshot()
	out := r.install(p.rpm["rbdfence"], p.rpm["rbdfence-frontend"], p.rpm["rbdfence-host"])
	if !strings.Contains(out, vmMadChange) || !strings.Contains(out, "make the oned.conf change above") {
		t.Fatalf("%%post of rbdfence-frontend:\n%s", out)
	}
	for _, pkg := range pkgNames {
		wantInstalled(t, r.dir, pkg, "rpm", p.bin)
	}
	t.Logf("%d paths installed, every one owned by its package", r.wantOwned(before))
	r.erase("rbdfence-host", p.rpm["rbdfence-host"])
	r.erase("rbdfence-frontend", p.rpm["rbdfence-frontend"])
	r.erase("rbdfence", p.rpm["rbdfence"])
	sameTree(t, "after the erase", before, r.snapshot())
}
