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
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
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
	for _, d := range []string{"var/lib/one/remotes/vmm/kvm", "var/lib/one/remotes/tm/ceph", "var/lib/one/remotes/hooks/ft", "etc/one"} {
		if err := os.MkdirAll(filepath.Join(p, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, op := range ops {
		if err := os.WriteFile(filepath.Join(p, "var/lib/one/remotes/tm/ceph", op), []byte("#!/bin/bash\n# upstream "+op+"\nexit 0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// OpenNebula's HA hook files (share/hooks/ft): never replaced.
	for _, f := range []string{"host_error.rb", "fence_host.sh"} {
		if err := os.WriteFile(filepath.Join(p, "var/lib/one/remotes/hooks/ft", f), []byte("# upstream "+f+"\n"), 0o755); err != nil {
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

// vmMadArgs returns the ARGUMENTS of the VM_MAD named name in prefix's
// oned.conf (the whole line, trimmed).
func vmMadArgs(t *testing.T, prefix, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(prefix, "etc/one/oned.conf"))
	if err != nil {
		t.Fatal(err)
	}
	cur := ""
	for _, l := range strings.Split(string(b), "\n") {
		tl := strings.TrimSpace(l)
		if strings.HasPrefix(tl, "#") {
			continue
		}
		if v, ok := strings.CutPrefix(tl, "NAME"); ok {
			cur = strings.Trim(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), "=")), `",`)
		}
		if strings.HasPrefix(tl, "ARGUMENTS") && cur == name {
			return tl
		}
	}
	t.Fatalf("no ARGUMENTS for VM_MAD %q", name)
	return ""
}

func kvmArguments(t *testing.T, prefix string) string { return vmMadArgs(t, prefix, "kvm") }

// driverRuns checks that the VM_MAD named name runs our actions as the
// real VMM driver reads its ARGUMENTS (onedsim.ParseDriverArgs: GetoptLong,
// the last -l wins, one_vmm_exec.rb:1555-1556 of release-7.4.0).
func driverRuns(t *testing.T, prefix, name, migrate string) {
	t.Helper()
	line := vmMadArgs(t, prefix, name)
	_, v, _ := strings.Cut(line, `"`)
	v, _, _ = strings.Cut(v, `"`)
	a, err := onedsim.ParseDriverArgs(v)
	if err != nil {
		t.Fatalf("VM_MAD %s: the driver would not start with %q: %v", name, v, err)
	}
	if a.Hypervisor != "kvm" || a.Local["DEPLOY"] != "deploy-rbdfence" || a.Local["RESTORE"] != "restore-rbdfence" || a.Local["MIGRATE"] != migrate {
		t.Fatalf("VM_MAD %s: the driver reads %q as local actions %v, want ours (migrate=%s)", name, v, a.Local, migrate)
	}
}

func mustInstall(t *testing.T, prefix string, args ...string) result {
	t.Helper()
	r := runInstall(t, prefix, args...)
	if r.code != 0 {
		t.Fatalf("install.sh frontend %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
	}
	return r
}

const ours = "deploy=deploy-rbdfence,restore=restore-rbdfence,migrate=migrate-rbdfence,attach_disk=attach-rbdfence"

func TestInstallFrontend(t *testing.T) {
	const stock = `"-t 15 -r 0 kvm -p"`
	ops := []string{"premigrate", "postmigrate", "failmigrate"}

	t.Run("install, idempotent, apply, uninstall restores exactly", func(t *testing.T) {
		p := frontendTree(t, stock, ops...)
		before := tree(t, p)
		r := mustInstall(t, p)
		if !strings.Contains(r.stdout, `+ ARGUMENTS      = "-t 15 -r 0 kvm -p -l `+ours+`",`) ||
			!strings.Contains(r.stdout, `+ ARGUMENTS      = "-t 15 -r 0 kvm -l `+ours+`",`) ||
			!strings.Contains(r.stdout, "onehost sync --force") {
			t.Fatalf("the VM_MAD changes (kvm and qemu) and onehost sync are not printed:\n%s", r.stdout)
		}
		if got := kvmArguments(t, p); got != `ARGUMENTS      = "-t 15 -r 0 kvm -p",` {
			t.Fatalf("oned.conf changed without --apply: %s", got)
		}
		remotes := filepath.Join(p, "var/lib/one/remotes")
		for _, f := range []string{"vmm/kvm/deploy-rbdfence", "vmm/kvm/restore-rbdfence", "vmm/kvm/migrate-rbdfence", "vmm/kvm/attach-rbdfence", "rbdfence/rbdfence-host", "rbdfence/prestart"} {
			if st, err := os.Stat(filepath.Join(remotes, f)); err != nil || st.Mode().Perm() != 0o755 {
				t.Fatalf("%s: %v", f, err)
			}
		}
		// OpenNebula's own TM scripts are not touched.
		for _, op := range ops {
			if got := readFile(t, filepath.Join(remotes, "tm/ceph", op)); !strings.Contains(got, "# upstream "+op) {
				t.Fatalf("tm/ceph/%s was replaced: %q", op, got)
			}
		}
		// The HA hook's fence: our directory, OpenNebula's ft/ untouched.
		hooks := filepath.Join(remotes, "hooks/rbdfence")
		if st, err := os.Stat(filepath.Join(hooks, "fence_host.sh")); err != nil || st.Mode().Perm() != 0o755 {
			t.Fatalf("fence_host.sh: %v", err)
		}
		if l, err := os.Readlink(filepath.Join(hooks, "host_error.rb")); err != nil || l != "../ft/host_error.rb" {
			t.Fatalf("host_error.rb is not a link to OpenNebula's: %q %v", l, err)
		}
		if got := readFile(t, filepath.Join(hooks, "host_error.rb")); got != "# upstream host_error.rb\n" {
			t.Fatalf("host_error.rb through the link: %q", got)
		}
		for _, f := range []string{"host_error.rb", "fence_host.sh"} {
			if got := readFile(t, filepath.Join(remotes, "hooks/ft", f)); got != "# upstream "+f+"\n" {
				t.Fatalf("OpenNebula's hooks/ft/%s was changed: %q", f, got)
			}
		}
		hook := readFile(t, filepath.Join(hooks, "host_error.hook"))
		for _, want := range []string{"COMMAND         = rbdfence/host_error.rb", "ARGUMENTS_STDIN = yes", "RESOURCE        = HOST", "STATE           = ERROR"} {
			if !strings.Contains(hook, want) {
				t.Fatalf("onehook template lacks %q:\n%s", want, hook)
			}
		}
		if !strings.Contains(r.stdout, "onehook create "+filepath.Join(hooks, "host_error.hook")) {
			t.Fatalf("the HA hook is not offered:\n%s", r.stdout)
		}
		// The state hooks that open rbdfence's ssh masters for the deploy
		// (PROLOG) and for the live migration (MIGRATE).
		for file, on := range map[string][]string{
			"prolog_ssh.hook":  {"ON              = PROLOG"},
			"migrate_ssh.hook": {"ON              = CUSTOM", "STATE           = ACTIVE", "LCM_STATE       = MIGRATE"},
		} {
			warm := readFile(t, filepath.Join(hooks, file))
			for _, want := range append([]string{"COMMAND         = rbdfence/sshwarm-rbdfence", `ARGUMENTS       = "$TEMPLATE"`, "ARGUMENTS_STDIN = yes", "RESOURCE        = VM"}, on...) {
				if !strings.Contains(warm, want) {
					t.Fatalf("hook template %s lacks %q:\n%s", file, want, warm)
				}
			}
			if !strings.Contains(r.stdout, "onehook create "+filepath.Join(hooks, file)) {
				t.Fatalf("the ssh hook %s is not offered:\n%s", file, r.stdout)
			}
		}
		if out, err := exec.Command(filepath.Join(hooks, "sshwarm-rbdfence"), "x").CombinedOutput(); !strings.Contains(string(out), "takes no arguments") {
			t.Fatalf("installed sshwarm-rbdfence is not rbdfence's PROLOG hook: %v %s", err, out)
		}
		out, err := exec.Command(filepath.Join(hooks, "fence_host.sh")).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "fence-host: stdin is empty") {
			t.Fatalf("installed fence_host.sh does not run rbdfence fence-host: %v %s", err, out)
		}
		// The event delivery: a timer runs events flush as oneadmin, which
		// also collects the hosts' spools (hosts hold no oned credentials).
		units := filepath.Join(p, "etc/systemd/system")
		svc := readFile(t, filepath.Join(units, "rbdfence-events.service"))
		for _, want := range []string{"Type=oneshot", "User=oneadmin", "ExecStart=/var/lib/one/remotes/rbdfence/rbdfence-host events flush\n"} {
			if !strings.Contains(svc, want) {
				t.Fatalf("rbdfence-events.service lacks %q:\n%s", want, svc)
			}
		}
		timer := readFile(t, filepath.Join(units, "rbdfence-events.timer"))
		for _, want := range []string{"OnUnitInactiveSec=1min", "WantedBy=timers.target"} {
			if !strings.Contains(timer, want) {
				t.Fatalf("rbdfence-events.timer lacks %q:\n%s", want, timer)
			}
		}
		if !strings.Contains(r.stdout, "systemctl enable --now rbdfence-events.timer") || !strings.Contains(r.stdout, "hosts need no oned credentials") {
			t.Fatalf("enabling the timer (under --prefix) is not offered:\n%s", r.stdout)
		}
		// The default config is valid.
		cfg := config.Default()
		if err := config.Parse([]byte(readFile(t, filepath.Join(p, "etc/one/rbdfence.yaml"))), cfg); err != nil {
			t.Fatalf("default config: %v", err)
		}
		// An installed wrapper runs (and explains its contract).
		out, err = exec.Command(filepath.Join(remotes, "vmm/kvm/deploy-rbdfence")).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "usage: deploy-rbdfence") {
			t.Fatalf("installed deploy-rbdfence: %v %s", err, out)
		}
		installed := tree(t, p)
		mustInstall(t, p)
		if again := tree(t, p); again != installed {
			t.Fatalf("a second install changed the tree:\n%s\n---\n%s", installed, again)
		}
		mustInstall(t, p, "--apply")
		driverRuns(t, p, "kvm", "migrate-rbdfence")
		driverRuns(t, p, "qemu", "migrate-rbdfence")
		applied := tree(t, p)
		r = mustInstall(t, p, "--apply")
		if tree(t, p) != applied || !strings.Contains(r.stderr, "already runs the rbdfence local actions (kvm,qemu)") {
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

	// ARGUMENTS as the real driver reads them: whatever the form, after
	// --apply the driver (onedsim's GetoptLong reading) runs our actions,
	// and --uninstall gives the tree back byte for byte.
	for _, tc := range []struct {
		name, args, want, migrate string
	}{
		{"existing -l list is kept", `"-t 15 -r 0 kvm -l migrate_x=y,save=save_ceph -p"`,
			`ARGUMENTS      = "-t 15 -r 0 kvm -l migrate_x=y,save=save_ceph,` + ours + ` -p",`, "migrate-rbdfence"},
		{"last -l wins", `"-t 15 -r 0 kvm -l save -p -l poll=poll_x"`,
			`ARGUMENTS      = "-t 15 -r 0 kvm -l save -p -l poll=poll_x,` + ours + `",`, "migrate-rbdfence"},
		{"abbreviated --loc", `"-t 15 -r 0 kvm --loc save"`, `ARGUMENTS      = "-t 15 -r 0 kvm --loc save,` + ours + `",`, "migrate-rbdfence"},
		{"--local=", `"-t 15 -r 0 kvm --local=save"`, `ARGUMENTS      = "-t 15 -r 0 kvm --local=save,` + ours + `",`, "migrate-rbdfence"},
		{"admin's migrate_local is wrapped", `"-t 15 -r 0 kvm -l migrate=migrate_local"`,
			`ARGUMENTS      = "-t 15 -r 0 kvm -l migrate=migrate_local-rbdfence,deploy=deploy-rbdfence,restore=restore-rbdfence,attach_disk=attach-rbdfence",`, "migrate_local-rbdfence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := frontendTree(t, tc.args, ops...)
			if err := os.WriteFile(filepath.Join(p, "var/lib/one/remotes/vmm/kvm/migrate_local"), []byte("#!/bin/bash\n# upstream migrate_local\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			before := tree(t, p)
			mustInstall(t, p, "--apply")
			if got := kvmArguments(t, p); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			driverRuns(t, p, "kvm", tc.migrate)
			driverRuns(t, p, "qemu", "migrate-rbdfence")
			if tc.migrate != "migrate-rbdfence" {
				if _, err := os.Stat(filepath.Join(p, "var/lib/one/remotes/vmm/kvm", tc.migrate)); err != nil {
					t.Fatalf("the wrapper %s is not installed: %v", tc.migrate, err)
				}
			}
			if lxc := readFile(t, filepath.Join(p, "etc/one/oned.conf")); !strings.Contains(lxc, `"-t 15 -r 0 lxc -l deploy=deploy_lxc"`) {
				t.Fatal("another VM_MAD was changed")
			}
			mustInstall(t, p, "--uninstall")
			if tree(t, p) != before {
				t.Fatal("uninstall did not restore the tree")
			}
		})
	}

	t.Run("an admin's unit of the same name is kept and put back", func(t *testing.T) {
		p := frontendTree(t, stock, ops...)
		units := filepath.Join(p, "etc/systemd/system")
		if err := os.MkdirAll(units, 0o755); err != nil {
			t.Fatal(err)
		}
		mine := "[Timer]\nOnCalendar=hourly\n"
		if err := os.WriteFile(filepath.Join(units, "rbdfence-events.timer"), []byte(mine), 0o600); err != nil {
			t.Fatal(err)
		}
		before := tree(t, p)
		mustInstall(t, p, "--apply")
		if got := readFile(t, filepath.Join(units, "rbdfence-events.timer")); !strings.Contains(got, "OnUnitInactiveSec=1min") {
			t.Fatalf("timer not installed: %q", got)
		}
		mustInstall(t, p, "--apply")
		mustInstall(t, p, "--uninstall")
		if after := tree(t, p); after != before {
			t.Fatalf("uninstall did not restore the tree:\nbefore:\n%s\nafter:\n%s", before, after)
		}
	})

	t.Run("oned.conf edited since: only our actions removed", func(t *testing.T) {
		p := frontendTree(t, stock, ops...)
		mustInstall(t, p, "--apply")
		conf := filepath.Join(p, "etc/one/oned.conf")
		edited := strings.Replace(readFile(t, conf), "DATASTORE_LOCATION = /var/lib/one/datastores", "DATASTORE_LOCATION = /srv/one", 1)
		if err := os.WriteFile(conf, []byte(edited), 0o640); err != nil {
			t.Fatal(err)
		}
		mustInstall(t, p, "--uninstall")
		want := strings.Replace(onedConf(stock), "DATASTORE_LOCATION = /var/lib/one/datastores", "DATASTORE_LOCATION = /srv/one", 1)
		if got := readFile(t, conf); got != want {
			t.Fatalf("after uninstall:\n%s\nwant\n%s", got, want)
		}
	})

	t.Run("a local deploy action of someone else is not overridden", func(t *testing.T) {
		p := frontendTree(t, `"-t 15 -r 0 kvm -l deploy=deploy-tweaks"`, ops...)
		before := tree(t, p)
		r := runInstall(t, p, "--apply")
		if r.code == 0 || !strings.Contains(r.stderr, "deploy=deploy-tweaks") || !strings.Contains(r.stderr, `VM_MAD "kvm"`) {
			t.Fatalf("--apply over deploy-tweaks: exit %d\n%s", r.code, r.stderr)
		}
		if tree(t, p) != before {
			t.Fatal("a refused --apply changed the tree")
		}
		r = mustInstall(t, p)
		if !strings.Contains(r.stdout, "NO rbdfence protection") || !strings.Contains(r.stdout, "deploy-tweaks") {
			t.Fatalf("no explanation:\n%s", r.stdout)
		}
		mustInstall(t, p, "--uninstall")
		if tree(t, p) != before {
			t.Fatal("uninstall did not restore the tree")
		}
	})

	t.Run("an earlier install's TM wrappers are taken out", func(t *testing.T) {
		p := frontendTree(t, stock, ops...)
		tm := filepath.Join(p, "var/lib/one/remotes/tm/ceph")
		// As an earlier rbdfence left them: originals kept aside, our
		// binary in their place, one stub original it made itself.
		bin := testenv.Bin(t, "deploy-rbdfence")
		for _, op := range []string{"premigrate", "postmigrate"} {
			if err := os.Rename(filepath.Join(tm, op), filepath.Join(tm, op+".rbdfence-orig")); err != nil {
				t.Fatal(err)
			}
			if err := exec.Command("cp", bin, filepath.Join(tm, op)).Run(); err != nil {
				t.Fatal(err)
			}
		}
		mustInstall(t, p)
		for _, op := range []string{"premigrate", "postmigrate"} {
			if got := readFile(t, filepath.Join(tm, op)); !strings.Contains(got, "# upstream "+op) {
				t.Fatalf("tm/ceph/%s is not OpenNebula's again: %.40q", op, got)
			}
			if _, err := os.Stat(filepath.Join(tm, op+".rbdfence-orig")); err == nil {
				t.Fatalf("%s.rbdfence-orig left behind", op)
			}
		}
	})

	t.Run("over an earlier install's one-line state: uninstall is byte-exact", func(t *testing.T) {
		p := frontendTree(t, stock, ops...)
		pristine := readFile(t, filepath.Join(p, "etc/one/oned.conf"))
		// What an earlier rbdfence left: one ARGUMENTS line changed, its
		// old and new text kept in the state directory.
		const oldLine = `    ARGUMENTS      = "-t 15 -r 0 kvm -p",`
		const newLine = `    ARGUMENTS      = "-t 15 -r 0 kvm -p -l deploy=deploy-rbdfence,restore=restore-rbdfence",`
		state := filepath.Join(p, "var/lib/rbdfence/install-frontend")
		if err := os.MkdirAll(state, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{"oned.line.orig": oldLine + "\n", "oned.line.new": newLine + "\n", "created": ""} {
			if err := os.WriteFile(filepath.Join(state, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(p, "etc/one/oned.conf"), []byte(strings.Replace(pristine, oldLine, newLine, 1)), 0o640); err != nil {
			t.Fatal(err)
		}
		mustInstall(t, p, "--apply")
		driverRuns(t, p, "kvm", "migrate-rbdfence")
		mustInstall(t, p, "--uninstall")
		if got := readFile(t, filepath.Join(p, "etc/one/oned.conf")); got != pristine {
			t.Fatalf("after uninstall:\n%s\nwant\n%s", got, pristine)
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
