package packaging_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// ctime is p's status change time, in whole seconds.
func ctime(t *testing.T, p string) int64 {
	t.Helper()
	v, err := strconv.ParseInt(strings.TrimSpace(mustRun(t, "stat", "-c", "%Z", p)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitClock waits until the clock is past sec.
func waitClock(sec int64) {
	for time.Now().Unix() <= sec {
		time.Sleep(100 * time.Millisecond)
	}
}

// daemon starts a process that stands for libvirtd (the notice takes its
// pid) and returns its pid and start time.
func daemon(t *testing.T) (string, int64) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return strconv.Itoa(cmd.Process.Pid), time.Now().Unix()
}

func notice(t *testing.T, hooks, pid string) string {
	t.Helper()
	return mustRunIn(t, "", nil, "sh", "-c", `. "$1"; libvirt_hook_notice "$2" "$3"`, "sh",
		filepath.Join(testenv.Root(), "packaging/libvirt-hook-notice.sh"), hooks, pid)
}

// TestLibvirtHookNotice: whether libvirtd will run a new qemu hook is
// measured from its start time and the hook directory's, never guessed:
// a hook older than the daemon: nothing to say; no hook and nothing changed
// since the daemon started: it found none (a fact); a change since: it
// "may" not. The .deb's preinst and the .rpm's %pre carry this very code.
func TestLibvirtHookNotice(t *testing.T) {
	t.Parallel()
	const margin = 3 // seconds between a change and the daemon's start (ps etimes has whole seconds)
	for _, tc := range []struct {
		name, want string
		before     func(hooks string) // before the daemon starts
		after      func(hooks string) // after it started
	}{
		{name: "a hook older than the daemon", want: "",
			before: func(h string) { writeFile(t, filepath.Join(h, "qemu.d/50-other"), "#!/bin/sh\n", 0o755) }},
		{name: "no hook, nothing changed since", want: "found no qemu hook when it started (nothing in ",
			before: func(h string) { os.MkdirAll(filepath.Join(h, "qemu.d"), 0o755) }},
		{name: "a hook removed since", want: "may not run rbdfence's qemu hook until it is restarted",
			before: func(h string) { writeFile(t, filepath.Join(h, "qemu.d/50-other"), "#!/bin/sh\n", 0o755) },
			after:  func(h string) { os.Remove(filepath.Join(h, "qemu.d/50-other")) }},
		{name: "a hook newer than the daemon", want: "may not run",
			after: func(h string) { writeFile(t, filepath.Join(h, "qemu.d/50-other"), "#!/bin/sh\n", 0o755) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hooks := filepath.Join(t.TempDir(), "hooks")
			if err := os.MkdirAll(hooks, 0o755); err != nil {
				t.Fatal(err)
			}
			if tc.before != nil {
				tc.before(hooks)
			}
			waitClock(ctime(t, hooks) + margin)
			pid, started := daemon(t)
			if tc.after != nil {
				waitClock(started + margin)
				tc.after(hooks)
			}
			got := notice(t, hooks, pid)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("notice %q, want %q", got, tc.want)
			}
		})
	}

	p := release(t)
	code := string(readFile(t, filepath.Join(testenv.Root(), "packaging/libvirt-hook-notice.sh")))
	if pre := mustRun(t, "dpkg-deb", "-I", p.deb["rbdfence-host"], "preinst"); !strings.Contains(pre, code) {
		t.Fatalf("the .deb's preinst does not carry packaging/libvirt-hook-notice.sh:\n%s", pre)
	}
	if pre := rpmQuery(t, p.rpm["rbdfence-host"], "--qf", "%{PREIN}"); !strings.Contains(pre, code) {
		t.Fatalf("the .rpm's %%pre does not carry packaging/libvirt-hook-notice.sh:\n%s", pre)
	}
}

// TestLogrotate: the packages' logrotate file, run by logrotate on a copy
// of the audit log: rotated (the copy keeps the lines), a new log created
// with the old one's mode, the older rotation compressed the next time.
func TestLogrotate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := filepath.Join(dir, "rbdfence-audit.log")
	conf := strings.Replace(string(readFile(t, filepath.Join(testenv.Root(), "packaging/files/logrotate"))), "/var/log/one/rbdfence-audit.log", log, 1)
	if !strings.Contains(conf, log+" {") {
		t.Fatalf("packaging/files/logrotate does not name /var/log/one/rbdfence-audit.log:\n%s", conf)
	}
	writeFile(t, filepath.Join(dir, "conf"), conf, 0o644)
	rotate := func(line string) {
		writeFile(t, log, line, 0o640)
		mustRunIn(t, "", nil, "logrotate", "-f", "-s", filepath.Join(dir, "state"), filepath.Join(dir, "conf"))
		// dateformat ends in the second logrotate read, with time(2): the
		// kernel's coarse clock, which can lag time.Now by a tick. So the
		// next rotation waits for a whole second past the one in the name
		// it made, never merely past time.Now's second (CI met "destination
		// ... already exists" that way).
		waitClock(rotatedSecond(t, log) + 1)
	}
	rotate(`{"event":"fence","n":1}` + "\n")
	st, err := os.Stat(log)
	if err != nil || st.Size() != 0 || st.Mode().Perm() != 0o640 {
		t.Fatalf("after a rotation the log is %v %v, want a new empty 0640 file", st, err)
	}
	rotated, _ := filepath.Glob(log + "-*")
	if len(rotated) != 1 || string(readFile(t, rotated[0])) != `{"event":"fence","n":1}`+"\n" {
		t.Fatalf("rotated: %v", rotated)
	}
	rotate(`{"event":"fence","n":2}` + "\n")
	if gz, _ := filepath.Glob(log + "-*.gz"); len(gz) != 1 {
		t.Fatalf("the older rotation is not compressed: %v", gz)
	}
}

// rotatedSecond is the newest second in the names logrotate gave log's
// rotations (dateformat -%Y%m%d-%s, compressed or not).
func rotatedSecond(t *testing.T, log string) int64 {
	t.Helper()
	names, _ := filepath.Glob(log + "-*")
	newest := int64(-1)
	for _, n := range names {
		f := strings.Split(strings.TrimSuffix(strings.TrimPrefix(n, log+"-"), ".gz"), "-")
		sec, err := strconv.ParseInt(f[len(f)-1], 10, 64)
		if len(f) != 2 || err != nil {
			t.Fatalf("rotation %s is not named -%%Y%%m%%d-%%s", n)
		}
		newest = max(newest, sec)
	}
	if newest < 0 {
		t.Fatalf("logrotate rotated nothing: no %s-*", log)
	}
	return newest
}

// TestInstallBothParts: install.sh from a checkout, both parts on one
// machine (an all-in-one front-end), uninstalled in either order, gives the
// tree back exactly: no /var/lib/rbdfence left (both parts keep their
// record there), and it is not removed while the other part needs it.
func TestInstallBothParts(t *testing.T) {
	t.Parallel()
	p := release(t)
	inst := func(base string, args ...string) {
		t.Helper()
		mustRunIn(t, "", []string{"RBDFENCE_BIN=" + p.bin}, "bash", append([]string{filepath.Join(testenv.Root(), "install.sh")}, append(args, "--prefix", base)...)...)
	}
	for _, order := range [][2]string{{"frontend", "host"}, {"host", "frontend"}} {
		t.Run(order[0]+" first", func(t *testing.T) {
			base := t.TempDir()
			opennebula(t, base)
			before := snapshot(t, base, everything)
			inst(base, "frontend", "--apply")
			inst(base, "host")
			for _, f := range []string{"var/lib/rbdfence/install-frontend/manifest", "var/lib/rbdfence/install-host/manifest", "etc/libvirt/hooks/qemu.d/10-rbdfence"} {
				if _, err := os.Stat(filepath.Join(base, f)); err != nil {
					t.Fatal(err)
				}
			}
			inst(base, order[0], "--uninstall")
			if _, err := os.Stat(filepath.Join(base, "var/lib/rbdfence/install-"+order[1]+"/manifest")); err != nil {
				t.Fatalf("the %s part's uninstall took the %s part's record: %v", order[0], order[1], err)
			}
			inst(base, order[1], "--uninstall")
			sameTree(t, "after both uninstalls", before, snapshot(t, base, everything))
		})
	}
}

// TestInstallOverPrevious: a checkout install of the previous release (its
// own install.sh, both parts, the VM_MAD change applied) updated by this
// tree's install.sh, then uninstalled by it: OpenNebula's and libvirt's
// files are back exactly as before the first install.
func TestInstallOverPrevious(t *testing.T) {
	t.Parallel()
	a, b := previous(t), release(t)
	base := t.TempDir()
	opennebula(t, base)
	writeFile(t, filepath.Join(base, "etc/libvirt/hooks/qemu.d/50-other"), "#!/bin/sh\nexit 0\n", 0o755)
	writeFile(t, filepath.Join(base, "etc/systemd/system/rbdfence-events.timer"), "[Timer]\nOnCalendar=hourly\n", 0o600) // an admin's own
	before := snapshot(t, base, everything)
	inst := func(p *pkgs, args ...string) string {
		t.Helper()
		return mustRunIn(t, "", []string{"RBDFENCE_BIN=" + p.bin}, "bash", append([]string{filepath.Join(p.tree, "install.sh")}, append(args, "--prefix", base)...)...)
	}
	inst(a, "frontend", "--apply")
	inst(a, "host")
	applied := string(readFile(t, filepath.Join(base, "etc/one/oned.conf")))
	if !strings.Contains(applied, appliedArgs) {
		t.Fatalf("the previous install.sh --apply:\n%s", applied)
	}
	if out := inst(b, "frontend", "--apply"); !strings.Contains(out, "already runs the rbdfence local actions") {
		t.Fatalf("install.sh frontend --apply over the previous install:\n%s", out)
	}
	inst(b, "host")
	wantGone(t, base, "var/lib/rbdfence/install-frontend/created")
	if got := string(readFile(t, filepath.Join(base, "etc/one/oned.conf"))); got != applied {
		t.Fatalf("oned.conf changed:\n%s", got)
	}
	inst(b, "host", "--uninstall")
	inst(b, "frontend", "--uninstall")
	sameTree(t, "after the uninstall", before, snapshot(t, base, everything))
}
