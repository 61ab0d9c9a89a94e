// Package packaging_test builds rbdfence's packages with packaging/package.sh
// (and those of the previous release, from its commit) and checks them with
// the real tools: dpkg into scratch roots (dpkg --root with
// --force-script-chrootless: the maintainer scripts run here with
// $DPKG_ROOT set) holding stand-ins of OpenNebula's and libvirt's files;
// apt on the machine itself (machine_test.go, under the system lock); rpm
// into scratch roots with the scriptlets run as rpm runs them; lintian and
// rpmlint. Every file is checked against packaging/layout, which package.sh
// and install.sh read too.
package packaging_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// previousRelease is the commit whose packages are the previous release:
// the last one whose maintainer scripts put the files in place by script
// (install.sh), which the packages of this tree take over on upgrade. Move it
// to the last release tag once there is one.
const previousRelease = "0300e5803d0b9c09d5ba9b0de7410d58aa420861"

var pkgNames = []string{"rbdfence", "rbdfence-frontend", "rbdfence-host"}

// entry is one line of packaging/layout.
type entry struct {
	pkg, mode, path, src string
	flags                map[string]bool
}

func layout(t *testing.T) []entry {
	t.Helper()
	var es []entry
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, filepath.Join(testenv.Root(), "packaging/layout"))))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 5 {
			t.Fatalf("packaging/layout: %q: want 5 fields", sc.Text())
		}
		e := entry{pkg: f[0], mode: f[1], path: f[2], src: f[3], flags: map[string]bool{}}
		for _, fl := range strings.Split(f[4], ",") {
			e.flags[fl] = true
		}
		es = append(es, e)
	}
	return es
}

// packaged returns the layout's entries of pkg that the packages ship, with
// the paths of format ("deb" or "rpm").
func packaged(t *testing.T, pkg, format string) []entry {
	t.Helper()
	unit := "/lib/systemd/system"
	if format == "rpm" {
		unit = "/usr/lib/systemd/system"
	}
	r := strings.NewReplacer("@UNITDIR@", unit, "@HOOKDIR@", "/usr/lib/rbdfence/bin")
	var es []entry
	for _, e := range layout(t) {
		if e.pkg != pkg || e.flags["local"] {
			continue
		}
		e.path, e.src = r.Replace(e.path), r.Replace(e.src)
		es = append(es, e)
	}
	return es
}

// content is what the packages put at e's path (binaries from bin).
func (e entry) content(t *testing.T, bin string) []byte {
	t.Helper()
	switch {
	case strings.HasPrefix(e.src, "bin/"):
		return readFile(t, filepath.Join(bin, strings.TrimPrefix(e.src, "bin/")))
	case strings.HasPrefix(e.src, "files/"):
		b := string(readFile(t, filepath.Join(testenv.Root(), "packaging", e.src)))
		b = strings.ReplaceAll(b, "@HOOK@", "'/usr/lib/rbdfence/bin/rbdfence-hook'")
		return []byte(strings.ReplaceAll(b, "@OPTIONS@", ""))
	}
	return readFile(t, filepath.Join(testenv.Root(), "packaging", e.src))
}

// pkgs is one build of the three packages.
type pkgs struct {
	version string // without the release
	tree    string // the source tree
	bin     string // the binaries packaged
	deb     map[string]string
	rpm     map[string]string
}

var (
	buildMu sync.Mutex
	builds  = map[string]*pkgs{}
	tmpDirs []string // removed when the tests are done
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, d := range tmpDirs {
		os.RemoveAll(d)
	}
	os.Exit(code)
}

func tempDir(t *testing.T, name string) string {
	t.Helper()
	d, err := os.MkdirTemp("", "rbdfence-pkg-test-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	tmpDirs = append(tmpDirs, d)
	return d
}

// release is this tree's packages, from binaries that `make build` made
// (as `make package` does).
func release(t *testing.T) *pkgs {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := builds["release"]; ok {
		return p
	}
	bin := tempDir(t, "bin")
	mustRunIn(t, testenv.Root(), nil, "make", "--no-print-directory", "build", "BIN="+bin)
	p := packageIn(t, testenv.Root(), bin, "", "deb rpm")
	p.tree = testenv.Root()
	builds["release"] = p
	return p
}

// previous is the previous release's packages, built from its commit (git
// archive, make build, its own packaging/package.sh) in a scratch directory.
func previous(t *testing.T) *pkgs {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if p, ok := builds["previous"]; ok {
		return p
	}
	src := tempDir(t, "previous")
	out, errOut, code := run(t, "", nil, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", testenv.Root(), previousRelease, src)
	if code != 0 {
		t.Fatalf("git archive %s: exit %d\n%s%s", previousRelease, code, out, errOut)
	}
	mustRunIn(t, src, nil, "make", "--no-print-directory", "build")
	n := strings.TrimSpace(mustRun(t, "git", "-C", testenv.Root(), "rev-list", "--count", previousRelease))
	p := packageIn(t, src, filepath.Join(src, "bin"), "v0.0.0-"+n+"-g"+previousRelease[:7], "deb rpm")
	p.tree = src
	builds["previous"] = p
	return p
}

// packageIn runs tree's packaging/package.sh and returns what it built.
func packageIn(t *testing.T, tree, bin, version, formats string) *pkgs {
	t.Helper()
	out := tempDir(t, "out")
	args := []string{filepath.Join(tree, "packaging/package.sh"), "--bin", bin, "--out", out, "--formats", formats}
	if version != "" {
		args = append(args, "--version", version)
	}
	stdout, stderr, code := run(t, tree, nil, "bash", args...)
	if code != 0 {
		t.Fatalf("%s/packaging/package.sh: exit %d\n%s%s", tree, code, stdout, stderr)
	}
	p := &pkgs{bin: bin, deb: map[string]string{}, rpm: map[string]string{}}
	m := regexp.MustCompile(`package\.sh: rbdfence (\S+) `).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("package.sh did not say the version:\n%s", stderr)
	}
	p.version = m[1]
	printed := strings.Fields(stdout)
	for _, name := range pkgNames {
		for _, f := range strings.Fields(formats) {
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
	return p
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

func mustRunIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, dir, env, name, args...)
	if code != 0 {
		t.Fatalf("%s %v: exit %d\n%s%s", name, args, code, out, errOut)
	}
	return out + errOut
}

func mustRun(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, "", nil, name, args...)
	if code != 0 {
		t.Fatalf("%s %v: exit %d: %s", name, args, code, errOut)
	}
	return out
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// snapshot returns every path below each of roots (under base) with its
// type, mode, owner and content hash or link target; skip names subtrees
// (relative to base) left out.
func snapshot(t *testing.T, base string, roots []string, skip ...string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	for _, r := range roots {
		err := filepath.WalkDir(filepath.Join(base, r), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) {
					return nil
				}
				return err
			}
			rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, base), "/")
			for _, s := range skip {
				if rel == s {
					return filepath.SkipDir
				}
			}
			info, err := os.Lstat(p)
			if err != nil {
				return err
			}
			v := info.Mode().String()
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				v += fmt.Sprintf(" %d:%d", st.Uid, st.Gid)
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
			t.Fatal(err)
		}
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
		t.Fatalf("%s: the tree differs from before:\n%s", what, strings.Join(diff, "\n"))
	}
}

// newPaths returns the paths of after that are not in before, sorted.
func newPaths(before, after map[string]string) []string {
	var ps []string
	for p := range after {
		if _, ok := before[p]; !ok {
			ps = append(ps, p)
		}
	}
	sort.Strings(ps)
	return ps
}

// wantInstalled checks that every file of pkg's layout is at its path under
// base, with its mode and content (bin: the binaries packaged), but for the
// content of the paths in edited.
func wantInstalled(t *testing.T, base, pkg, format, bin string, edited ...string) {
	t.Helper()
	for _, e := range packaged(t, pkg, format) {
		p := filepath.Join(base, e.path)
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatalf("%s: %s: %v", pkg, e.path, err)
		}
		switch e.mode {
		case "dir":
			if !st.IsDir() {
				t.Fatalf("%s: %s is not a directory", pkg, e.path)
			}
		case "link":
			if l, err := os.Readlink(p); err != nil || l != e.src {
				t.Fatalf("%s: %s links to %q (%v), want %q", pkg, e.path, l, err, e.src)
			}
		default:
			if !st.Mode().IsRegular() || fmt.Sprintf("%04o", st.Mode().Perm()) != e.mode {
				t.Fatalf("%s: %s: mode %v, want a file with %s", pkg, e.path, st.Mode(), e.mode)
			}
			if !slices.Contains(edited, e.path) && !bytes.Equal(readFile(t, p), e.content(t, bin)) {
				t.Fatalf("%s: %s is not %s", pkg, e.path, e.src)
			}
		}
	}
}

func wantGone(t *testing.T, base string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(filepath.Join(base, p)); err == nil {
			t.Fatalf("%s is still there", p)
		} else if !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
}

// onedConf is a stock oned.conf's kvm VM_MAD.
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

const (
	vmMadChange = `+ ARGUMENTS      = "-t 15 -r 0 kvm -p -l deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence",`
	appliedArgs = `ARGUMENTS      = "-t 15 -r 0 kvm -p -l deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence",`
)

// opennebula puts a stand-in of an OpenNebula front-end below base: the kvm
// VMM's deploy, the Ceph TM's migrate scripts, the HA hook, /etc/one (0750,
// as OpenNebula has it) with an oned.conf.
func opennebula(t *testing.T, base string) {
	t.Helper()
	for _, op := range []string{"premigrate", "postmigrate", "failmigrate"} {
		writeFile(t, filepath.Join(base, "var/lib/one/remotes/tm/ceph", op), "#!/bin/bash\n# OpenNebula's tm/ceph/"+op+"\nexit 0\n", 0o755)
	}
	writeFile(t, filepath.Join(base, "var/lib/one/remotes/vmm/kvm/deploy"), "#!/bin/bash\n# OpenNebula's vmm/kvm/deploy\n", 0o755)
	writeFile(t, filepath.Join(base, "var/lib/one/remotes/hooks/ft/host_error.rb"), "# OpenNebula's host_error.rb\n", 0o755)
	if _, err := os.Stat(filepath.Join(base, "etc/one")); os.IsNotExist(err) {
		if err := os.MkdirAll(filepath.Join(base, "etc/one"), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(base, "etc/one"), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(base, "etc/one/oned.conf"), onedConf, 0o640)
}
