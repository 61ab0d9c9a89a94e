// Command onedbench measures what rbdfence costs a real deploy and a real
// live migration: OpenNebula 7.4.0's oned built from source (test/oned), two
// KVM hosts with their own libvirtd, VMs with an RBD disk on the suite's Ceph
// cluster.
//
// Two flavours, on the same oned and the same two hosts:
//   - rbdfence: both hosts with VM_MAD "kvm", rbdfence's local actions as
//     `install.sh frontend --apply` leaves them, and rbdfence's libvirt hook
//     (/etc/libvirt/hooks/qemu.d/10-rbdfence, install.sh host) in place,
//     and (-sshhooks, the default) rbdfence's ssh hooks on PROLOG and
//     MIGRATE created with onehook create (README: ssh without
//     multiplexing), deleted again for the baseline;
//   - baseline, OpenNebula without rbdfence: both hosts with VM_MAD
//     "kvmbase", the same driver line without the -l actions (added by this
//     program), and the hook file replaced by `exit 0`.
//
// The hook is swapped by renaming a file over the same path, while no VM
// exists: libvirt caches only whether any qemu hook exists (virHooksFound,
// reset on SIGHUP) and opens qemu.d/ and runs its executables anew on every
// call (virHookCall, src/util/virhook.c in libvirt 9.0), so the next call
// runs the new file and libvirtd needs no restart. The hosts change VM_MAD by
// onehost delete/create (a host's VM_MAD is fixed at creation; oned runs a
// migration with the destination's driver, src/vmm/VirtualMachineManager.cc:1187
// in 7.4.0, so both hosts must carry the flavour). The hook and its mode are
// put back when the program ends, failed or not (and make bench-oned runs
// make test-clean after it).
//
// A round is both flavours, one after the other, in the order rbdfence,
// baseline on even rounds and baseline, rbdfence on odd ones (one switch per
// round, and neither flavour always goes first under a drifting load). Each
// flavour deploys a fresh VM (`onevm deploy` to RUNNING, PROLOG included:
// OpenNebula clones the image in Ceph) on the round's home host (the two
// hosts alternate by round), live migrates it to the other host and back, and
// terminates it. Each timed operation starts after a pause (-settle, 2 s),
// so that none meets what the one before it still does in the background
// (QEMU's exit, the hooks' and the actions' records, Ceph's deletes). A
// deploy's time is also cut at the first poll that sees it in BOOT: from
// there to RUNNING is the VMM deploy alone, where rbdfence acts, without
// PROLOG's Ceph clone, whose time varies most from one VM to the next.
// It prints the medians of each flavour, their difference,
// rbdfence's share of the baseline and the median of the differences within
// each round (both flavours ran there under the same load).
//
// With -ssh both (the default) the rounds run twice: oned's drivers with
// plain ssh, then with the packages' multiplexing (frontend.sh sshmux:
// OpenNebula's ssh wrapper, share/ssh/bin/ssh, first in oned's PATH as its
// systemd unit has it; every driver ssh, rbdfence's too, goes through a
// master kept 70 s), each with its own report.
//
//	go run -tags pacific ./test/bench/onedbench -rounds 10 -ssh both
//
// Needs root; it builds (cached) and starts the suite's stack and leaves it
// running (make test-clean stops it).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/test/oned"
	"github.com/rbdfence/rbdfence/test/testenv"
)

func main() {
	rounds := flag.Int("rounds", 10, "rounds (each: per flavour, a deploy and two live migrations)")
	sshMode := flag.String("ssh", "both", "oned's ssh: plain, mux (the packages' multiplexing: OpenNebula's ssh wrapper in oned's PATH) or both (plain rounds, then mux rounds)")
	settleFlag := flag.Duration("settle", 2*time.Second, "pause before each timed operation, so that none starts while the one before it still ends in the background (QEMU's exit, the hooks' and the actions' records, Ceph's deletes)")
	sshHooksFlag := flag.Bool("sshhooks", true, "the rbdfence flavour has rbdfence's ssh hooks (packaging/files/prolog_ssh.hook and migrate_ssh.hook: rbdfence's ssh masters opened while PROLOG and a live migration's tm premigrate run), created with onehook create for its VMs and deleted for the baseline's")
	flag.StringVar(&libvirtLog, "libvirtlog", "", "a directory: libvirtd on both hosts logs its migration and process phases (virt-admin daemon-log-filters, debug level) and the logs are copied there when the program ends, each traced operation's start in the trace's lines (UTC) to match them")
	trace := flag.Int("trace", 0, "after the rounds, this many rounds under perf, each a deploy and a live migration per flavour: the first round's process trees (each process's start, run time and connects) and the medians of the VMM action's time (trace.go)")
	flag.Parse()
	settle, sshHooks = *settleFlag, *sshHooksFlag
	if settle < 0 || settle > time.Minute {
		fmt.Fprintln(os.Stderr, "onedbench: -settle must be between 0 and 1m")
		os.Exit(2)
	}
	if *rounds < 2 && !(*rounds == 0 && *trace > 0) || *trace < 0 {
		fmt.Fprintln(os.Stderr, "onedbench: -rounds must be at least 2 (or 0 with -trace)")
		os.Exit(2)
	}
	modes, ok := map[string][]string{"plain": {"plain"}, "mux": {"mux"}, "both": {"plain", "mux"}}[*sshMode]
	if !ok {
		fmt.Fprintf(os.Stderr, "onedbench: -ssh %q: want plain, mux or both\n", *sshMode)
		os.Exit(2)
	}
	if err := testenv.RunProgram(func(t testenv.T) error { return run(t, *rounds, modes, *trace) }); err != nil {
		fmt.Fprintln(os.Stderr, "onedbench:", err)
		os.Exit(1)
	}
}

// sample: each deploy's time to RUNNING, and of it the time from BOOT (the
// VMM deploy: PROLOG over), and each live migration's time to RUNNING.
type sample struct{ deploy, boot, migrate []time.Duration }

// flavour is one side of the comparison: the hosts' VM_MAD and the hook.
type flavour struct {
	name  string
	vmMad string
	hook  bool
	s     sample
}

func run(t testenv.T, rounds int, modes []string, trace int) error {
	s := oned.Start(t, "fe74")
	if libvirtLog != "" {
		if err := startLibvirtLog(t, s, libvirtLog); err != nil {
			return err
		}
	}
	hooks, err := saveHooks(t, s)
	if err != nil {
		return err
	}
	if err := addPlainVMMAD(t, s); err != nil {
		return err
	}
	img := s.NewImage(t, "bench", false)
	for _, mode := range modes {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		err := s.SSHMux(ctx, mode == "mux")
		cancel()
		if err != nil {
			return fmt.Errorf("ssh %s: %w", mode, err)
		}
		if rounds > 0 {
			if err := bench(t, s, hooks, img, rounds, mode); err != nil {
				return err
			}
		}
		if trace > 0 {
			fl := []*flavour{{name: "rbdfence", vmMad: s.Hypervisor, hook: true}, {name: "baseline", vmMad: "kvmbase"}}
			// The trace is an aside: its failure does not end the rounds.
			if err := traceRounds(t, s, hooks, img, mode, fl, trace); err != nil {
				fmt.Fprintf(os.Stderr, "onedbench: the trace of ssh %s failed: %v\n", mode, err)
			}
		}
	}
	return nil
}

// bench runs the rounds with oned's ssh in mode and prints their report.
func bench(t testenv.T, s *oned.Stack, hooks []hookFile, img oned.Image, rounds int, mode string) error {
	with := &flavour{name: "rbdfence", vmMad: s.Hypervisor, hook: true}
	without := &flavour{name: "baseline", vmMad: "kvmbase", hook: false}
	load0 := loadavg()
	t0 := time.Now()
	for r := 0; r < rounds; r++ {
		order := []*flavour{with, without}
		if r%2 == 1 {
			order = []*flavour{without, with}
		}
		home, away := s.Hosts[r%2], s.Hosts[1-r%2]
		for _, f := range order {
			if err := use(t, s, hooks, f); err != nil {
				return err
			}
			vm := s.NewVM(t, oned.VMTemplate(fmt.Sprintf("bench-%s-%d-%s", mode, r, f.name), img))
			time.Sleep(settle)
			var boot time.Time
			f.s.deploy = append(f.s.deploy, timeIt(func() { boot = deploy(t, s, vm, home) }))
			f.s.boot = append(f.s.boot, time.Since(boot))
			time.Sleep(settle)
			f.s.migrate = append(f.s.migrate, timeIt(func() { migrate(t, s, vm, away) }))
			time.Sleep(settle)
			f.s.migrate = append(f.s.migrate, timeIt(func() { migrate(t, s, vm, home) }))
			s.One(t, "onevm", "terminate", "--hard", strconv.Itoa(vm))
			s.WaitVM(t, vm, "DONE", 2*time.Minute, func(v *oned.VM) bool { return v.State == oned.StateDone })
		}
		fmt.Fprintf(os.Stderr, "ssh %s round %d/%d (%s first, home %s): deploy %s / %s (from BOOT %s / %s), migrate %s %s / %s %s (rbdfence / baseline), %s so far\n",
			mode, r+1, rounds, order[0].name, home.Name, last(with.s.deploy, 1), last(without.s.deploy, 1), last(with.s.boot, 1), last(without.s.boot, 1),
			last(with.s.migrate, 2), last(with.s.migrate, 1), last(without.s.migrate, 2), last(without.s.migrate, 1),
			time.Since(t0).Round(time.Second))
	}
	fmt.Printf("onedbench %s, ssh %s, %d rounds, OpenNebula %s, VM_MAD %s vs kvmbase (hook off), ssh hooks %s, %s settle; load average at the start %s, at the end %s\n",
		time.Now().UTC().Format("2006-01-02 15:04Z"), mode, rounds, s.Version, s.Hypervisor, map[bool]string{true: "on", false: "off"}[sshHooks], settle, load0, loadavg())
	report("onevm deploy -> RUNNING", with.s.deploy, without.s.deploy)
	report("  of it BOOT -> RUNNING", with.s.boot, without.s.boot)
	report("onevm migrate --live -> RUNNING", with.s.migrate, without.s.migrate)
	return nil
}

// hookFile is a host's rbdfence hook as install.sh host left it.
type hookFile struct {
	path string
	body []byte
	mode os.FileMode
}

// noopHook is the baseline's hook file: libvirt runs it, rbdfence is not.
const noopHook = "#!/bin/sh\n# onedbench: baseline half, rbdfence's hook is off (put back when onedbench ends)\nexit 0\n"

// saveHooks reads both hosts' hook files and registers their restore, which
// runs however the program ends (testenv.RunProgram's cleanups).
func saveHooks(t testenv.T, s *oned.Stack) ([]hookFile, error) {
	var hooks []hookFile
	for _, h := range s.Hosts {
		p := s.HookPath(h)
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("rbdfence's hook on %s: %w", h.Name, err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if string(b) == noopHook {
			return nil, fmt.Errorf("%s is onedbench's no-op hook, not rbdfence's: run make test-clean (the stack reinstalls it)", p)
		}
		hooks = append(hooks, hookFile{p, b, fi.Mode().Perm()})
	}
	t.Cleanup(func() {
		for _, hf := range hooks {
			if err := putFile(hf.path, hf.body, hf.mode); err != nil {
				fmt.Fprintf(os.Stderr, "onedbench: rbdfence's hook not put back: %v (make test-clean removes the hosts)\n", err)
			}
		}
	})
	return hooks, nil
}

// putFile replaces path by a file with body and mode, renamed over it: a
// hook call never runs a half-written file. The new file is made in the
// directory above (hooks/, the same file system), where libvirt runs
// nothing but the per-driver scripts.
func putFile(path string, body []byte, mode os.FileMode) error {
	tmp := filepath.Join(filepath.Dir(filepath.Dir(path)), ".onedbench-"+filepath.Base(path))
	if err := os.WriteFile(tmp, body, 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	got, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if string(got) != string(body) {
		return fmt.Errorf("%s: read back %d bytes, not the %d written", path, len(got), len(body))
	}
	return nil
}

// sshHooks: the rbdfence flavour has rbdfence's ssh hooks (-sshhooks);
// sshHookIDs are the hooks while they exist (nil: none).
var (
	sshHooks   bool
	sshHookIDs []int
	hooksClean bool // their deletion at the program's end is registered
)

// sshHookFiles are the hooks' templates as install.sh frontend installs them.
var sshHookFiles = []string{"/var/lib/one/remotes/hooks/rbdfence/prolog_ssh.hook", "/var/lib/one/remotes/hooks/rbdfence/migrate_ssh.hook"}

// useSSHHooks creates rbdfence's ssh hooks for the rbdfence flavour
// (onehook create, as the README says) and deletes them for the baseline's:
// OpenNebula without rbdfence has no such hooks. They are deleted when the
// program ends, failed or not.
func useSSHHooks(t testenv.T, s *oned.Stack, on bool) error {
	if !hooksClean {
		hooksClean = true
		t.Cleanup(func() {
			for _, id := range sshHookIDs {
				_, _ = s.Try("onehook", "delete", strconv.Itoa(id))
			}
		})
	}
	switch {
	case on && sshHookIDs == nil:
		for _, file := range sshHookFiles {
			out := s.One(t, "onehook", "create", file)
			f := strings.Fields(out) // "ID: 3"
			if len(f) == 0 {
				return fmt.Errorf("onehook create %s: %q", file, out)
			}
			id, err := strconv.Atoi(f[len(f)-1])
			if err != nil {
				return fmt.Errorf("onehook create %s: %q", file, out)
			}
			sshHookIDs = append(sshHookIDs, id)
		}
	case !on && sshHookIDs != nil:
		for _, id := range sshHookIDs {
			s.One(t, "onehook", "delete", strconv.Itoa(id))
		}
		sshHookIDs = nil
	}
	return nil
}

// use switches both hosts to f: the hook file first (no VM exists between
// two flavours), then the VM_MAD, and rbdfence's ssh hooks (-sshhooks).
func use(t testenv.T, s *oned.Stack, hooks []hookFile, f *flavour) error {
	if err := useSSHHooks(t, s, f.hook && sshHooks); err != nil {
		return err
	}
	for _, hf := range hooks {
		body := []byte(noopHook)
		if f.hook {
			body = hf.body
		}
		if err := putFile(hf.path, body, hf.mode); err != nil {
			return fmt.Errorf("switching to the %s flavour: %w", f.name, err)
		}
	}
	for _, h := range s.Hosts {
		out := s.One(t, "onehost", "show", "-x", h.Name)
		if !strings.Contains(out, "<VM_MAD><![CDATA["+f.vmMad+"]]></VM_MAD>") {
			s.ReplaceHost(t, h.Name, f.vmMad)
		}
	}
	return nil
}

// libvirtLog is -libvirtlog.
var libvirtLog string

// libvirtFilters are libvirtd's debug logs of a migration's phases (Begin,
// Prepare, Perform, Finish, Confirm), its QEMU's start and stop, its
// monitor commands and its hook calls.
const libvirtFilters = "1:qemu.qemu_migration 1:qemu.qemu_process 1:qemu.qemu_monitor 1:qemu.qemu_domain 1:util.hook 4:*"

// startLibvirtLog turns libvirtd's debug log on for both hosts (at run time:
// virt-admin, no restart) into the host's /var/log/onedbench-libvirtd.log,
// and copies each into dir when the program ends, before the stack stops.
func startLibvirtLog(t testenv.T, s *oned.Stack, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, h := range s.Hosts {
		if out, err := s.TryHost(h, "virt-admin daemon-log-filters '"+libvirtFilters+"' && virt-admin daemon-log-outputs '1:file:/var/log/onedbench-libvirtd.log'"); err != nil {
			return fmt.Errorf("libvirtd's log on %s: %v: %s", h.Name, err, out)
		}
	}
	t.Cleanup(func() {
		for _, h := range s.Hosts {
			src := filepath.Join(oned.Dir(), h.Name, "fs", "var-log", "onedbench-libvirtd.log")
			b, err := os.ReadFile(src)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, "libvirtd-"+h.Name+".log"), b, 0o644)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "onedbench: libvirtd's log of %s not copied: %v\n", h.Name, err)
			}
		}
	})
	return nil
}

// loadavg is /proc/loadavg's 1, 5 and 15 minute figures.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func timeIt(f func()) time.Duration { t0 := time.Now(); f(); return time.Since(t0) }

// last is the n-th duration from the end of d.
func last(d []time.Duration, n int) time.Duration { return d[len(d)-n].Round(time.Millisecond) }

// settle is -settle: the pause before each timed operation.
var settle time.Duration

// deploy deploys vm on to and returns when it is RUNNING there, with the
// time the VM was first seen in LCM state BOOT (PROLOG over, the VMM deploy
// dispatched; the zero time if never seen).
func deploy(t testenv.T, s *oned.Stack, vm int, to oned.Host) (boot time.Time) {
	s.One(t, "onevm", "deploy", strconv.Itoa(vm), to.Name, strconv.Itoa(s.SystemDS))
	return waitRunningOn(t, s, vm, to)
}

func migrate(t testenv.T, s *oned.Stack, vm int, to oned.Host) {
	s.One(t, "onevm", "migrate", "--live", strconv.Itoa(vm), to.Name)
	waitRunningOn(t, s, vm, to)
}

// lcmBoot is LCM state BOOT (include/VirtualMachine.h of release-7.4.0).
const lcmBoot = 2

// waitRunningOn polls one.vm.info every 20 ms (the tests' WaitVM polls
// twice a second: its step would hide a difference of tens of ms) until the
// VM is RUNNING on to (MigratedTo: after a deploy as after a migration,
// the record of to has its RSTIME); a VM that leaves ACTIVE or a failure fails the run.
// boot is when the VM was first seen in BOOT (the zero time if never).
func waitRunningOn(t testenv.T, s *oned.Stack, vm int, to oned.Host) (boot time.Time) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		t0 := time.Now()
		v := s.ShowVM(t, vm)
		if v.MigratedTo(to.Name) {
			if boot.IsZero() {
				boot = t0
			}
			return boot
		}
		if v.State == oned.StateActive && v.LCM == lcmBoot && boot.IsZero() {
			boot = t0
		}
		if v.State != oned.StateActive && v.State != oned.StatePending && v.State != oned.StateHold {
			t.Fatalf("VM %d left ACTIVE on its way to RUNNING on %s: %s\n%s", vm, to.Name, v, s.VMLog(t, vm))
		}
		if time.Now().After(deadline) {
			t.Fatalf("VM %d is not RUNNING on %s: %s\n%s", vm, to.Name, v, s.VMLog(t, vm))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func median(d []time.Duration) time.Duration {
	c := append([]time.Duration(nil), d...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

// report prints the medians of both flavours, their difference and
// rbdfence's share of the plain median, and the median of the differences
// within each round (with and without ran one after the other there, under
// the same load).
func report(name string, with, without []time.Duration) {
	mw, mo := median(with), median(without)
	var pair []time.Duration
	for i := range with {
		pair = append(pair, with[i]-without[i])
	}
	mp := median(pair)
	fmt.Printf("%-34s with rbdfence %7s  without %7s  difference %+7s  rbdfence's share %+.1f%%  (medians of %d); median of the rounds' differences %+7s (%+.1f%%)\n",
		name, mw.Round(time.Millisecond), mo.Round(time.Millisecond), (mw - mo).Round(time.Millisecond),
		100*float64(mw-mo)/float64(mo), len(with), mp.Round(time.Millisecond), 100*float64(mp)/float64(mo))
}

// addPlainVMMAD adds VM_MAD "kvmbase": the kvm VM_MAD's driver line
// without rbdfence's -l actions, then restarts oned.
func addPlainVMMAD(t testenv.T, s *oned.Stack) error {
	conf := s.One(t, "cat", "/etc/one/oned.conf")
	if strings.Contains(conf, `NAME           = "kvmbase"`) {
		return nil
	}
	tpl := fmt.Sprintf(`
# onedbench: the kvm driver without rbdfence's local actions
VM_MAD = [
    NAME           = "kvmbase",
    EXECUTABLE     = "one_vmm_exec",
    ARGUMENTS      = "-t 15 -r 0 kvm -p",
    DEFAULT        = "vmm_exec/vmm_exec_kvm.conf",
    TYPE           = "%s",
    KEEP_SNAPSHOTS = "yes",
    LIVE_RESIZE    = "yes",
    SUPPORT_SHAREABLE = "yes"
]
`, s.Hypervisor)
	s.One(t, "bash", "-c", "cat >>/etc/one/oned.conf <<'EOF'"+tpl+"EOF")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return s.Restart(ctx)
}
