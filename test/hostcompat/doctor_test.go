package hostcompat_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// installed is an rbdfence tree as a checkout is after make build: the
// binaries in bin/, install.sh and packaging/ beside them. Doctor names
// the install.sh beside the binary it runs as.
func installed(t *testing.T, r *rig) (tree, rbdfence string) {
	t.Helper()
	tree = r.path("rbdfence")
	bins, err := filepath.Glob(filepath.Join(filepath.Dir(testenv.Bin(t, "rbdfence")), "*"))
	if err != nil || len(bins) == 0 {
		t.Fatalf("no binaries: %v", err)
	}
	for _, b := range bins {
		copyFile(t, b, filepath.Join(tree, "bin", filepath.Base(b)))
	}
	for _, p := range []string{"install.sh", "packaging"} {
		if err := os.Symlink(filepath.Join(testenv.Root(), p), filepath.Join(tree, p)); err != nil {
			t.Fatal(err)
		}
	}
	return tree, filepath.Join(tree, "bin/rbdfence")
}

// doctorLines runs doctor and returns its lines by check.
func doctorLines(t *testing.T, cfg, bin string, args ...string) (map[string]string, result) {
	t.Helper()
	res := runBin(t, cfg, bin, "", append([]string{"doctor"}, args...)...)
	lines := map[string]string{}
	re := regexp.MustCompile(`^(PASS|FAIL)  (\S+(?: rbdf-\S+)?)\s+(.*)$`)
	for _, l := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		m := re.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("doctor line %q is not PASS/FAIL check detail\n%s", l, res.stdout)
		}
		lines[m[2]] = m[1] + " " + m[3]
	}
	return lines, res
}

func allPass(t *testing.T, what string, lines map[string]string, res result, want []string) {
	t.Helper()
	for _, c := range want {
		if !strings.HasPrefix(lines[c], "PASS ") {
			t.Errorf("%s: check %s: %q", what, c, lines[c])
		}
	}
	if res.code != 0 || len(lines) != len(want) {
		t.Fatalf("%s: exit %d, %d checks, want %d all PASS:\n%s%s", what, res.code, len(lines), len(want), res.stdout, res.stderr)
	}
}

// fixOf returns the command of a fix "run 'CMD'...".
func fixOf(t *testing.T, line string) string {
	t.Helper()
	m := regexp.MustCompile(`; fix: run '([^']+)'`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no command in the fix of %q", line)
	}
	return m[1]
}

// TestDoctorFrontend (issue 20 item 3): on a correct front-end (remote:
// ssh, no Ceph access here) every check passes; each broken item fails
// with its exact fix, which, run as printed, makes it pass again; a host
// beside an old hook fails with the fix (issue 18 item 6).
func TestDoctorFrontend(t *testing.T) {
	r := newRig(t)
	tree, bin := installed(t, r)
	prefix := r.path("frontend")
	conf := filepath.Join(prefix, "etc/one/oned.conf")
	stock := `VM_MAD = [
    NAME           = "kvm",
    EXECUTABLE     = "one_vmm_exec",
    ARGUMENTS      = "-t 15 -r 0 kvm",
    TYPE           = "kvm"
]
`
	r.write(conf, stock, 0o640)
	if err := os.MkdirAll(filepath.Join(prefix, "var/lib/one/remotes/vmm/kvm"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{"premigrate", "postmigrate", "failmigrate"} {
		r.write(filepath.Join(prefix, "var/lib/one/remotes/tm/ceph", op), "#!/bin/sh\nexit 0\n", 0o755)
	}
	inst := func(args ...string) {
		t.Helper()
		run(t, "bash", append([]string{filepath.Join(tree, "install.sh"), "frontend", "--prefix", prefix}, args...)...)
	}
	inst("--apply")
	r.nsHost("rbdf-a", testenv.Bin(t, "rbdfence-hook"))
	cfg := r.frontendConfig("rbdfence.yaml", "", "")
	checks := []string{"config", "ceph", "vmm-wrappers", "host-binary", "tm-ceph", "vm-mad", "oned", "ssh-hooks", "host-fence-addresses", "host-fences", "host rbdf-a"}

	lines, res := doctorLines(t, cfg, bin, "--role", "frontend", "--root", prefix)
	t.Logf("correct front-end:\n%s", res.stdout)
	allPass(t, "correct front-end", lines, res, checks)
	if !strings.Contains(lines["ceph"], "not needed on this front-end") || !strings.Contains(lines["host rbdf-a"], fmt.Sprintf("claim format %d", engine.ClaimFormat)) {
		t.Fatalf("ceph %q, host %q", lines["ceph"], lines["host rbdf-a"])
	}

	remotes := filepath.Join(prefix, "var/lib/one/remotes")
	for _, tc := range []struct {
		check string
		brk   func()
		fix   string
	}{
		{"vm-mad", func() { r.write(conf, stock, 0o640) },
			fmt.Sprintf("run '%s/install.sh frontend --prefix %s --apply' (or add '-l deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence' to the last -l of the ARGUMENTS of each such VM_MAD in %s), then 'systemctl restart opennebula'", tree, prefix, conf)},
		{"vmm-wrappers", func() { os.Remove(filepath.Join(remotes, "vmm/kvm/attach-rbdfence")) },
			fmt.Sprintf("run '%s/install.sh frontend --prefix %s', then 'onehost sync --force' as oneadmin", tree, prefix)},
		{"host-binary", func() { os.Remove(filepath.Join(remotes, "rbdfence/rbdfence-host")) },
			fmt.Sprintf("run '%s/install.sh frontend --prefix %s', then 'onehost sync --force' as oneadmin", tree, prefix)},
		{"tm-ceph", func() { r.write(filepath.Join(remotes, "tm/ceph/premigrate.rbdfence-orig"), "#!/bin/sh\n", 0o755) },
			fmt.Sprintf("run '%s/install.sh frontend --prefix %s': it puts OpenNebula's scripts back", tree, prefix)},
	} {
		t.Run(tc.check, func(t *testing.T) {
			tc.brk()
			lines, res := doctorLines(t, cfg, bin, "--role", "frontend", "--root", prefix)
			got := lines[tc.check]
			if res.code == 0 || !strings.HasPrefix(got, "FAIL ") || !strings.HasSuffix(got, "; fix: "+tc.fix) {
				t.Fatalf("exit %d, %s: %q\nwant its fix %q\n%s", res.code, tc.check, got, tc.fix, res.stdout)
			}
			for c, l := range lines {
				if c != tc.check && !strings.HasPrefix(l, "PASS ") {
					t.Errorf("%s broken, %s fails too: %q", tc.check, c, l)
				}
			}
			// The fix as printed makes it pass.
			run(t, "bash", "-c", fixOf(t, "; fix: "+tc.fix))
			lines, res = doctorLines(t, cfg, bin, "--role", "frontend", "--root", prefix)
			allPass(t, "after the fix of "+tc.check, lines, res, checks)
		})
	}

	t.Run("host beside an old hook", func(t *testing.T) {
		r.nsHost("rbdf-old", buildOld(t, "rbdfence-hook"))
		lines, res := doctorLines(t, cfg, bin, "--role", "frontend", "--root", prefix)
		want := fmt.Sprintf("FAIL its libvirt hook /etc/libvirt/hooks/rbdfence-hook (%s) reads claim format 1, older than claim format %d; ", oldRev, engine.ClaimFormat)
		fix := "; fix: run this release's 'install.sh host' on rbdf-old (its hook is /etc/libvirt/hooks/rbdfence-hook), and run 'onehost sync --force' as oneadmin on the front-end"
		if got := lines["host rbdf-old"]; res.code == 0 || !strings.HasPrefix(got, want) || !strings.HasSuffix(got, fix) {
			t.Fatalf("%q\nwant %q...%q\n%s", got, want, fix, res.stdout)
		}
		if !strings.HasPrefix(lines["host rbdf-a"], "PASS ") {
			t.Fatalf("the other host: %q", lines["host rbdf-a"])
		}
	})

	t.Run("oned unreachable", func(t *testing.T) {
		bad := r.write("unreachable.yaml", strings.Replace(readFile(t, cfg), r.sim.URL(), "http://127.0.0.1:1/RPC2", 1), 0o644)
		lines, res := doctorLines(t, bad, bin, "--role", "frontend", "--root", prefix)
		if res.code == 0 || !strings.HasPrefix(lines["oned"], "FAIL ") || !strings.HasSuffix(lines["oned"], "; fix: check opennebula.endpoint (http://127.0.0.1:1/RPC2) and opennebula.auth_file ("+r.path("one_auth")+": one line user:password)") ||
			!strings.HasSuffix(lines["hosts"], "; fix: see the oned check") ||
			!strings.HasPrefix(lines["ssh-hooks"], "FAIL cannot list oned's hooks: ") || !strings.HasSuffix(lines["ssh-hooks"], "; fix: see the oned check") {
			t.Fatalf("%q %q %q\n%s", lines["oned"], lines["hosts"], lines["ssh-hooks"], res.stdout)
		}
	})
}

// TestDoctorHost (issue 20 item 3): doctor on a correct host (run there
// over ssh, as an operator would) passes every check: the Ceph ones, the
// hook, the spool, and what runs there; each broken item fails with its
// exact fix.
func TestDoctorHost(t *testing.T) {
	cr := newCephRig(t, "")
	r := cr.rig
	tree, bin := installed(t, r)
	h := r.addHost("rbdf-h", r.path("roots", "rbdf-h"), false)
	r.sync(h, bin)
	hookRoot := r.path("roots", "rbdf-h", "hook")
	run(t, "bash", filepath.Join(tree, "install.sh"), "host", "--prefix", hookRoot)
	// The hook as the installer put it, seen at the host's /etc/libvirt.
	if err := os.RemoveAll(h.at("/etc/libvirt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(hookRoot, "etc/libvirt"), h.at("/etc/libvirt")); err != nil {
		t.Fatal(err)
	}
	hostCfg := r.write("host-doctor.yaml", readFile(t, cr.hostCfg)+"opennebula:\n  host_package_binary: \"\"\n", 0o644)
	doctor := func(cfg string) (map[string]string, string, int) {
		t.Helper()
		out, code := r.ssh(h, bin+" doctor --role host --config "+cfg)
		lines := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && (f[0] == "PASS" || f[0] == "FAIL") {
				lines[f[1]] = f[0] + " " + strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(l, f[0]), "  "+f[1]))
			}
		}
		return lines, out, code
	}
	checks := []string{"config", "ceph", "ceph-read", "ceph-blocklist", "ceph-address", "libvirt-hook", "events-spool", "host-versions"}
	lines, out, code := doctor(hostCfg)
	t.Logf("correct host:\n%s", out)
	for _, c := range checks {
		if !strings.HasPrefix(lines[c], "PASS ") {
			t.Errorf("check %s: %q", c, lines[c])
		}
	}
	if code != 0 || len(lines) != len(checks) {
		t.Fatalf("exit %d, %d checks:\n%s", code, len(lines), out)
	}

	for _, tc := range []struct {
		check string
		brk   func() (cfg string, undo func())
		fix   string
	}{
		{"libvirt-hook", func() (string, func()) {
			w := h.at("/etc/libvirt/hooks/qemu.d/10-rbdfence")
			b := readFile(t, w)
			os.Remove(w)
			return hostCfg, func() { r.write(w, b, 0o755) }
		}, fmt.Sprintf("run '%s/install.sh host' on this host (it installs /etc/libvirt/hooks/qemu.d/10-rbdfence), then 'systemctl restart libvirtd' once if libvirtd started before any qemu hook existed", tree)},
		{"ceph", func() (string, func()) {
			return r.write("host-nomon.yaml", strings.Replace(readFile(t, hostCfg), cr.ceph.Mon, "127.0.0.1:1", 1), 0o644), func() {}
		}, "set ceph.mon_host, ceph.user and ceph.keyring in " + r.path("host-nomon.yaml") + " (a disk's CEPH_HOST, CEPH_USER, CEPH_KEY win); the monitors must be reachable from here"},
		{"host-versions", func() (string, func()) {
			os.Remove(h.at(syncedBinary))
			return hostCfg, func() { r.sync(h, bin) }
		}, "run 'onehost sync --force' as oneadmin on the front-end (it copies the host binary here), or install the rbdfence and rbdfence-host packages here"},
	} {
		t.Run(tc.check, func(t *testing.T) {
			cfg, undo := tc.brk()
			defer undo()
			lines, out, code := doctor(cfg)
			if got := lines[tc.check]; code == 0 || !strings.HasPrefix(got, "FAIL ") || !strings.HasSuffix(got, "; fix: "+tc.fix) {
				t.Fatalf("exit %d, %s: %q\nwant its fix %q\n%s", code, tc.check, got, tc.fix, out)
			}
		})
	}
	t.Run("old hook", func(t *testing.T) {
		entry := readFile(t, h.at("/etc/libvirt/hooks/qemu.d/10-rbdfence"))
		hookBin := regexp.MustCompile(`/\S*rbdfence-hook`).FindString(entry)
		cur := readFile(t, hookBin)
		copyFile(t, buildOld(t, "rbdfence-hook"), hookBin)
		defer r.write(hookBin, cur, 0o755)
		lines, out, code := doctor(hostCfg)
		want := fmt.Sprintf("FAIL its libvirt hook %s (%s) reads claim format 1, older than claim format %d; ", hookBin, oldRev, engine.ClaimFormat)
		if got := lines["host-versions"]; code == 0 || !strings.HasPrefix(got, want) || !strings.Contains(got, "; fix: run this release's 'install.sh host' on this host") {
			t.Fatalf("%q\nwant %q...\n%s", got, want, out)
		}
	})
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
