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

	"github.com/rbdfence/rbdfence/test/testenv"
)

// rpmFile is one line of `rpm -qlp --dump`.
type rpmFile struct {
	mode   string // octal, with the file type: 0100755, 040755, 0120000
	digest string // sha256 of a regular file
	config bool
	doc    bool
	link   string // symlink target
	owner  string // user:group
}

// needRPM fails the test, saying how to fix it, when rpm's tools are missing.
func needRPM(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"rpm", "rpm2archive"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: the Debian package rpm provides it (test/deps.sh installs it)", tool)
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

func sha256File(t *testing.T, p string) string {
	t.Helper()
	return fmt.Sprintf("%x", sha256.Sum256(readFile(t, p)))
}

// TestRPMContents reads each .rpm with rpm: exactly the expected files with
// their modes and content, the config marked %config(noreplace), the docs
// %doc, the symlink, the dependencies (Ceph client libraries for the
// packages with cgo binaries, the exact rbdfence version for the role
// packages) and the scriptlets with the role filled in.
func TestRPMContents(t *testing.T) {
	needRPM(t)
	p := release(t)
	root := testenv.Root()
	const (
		file = "0100755"
		data = "0100644"
		dir  = "040755"
		link = "0120000"
	)
	type want struct {
		mode   string
		src    string // the file it must be, byte for byte
		config bool
		doc    bool
		link   string
	}
	bin := func(name string) want { return want{mode: file, src: filepath.Join(p.bin, name)} }
	wants := map[string]map[string]want{
		"rbdfence": {
			"/usr/lib/rbdfence":                   {mode: dir},
			"/usr/lib/rbdfence/bin":               {mode: dir},
			"/usr/lib/rbdfence/bin/rbdfence":      bin("rbdfence"),
			"/usr/bin/rbdfence":                   {mode: link, link: "../lib/rbdfence/bin/rbdfence"},
			"/usr/lib/rbdfence/install.sh":        {mode: file, src: filepath.Join(root, "install.sh")},
			"/etc/one/rbdfence.yaml":              {mode: data, src: filepath.Join(root, "packaging/nfpm/files/rbdfence.yaml"), config: true},
			"/usr/share/doc/rbdfence":             {mode: dir},
			"/usr/share/doc/rbdfence/README.md":   {mode: data, src: filepath.Join(root, "README.md"), doc: true},
			"/usr/share/doc/rbdfence/SECURITY.md": {mode: data, src: filepath.Join(root, "docs/SECURITY.md"), doc: true},
		},
		"rbdfence-frontend": {
			"/usr/lib/rbdfence/bin":                           {mode: dir},
			"/usr/lib/rbdfence/packaging":                     {mode: dir},
			"/usr/lib/rbdfence/packaging/install-frontend.sh": {mode: file, src: filepath.Join(root, "packaging/install-frontend.sh")},
		},
		"rbdfence-host": {
			"/usr/lib/rbdfence/bin":                       {mode: dir},
			"/usr/lib/rbdfence/packaging":                 {mode: dir},
			"/usr/lib/rbdfence/bin/rbdfence-hook":         bin("rbdfence-hook"),
			"/usr/lib/rbdfence/packaging/install-host.sh": {mode: file, src: filepath.Join(root, "packaging/install-host.sh")},
		},
	}
	for _, b := range frontendBins {
		wants["rbdfence-frontend"]["/usr/lib/rbdfence/bin/"+b] = bin(b)
	}
	for name := range wants {
		// Their contents: TestLicense.
		wants[name]["/usr/share/licenses/"+name+"/LICENSE"] = want{mode: data, src: filepath.Join(root, "LICENSE")}
		wants[name]["/usr/share/licenses/"+name+"/copyright"] = want{mode: data}
	}
	ceph := []string{"librados2 >= 2:16.2", "librbd1 >= 2:16.2"}
	exact := "rbdfence = " + p.version + "-1"
	requires := map[string][]string{
		"rbdfence":          ceph,
		"rbdfence-frontend": {exact},
		"rbdfence-host":     append([]string{exact}, ceph...),
	}

	for name, ws := range wants {
		t.Run(name, func(t *testing.T) {
			rpm := p.rpm[name]
			if got := rpmQuery(t, rpm, "--qf", "%{NAME} %{VERSION}-%{RELEASE}"); got != name+" "+p.version+"-1" {
				t.Fatalf("name and version: %q", got)
			}
			files := rpmDump(t, rpm)
			var extra []string
			for path := range files {
				if _, ok := ws[path]; !ok {
					extra = append(extra, path)
				}
			}
			sort.Strings(extra)
			if len(extra) > 0 {
				t.Fatalf("unexpected files: %v", extra)
			}
			for path, w := range ws {
				f, ok := files[path]
				if !ok {
					t.Fatalf("%s is not in the package", path)
				}
				if f.mode != w.mode || f.owner != "root:root" || f.config != w.config || f.doc != w.doc {
					t.Fatalf("%s: mode %s owner %s config %v doc %v; want mode %s owner root:root config %v doc %v",
						path, f.mode, f.owner, f.config, f.doc, w.mode, w.config, w.doc)
				}
				if w.link != "" && f.link != w.link {
					t.Fatalf("%s: links to %q, want %q", path, f.link, w.link)
				}
				if w.src != "" && f.digest != sha256File(t, w.src) {
					t.Fatalf("%s is not %s", path, w.src)
				}
			}
			// %config(noreplace): flags c(onfig) and n(oreplace).
			for _, l := range strings.Split(rpmQuery(t, rpm, "--qf", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]"), "\n") {
				if strings.HasSuffix(l, " /etc/one/rbdfence.yaml") && strings.TrimSuffix(l, " /etc/one/rbdfence.yaml") != "cn" {
					t.Fatalf("/etc/one/rbdfence.yaml has flags %q, want cn (%%config(noreplace))", l)
				}
			}
			req := rpmQuery(t, rpm, "--requires")
			for _, r := range requires[name] {
				if !strings.Contains("\n"+req+"\n", "\n"+r+"\n") {
					t.Fatalf("does not require %q:\n%s", r, req)
				}
			}
			if name == "rbdfence-frontend" && strings.Contains(req, "librados") {
				t.Fatalf("the front-end drivers are pure Go, yet it requires:\n%s", req)
			}
			post := rpmQuery(t, rpm, "--qf", "%{POSTIN}")
			preun := rpmQuery(t, rpm, "--qf", "%{PREUN}")
			role := strings.TrimPrefix(name, "rbdfence-")
			if name == "rbdfence" {
				if post != "(none)" || preun != "(none)" {
					t.Fatalf("rbdfence has scriptlets:\n%s\n%s", post, preun)
				}
				return
			}
			for what, s := range map[string]string{"%post": post, "%preun": preun} {
				if !strings.Contains(s, "role='"+role+"'") || strings.Contains(s, "@ROLE@") {
					t.Fatalf("%s is not the %s script:\n%s", what, role, s)
				}
			}
		})
	}
}

// scriptlet runs an rpm scriptlet as rpm does (sh SCRIPT ARG). rpm --root
// would chroot into a tree that needs a whole system; the scripts honour
// $DPKG_ROOT, so here they run on the scratch root with rpm's arguments.
func (r *root) scriptlet(script, arg string) (string, int) {
	r.t.Helper()
	f := filepath.Join(r.t.TempDir(), "scriptlet")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		r.t.Fatal(err)
	}
	o, e, code := run(r.t, "", []string{"DPKG_ROOT=" + r.dir}, "sh", f, arg)
	return o + e, code
}

// extractRPM unpacks an rpm's payload into the root, as rpm -i would.
func (r *root) extractRPM(rpm string) {
	r.t.Helper()
	tmp := filepath.Join(r.t.TempDir(), filepath.Base(rpm))
	copyFile(r.t, rpm, tmp)
	if o, e, code := run(r.t, "", nil, "rpm2archive", tmp); code != 0 {
		r.t.Fatalf("rpm2archive %s: exit %d\n%s%s", rpm, code, o, e)
	}
	if o, e, code := run(r.t, "", nil, "tar", "-xzf", tmp+".tgz", "-C", r.dir); code != 0 {
		r.t.Fatalf("tar %s.tgz: exit %d\n%s%s", tmp, code, o, e)
	}
}

// TestRPMScriptlets runs the .rpm scriptlets with rpm's arguments on the
// unpacked payloads: %post 1 (install) installs, %post 2 (upgrade) keeps it,
// %preun 1 (upgrade: the old package goes after the new one's %post) leaves
// it alone, %preun 0 (erase) restores OpenNebula's and libvirt's files.
func TestRPMScriptlets(t *testing.T) {
	needRPM(t)
	p := release(t)
	for _, role := range []string{"frontend", "host"} {
		t.Run(role, func(t *testing.T) {
			r := newRoot(t)
			if role == "frontend" {
				r.opennebula()
			} else {
				r.libvirt()
			}
			rpm := p.rpm["rbdfence-"+role]
			r.extractRPM(p.rpm["rbdfence"])
			r.extractRPM(rpm)
			unpacked := r.snapshot()
			post := rpmQuery(t, rpm, "--qf", "%{POSTIN}")
			preun := rpmQuery(t, rpm, "--qf", "%{PREUN}")
			check := func() {
				if role == "frontend" {
					r.wantFrontend(p.bin)
				} else {
					r.wantHost(p.bin)
				}
			}

			if out, code := r.scriptlet(post, "1"); code != 0 {
				t.Fatalf("%%post 1: exit %d\n%s", code, out)
			}
			check()
			if out, code := r.scriptlet(post, "2"); code != 0 {
				t.Fatalf("%%post 2: exit %d\n%s", code, out)
			}
			check()
			installed := r.snapshot()
			if out, code := r.scriptlet(preun, "1"); code != 0 {
				t.Fatalf("%%preun 1: exit %d\n%s", code, out)
			}
			sameTree(t, "%preun 1 (upgrade) changed the install", installed, r.snapshot())
			if out, code := r.scriptlet(preun, "0"); code != 0 {
				t.Fatalf("%%preun 0: exit %d\n%s", code, out)
			}
			sameTree(t, "after %preun 0 (erase)", unpacked, r.snapshot())
		})
	}
}
