package frontend_test

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/config"
)

// tree returns every path below root with its mode and content hash.
func tree(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v", rel, info.Mode())
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// frontendTree makes a front-end tree: the Ceph TM scripts named in ops
// (stand-ins with recognisable content) and an oned.conf with kvm args.
func frontendTree(t *testing.T, kvmArgs string, ops ...string) string {
	t.Helper()
	p := t.TempDir()
	for _, d := range []string{"var/lib/one/remotes/vmm/kvm", "var/lib/one/remotes/tm/ceph", "etc/one"} {
		if err := os.MkdirAll(filepath.Join(p, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, op := range ops {
		if err := os.WriteFile(filepath.Join(p, "var/lib/one/remotes/tm/ceph", op), []byte("#!/bin/bash\n# upstream "+op+"\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(p, "var/lib/one/remotes/vmm/kvm/deploy"), []byte("#!/bin/bash\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(p, "etc/one/oned.conf"), []byte(onedConf(kvmArgs)), 0o640); err != nil {
		t.Fatal(err)
	}
	return p
}

func kvmArguments(t *testing.T, prefix string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(prefix, "etc/one/oned.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "ARGUMENTS") && strings.Contains(l, " kvm") && !strings.HasPrefix(l, "#") {
			return strings.TrimSpace(l)
		}
	}
	t.Fatal("no kvm ARGUMENTS line")
	return ""
}

func mustInstall(t *testing.T, prefix string, args ...string) result {
	t.Helper()
	r := runInstall(t, prefix, args...)
	if r.code != 0 {
		t.Fatalf("install.sh frontend %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	return r
}

func TestInstallFrontend(t *testing.T) {
	const stock = `"-t 15 -r 0 kvm -p"`
	ops := []string{"premigrate", "postmigrate", "failmigrate"}

	t.Run("install, idempotent, apply, uninstall restores exactly", func(t *testing.T) {
		p := frontendTree(t, stock, ops...)
		before := tree(t, p)
		r := mustInstall(t, p)
		if !strings.Contains(r.stdout, `+ ARGUMENTS      = "-t 15 -r 0 kvm -p -l deploy=deploy-rbdfence,restore=restore-rbdfence",`) ||
			!strings.Contains(r.stdout, "onehost sync --force") {
			t.Fatalf("the VM_MAD change and onehost sync are not printed:\n%s", r.stdout)
		}
		if got := kvmArguments(t, p); got != `ARGUMENTS      = "-t 15 -r 0 kvm -p",` {
			t.Fatalf("oned.conf changed without --apply: %s", got)
		}
		remotes := filepath.Join(p, "var/lib/one/remotes")
		for _, f := range []string{"vmm/kvm/deploy-rbdfence", "vmm/kvm/restore-rbdfence", "rbdfence/rbdfence-host", "rbdfence/prestart",
			"tm/ceph/premigrate", "tm/ceph/postmigrate", "tm/ceph/failmigrate"} {
			if st, err := os.Stat(filepath.Join(remotes, f)); err != nil || st.Mode().Perm() != 0o755 {
				t.Fatalf("%s: %v", f, err)
			}
		}
		for _, op := range ops {
			if got := readFile(t, filepath.Join(remotes, "tm/ceph", op+".rbdfence-orig")); !strings.Contains(got, "# upstream "+op) {
				t.Fatalf("original %s not kept: %q", op, got)
			}
		}
		// The default config is valid.
		cfg := config.Default()
		if err := config.Parse([]byte(readFile(t, filepath.Join(p, "etc/one/rbdfence.yaml"))), cfg); err != nil {
			t.Fatalf("default config: %v", err)
		}
		// An installed wrapper runs (and explains its contract).
		out, err := exec.Command(filepath.Join(remotes, "vmm/kvm/deploy-rbdfence")).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "usage: deploy-rbdfence") {
			t.Fatalf("installed deploy-rbdfence: %v %s", err, out)
		}
		installed := tree(t, p)
		mustInstall(t, p)
		if again := tree(t, p); again != installed {
			t.Fatalf("a second install changed the tree:\n%s\n---\n%s", installed, again)
		}
		mustInstall(t, p, "--apply")
		want := `ARGUMENTS      = "-t 15 -r 0 kvm -p -l deploy=deploy-rbdfence,restore=restore-rbdfence",`
		if got := kvmArguments(t, p); got != want {
			t.Fatalf("after --apply: %s", got)
		}
		applied := tree(t, p)
		r = mustInstall(t, p, "--apply")
		if tree(t, p) != applied || !strings.Contains(r.stderr, "already runs the rbdfence local actions") {
			t.Fatalf("a second --apply changed something:\n%s", r.stderr)
		}
		mustInstall(t, p, "--uninstall")
		if after := tree(t, p); after != before {
			t.Fatalf("uninstall did not restore the tree:\nbefore:\n%s\nafter:\n%s", before, after)
		}
		mustInstall(t, p, "--uninstall") // idempotent too
		if tree(t, p) != before {
			t.Fatal("a second uninstall changed the tree")
		}
	})

	t.Run("existing -l list is kept", func(t *testing.T) {
		p := frontendTree(t, `"-t 15 -r 0 kvm -l migrate=migrate_local,save=save_ceph -p"`, ops...)
		before := tree(t, p)
		mustInstall(t, p, "--apply")
		want := `ARGUMENTS      = "-t 15 -r 0 kvm -l migrate=migrate_local,save=save_ceph,deploy=deploy-rbdfence,restore=restore-rbdfence -p",`
		if got := kvmArguments(t, p); got != want {
			t.Fatalf("got  %s\nwant %s", got, want)
		}
		if lxc := readFile(t, filepath.Join(p, "etc/one/oned.conf")); !strings.Contains(lxc, `"-t 15 -r 0 lxc -l deploy=deploy_lxc"`) {
			t.Fatal("another VM_MAD was changed")
		}
		mustInstall(t, p, "--uninstall")
		if tree(t, p) != before {
			t.Fatal("uninstall did not restore the tree")
		}
	})

	t.Run("a local deploy action of someone else is not overridden", func(t *testing.T) {
		p := frontendTree(t, `"-t 15 -r 0 kvm -l deploy=deploy-tweaks"`, ops...)
		before := tree(t, p)
		r := runInstall(t, p, "--apply")
		if r.code == 0 || !strings.Contains(r.stderr, "deploy=deploy-tweaks") {
			t.Fatalf("--apply over deploy-tweaks: exit %d\n%s", r.code, r.stderr)
		}
		if tree(t, p) != before {
			t.Fatal("a refused --apply changed the tree")
		}
		r = mustInstall(t, p)
		if !strings.Contains(r.stdout, "oned.conf was not changed") || !strings.Contains(r.stdout, "deploy-tweaks") {
			t.Fatalf("no explanation:\n%s", r.stdout)
		}
		mustInstall(t, p, "--uninstall")
		if tree(t, p) != before {
			t.Fatal("uninstall did not restore the tree")
		}
	})

	t.Run("no upstream failmigrate: a no-op original", func(t *testing.T) {
		p := frontendTree(t, stock, "premigrate", "postmigrate")
		before := tree(t, p)
		mustInstall(t, p)
		orig := filepath.Join(p, "var/lib/one/remotes/tm/ceph/failmigrate.rbdfence-orig")
		if out, err := exec.Command(orig).CombinedOutput(); err != nil {
			t.Fatalf("stub original: %v %s", err, out)
		}
		mustInstall(t, p, "--uninstall")
		if tree(t, p) != before {
			t.Fatal("uninstall did not restore the tree")
		}
	})

	t.Run("upgrade replaced a wrapper", func(t *testing.T) {
		p := frontendTree(t, stock, ops...)
		mustInstall(t, p)
		pre := filepath.Join(p, "var/lib/one/remotes/tm/ceph/premigrate")
		if err := os.WriteFile(pre, []byte("#!/bin/bash\n# upstream premigrate, new version\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		r := mustInstall(t, p)
		if !strings.Contains(r.stderr, "replaced by a new upstream script") {
			t.Fatalf("no notice:\n%s", r.stderr)
		}
		if got := readFile(t, pre+".rbdfence-orig"); !strings.Contains(got, "new version") {
			t.Fatalf("the new upstream script is not the original: %q", got)
		}
		mustInstall(t, p, "--uninstall")
		if got := readFile(t, pre); !strings.Contains(got, "new version") {
			t.Fatalf("uninstall did not put the new upstream script back: %q", got)
		}
	})

	t.Run("an edited config is kept", func(t *testing.T) {
		p := frontendTree(t, stock, ops...)
		mustInstall(t, p)
		cfg := filepath.Join(p, "etc/one/rbdfence.yaml")
		if err := os.WriteFile(cfg, []byte("fence:\n  fail_open: true\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := mustInstall(t, p, "--uninstall")
		if got := readFile(t, cfg); got != "fence:\n  fail_open: true\n" || !strings.Contains(r.stderr, "kept "+cfg) {
			t.Fatalf("edited config %q, stderr:\n%s", got, r.stderr)
		}
	})

	t.Run("bad usage", func(t *testing.T) {
		r := runInstall(t, t.TempDir(), "--bogus")
		if r.code != 2 || !strings.Contains(r.stderr, "usage: install.sh frontend") {
			t.Fatalf("exit %d\n%s", r.code, r.stderr)
		}
		r = runInstall(t, t.TempDir())
		if r.code == 0 || !strings.Contains(r.stderr, "not found") {
			t.Fatalf("install into a tree without OpenNebula: exit %d\n%s", r.code, r.stderr)
		}
	})
}
