// Package packaging_test builds rbdfence's packages with packaging/package.sh
// and checks them with the real tools: the .deb packages are installed with
// dpkg into scratch roots (dpkg --root, --force-script-chrootless: the
// maintainer scripts run here with $DPKG_ROOT set) that hold stand-ins of
// OpenNebula's and libvirt's files, then removed and purged; the .rpm
// packages are read with rpm and their scriptlets run with rpm's arguments.
package packaging_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// Binaries in each package, below /usr/lib/rbdfence/bin.
var (
	commonBins   = []string{"rbdfence"}
	frontendBins = []string{"deploy-rbdfence", "restore-rbdfence", "migrate-rbdfence", "attach-rbdfence", "onedconf-rbdfence", "prestart"}
	hostBins     = []string{"rbdfence-hook"}
	tmOps        = []string{"premigrate", "postmigrate", "failmigrate"}
)

const confPath = "etc/one/rbdfence.yaml"

// pkgs is one build of the three packages.
type pkgs struct {
	version string // package version without the release
	bin     string // the binaries packaged
	deb     map[string]string
	rpm     map[string]string
}

var (
	buildMu sync.Mutex
	builds  = map[string]*pkgs{}
	outDirs []string // removed when the tests are done
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range outDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

// packageScript is packaging/package.sh.
func packageScript() string { return filepath.Join(testenv.Root(), "packaging/package.sh") }

// build runs package.sh once per key (binaries from bin, version "" for
// the one from git) and returns the packages; every name is checked.
func build(t *testing.T, key, bin, version, formats string) *pkgs {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := builds[key]; ok {
		return p
	}
	out, err := os.MkdirTemp("", "rbdfence-pkg-test-"+key+"-")
	if err != nil {
		t.Fatal(err)
	}
	outDirs = append(outDirs, out)
	args := []string{packageScript(), "--bin", bin, "--out", out, "--formats", formats}
	if version != "" {
		args = append(args, "--version", version)
	}
	stdout, stderr, code := run(t, "", nil, "bash", args...)
	if code != 0 {
		t.Fatalf("package.sh: exit %d\n%s%s", code, stdout, stderr)
	}
	p := &pkgs{bin: bin, deb: map[string]string{}, rpm: map[string]string{}}
	m := regexp.MustCompile(`package\.sh: rbdfence (\S+) `).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("package.sh did not say the version:\n%s", stderr)
	}
	p.version = m[1]
	printed := strings.Fields(stdout)
	for _, name := range []string{"rbdfence", "rbdfence-frontend", "rbdfence-host"} {
		for _, f := range strings.Fields(formats) {
			// name_VERSION-1_ARCH.deb, name-VERSION-1.ARCH.rpm
			pat := regexp.QuoteMeta("/"+name+"_"+p.version+"-1_") + `[a-z0-9]+\.deb$`
			if f == "rpm" {
				pat = regexp.QuoteMeta("/"+name+"-"+p.version+"-1.") + `[a-z0-9_]+\.rpm$`
			}
			re := regexp.MustCompile(pat)
			file := ""
			for _, l := range printed {
				if re.MatchString(l) {
					file = l
				}
			}
			if file == "" {
				t.Fatalf("package.sh printed no %s package of %s %s:\n%s", f, name, p.version, stdout)
			}
			if _, err := os.Stat(file); err != nil {
				t.Fatalf("package.sh printed %s but did not build it: %v", file, err)
			}
			if f == "deb" {
				p.deb[name] = file
			} else {
				p.rpm[name] = file
			}
		}
	}
	builds[key] = p
	return p
}

// release is the build from the test binaries with the version from git, as
// `make package` does it.
func release(t *testing.T) *pkgs {
	t.Helper()
	return build(t, "release", filepath.Dir(testenv.Bin(t, "rbdfence")), "", "deb rpm")
}

// run runs name with args (in dir if set, env added to the environment) and
// returns its output and exit code; failing to start it fails the test.
func run(t *testing.T, dir string, env []string, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return o.String(), e.String(), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return o.String(), e.String(), 0
}

// root is a scratch root with its own dpkg database.
type root struct {
	t    *testing.T
	dir  string
	orig map[string][]byte // files made by the test, with their content
}

func newRoot(t *testing.T) *root {
	t.Helper()
	r := &root{t: t, dir: t.TempDir(), orig: map[string][]byte{}}
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers", "var/log"} {
		r.mkdir(d, 0o755)
	}
	// The Ceph client libraries the packages depend on, as Debian 12 has
	// them, so that dpkg installs without --force-depends and configures the
	// packages in dependency order, as on a real machine.
	r.write("var/lib/dpkg/status", cephLibsStatus, 0o644)
	return r
}

const cephLibsStatus = `Package: librados2
Status: install ok installed
Priority: optional
Section: libs
Architecture: amd64
Version: 16.2.15+ds-0+deb12u2
Description: RADOS distributed object store client library (stand-in)

Package: librbd1
Status: install ok installed
Priority: optional
Section: libs
Architecture: amd64
Version: 16.2.15+ds-0+deb12u2
Description: RADOS block device client library (stand-in)
`

func (r *root) path(rel string) string { return filepath.Join(r.dir, rel) }

func (r *root) mkdir(rel string, mode os.FileMode) {
	r.t.Helper()
	if err := os.MkdirAll(r.path(rel), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Chmod(r.path(rel), mode); err != nil {
		r.t.Fatal(err)
	}
}

func (r *root) write(rel, content string, mode os.FileMode) {
	r.t.Helper()
	if err := os.MkdirAll(filepath.Dir(r.path(rel)), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(r.path(rel), []byte(content), mode); err != nil {
		r.t.Fatal(err)
	}
	if err := os.Chmod(r.path(rel), mode); err != nil {
		r.t.Fatal(err)
	}
	if !strings.HasPrefix(rel, "var/lib/dpkg/") {
		r.orig[rel] = []byte(content)
	}
}

func (r *root) read(rel string) []byte {
	r.t.Helper()
	b, err := os.ReadFile(r.path(rel))
	if err != nil {
		r.t.Fatal(err)
	}
	return b
}

const onedConf = `# oned.conf (test stand-in)
VM_MAD = [
    NAME           = "kvm",
    SUNSTONE_NAME  = "KVM",
    EXECUTABLE     = "one_vmm_exec",
    ARGUMENTS      = "-t 15 -r 0 kvm -p",
    DEFAULT        = "vmm_exec/vmm_exec_kvm.conf",
    TYPE           = "kvm",
    KEEP_SNAPSHOTS = "yes"
]
`

// opennebula puts a stand-in of an OpenNebula front-end into r: the Ceph
// TM's migrate scripts with recognisable content, the kvm VMM's deploy,
// /etc/one (0750, as OpenNebula has it) with an oned.conf.
func (r *root) opennebula() {
	r.t.Helper()
	for _, op := range tmOps {
		r.write("var/lib/one/remotes/tm/ceph/"+op, "#!/bin/bash\n# OpenNebula's tm/ceph/"+op+"\nexit 0\n", 0o755)
	}
	r.write("var/lib/one/remotes/tm/ceph/clone", "#!/bin/bash\n# OpenNebula's tm/ceph/clone\n", 0o755)
	r.write("var/lib/one/remotes/vmm/kvm/deploy", "#!/bin/bash\n# OpenNebula's vmm/kvm/deploy\n", 0o755)
	r.mkdir("etc/one", 0o750)
	r.write("etc/one/oned.conf", onedConf, 0o640)
}

// libvirt puts a stand-in of a KVM host's libvirt hooks into r, with
// another product's hook already in qemu.d/.
func (r *root) libvirt() {
	r.t.Helper()
	r.mkdir("etc/libvirt/hooks/qemu.d", 0o755)
	r.write("etc/libvirt/hooks/qemu.d/50-other", "#!/bin/sh\n# another hook\nexit 0\n", 0o755)
}

// dpkg runs dpkg on the scratch root, as an image builder would
// (--root, maintainer scripts outside a chroot with $DPKG_ROOT set), with
// its log in the root.
func (r *root) dpkg(args ...string) (out string, code int) {
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

// status returns dpkg's status of pkg in r ("install ok installed", or
// "not-installed" when dpkg does not know it).
func (r *root) status(pkg string) string {
	r.t.Helper()
	out, _, code := run(r.t, "", nil, "dpkg-query", "--admindir="+r.path("var/lib/dpkg"), "-W", "-f=${Status}", pkg)
	if code != 0 || strings.HasSuffix(out, " not-installed") {
		return "not-installed"
	}
	return out
}

func (r *root) wantStatus(pkg, want string) {
	r.t.Helper()
	if got := r.status(pkg); got != want {
		r.t.Fatalf("dpkg status of %s: %q, want %q", pkg, got, want)
	}
}

// snapshot returns every path below the root (but dpkg's database and
// logs) with its type, mode, owner and content hash or link target.
func (r *root) snapshot() map[string]string {
	r.t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(r.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r.dir, p)
		if rel == "var/lib/dpkg" || rel == "var/log" {
			return filepath.SkipDir
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		v := info.Mode().String()
		if st, ok := statOwner(info); ok {
			v += " " + st
		}
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += fmt.Sprintf(" %x", sha256.Sum256(b))
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			v += " -> " + l
		}
		snap[rel] = v
		return nil
	})
	if err != nil {
		r.t.Fatal(err)
	}
	return snap
}

// sameTree fails the test with the differences when got is not want.
func sameTree(t *testing.T, what string, want, got map[string]string) {
	t.Helper()
	var diff []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			diff = append(diff, "missing: "+p+" ("+w+")")
		} else if g != w {
			diff = append(diff, "changed: "+p+": "+w+" => "+g)
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			diff = append(diff, "left behind: "+p+" ("+g+")")
		}
	}
	if len(diff) > 0 {
		sort.Strings(diff)
		t.Fatalf("%s: the tree differs from before the install:\n%s", what, strings.Join(diff, "\n"))
	}
}

// wantFile checks that rel is a regular file with mode perm and, if
// content is not nil, exactly that content.
func (r *root) wantFile(rel string, perm os.FileMode, content []byte) {
	r.t.Helper()
	st, err := os.Lstat(r.path(rel))
	if err != nil {
		r.t.Fatalf("%s: %v", rel, err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm() != perm {
		r.t.Fatalf("%s: mode %v, want a file with %v", rel, st.Mode(), perm)
	}
	if content != nil && !bytes.Equal(r.read(rel), content) {
		r.t.Fatalf("%s: content differs (%d bytes starting %q, want %d bytes starting %q)", rel, len(r.read(rel)), clip(r.read(rel)), len(content), clip(content))
	}
}

func (r *root) wantGone(rels ...string) {
	r.t.Helper()
	for _, rel := range rels {
		if _, err := os.Lstat(r.path(rel)); err == nil {
			r.t.Fatalf("%s is still there", rel)
		} else if !os.IsNotExist(err) {
			r.t.Fatal(err)
		}
	}
}

// wantOriginals checks that every file the test made is there again,
// byte for byte, with its mode.
func (r *root) wantOriginals(prefix string) {
	r.t.Helper()
	for rel, content := range r.orig {
		if strings.HasPrefix(rel, prefix) {
			st, err := os.Lstat(r.path(rel))
			if err != nil || !st.Mode().IsRegular() {
				r.t.Fatalf("original %s is not back: %v", rel, err)
			}
			if got := r.read(rel); !bytes.Equal(got, content) {
				r.t.Fatalf("original %s is not back byte for byte: %d bytes starting %q, want %q", rel, len(got), clip(got), content)
			}
		}
	}
}

// clip returns the start of b, for messages.
func clip(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}

// statOwner returns the owner and group of info as "uid:gid".
func statOwner(info fs.FileInfo) (string, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%d:%d", st.Uid, st.Gid), true
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
