package oned

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestHostFailures: the lifecycle rows where a host fails, on the real oned
// 7.4.0, each a subtest on the stack's victim host, one after the other
// (each breaks the host its own way and heals it at its end); the whole
// runs beside the other tests, which use the other hosts.
func TestHostFailures(t *testing.T) {
	t.Parallel()
	s := Start(t, "fe74")
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *Stack)
	}{
		{"HostErrorHookFencesAndReschedules", testHostErrorHookFencesAndReschedules},
		{"ResumeUnknownRunningRefused", testResumeUnknownRunningRefused},
		{"ResumeUnknownLibvirtdDownRefused", testResumeUnknownLibvirtdDownRefused},
		{"FailClosedThenRecoverRetry", testFailClosedThenRecoverRetry},
		{"RecreateFencesOldInstance", testRecreateFencesOldInstance},
		{"RefusalsInERROR", testRefusalsInERROR},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, s) })
	}
}

// TestOpenNebula6HostFailure (row "host failure", issue 19 item 4): the HA
// hook on 6.10.5's oned, as on 7.4.0 (testHostErrorHookFencesAndReschedules:
// `onehook create` of the host_error.hook install.sh frontend ships, the
// host cut off, host_error.rb's 2 x 60 s, `rbdfence fence-host`, the
// reschedule), on fe610's own victim host, beside the 7.4.0 tests: its
// wait is host_error.rb's pause (6.10.5: share/hooks/ft/host_error.rb:
// 181-203, MONITORING_INTERVAL_HOST times -p). It is declared right after
// TestHostFailures so that the two long parallel tests take the two
// parallel slots first and the short tests fill them after.
func TestOpenNebula6HostFailure(t *testing.T) {
	t.Parallel()
	testHostErrorHookFencesAndReschedules(t, Start(t, "fe610"))
}

// cutHost cuts host h off the front-end's network while its path to Ceph
// stays (hosts.sh cut: oned's ssh and monitoring no longer reach it; its
// libvirtd and QEMUs go on). At cleanup the VM's domain there is destroyed
// (from inside the host, not over the cut network), the host healed, and
// the test waits until oned monitors it again.
func (s *Stack) cutHost(t *testing.T, h Host, vm int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sh(ctx, "", "hosts.sh", "cut", h.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = s.TryHost(h, "virsh -q destroy one-"+strconv.Itoa(vm)+" >/dev/null 2>&1 || true")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := sh(ctx, "", "hosts.sh", "heal", h.Name); err != nil {
			t.Error(err)
			return
		}
		if err := s.waitHostState(ctx, h.Name, "MONITORED", 2*time.Minute); err != nil {
			t.Error(err)
		}
	})
}

// testHostErrorHookFencesAndReschedules (row "host failure"): rbdfence's HA
// hook, created as the README says (onehook create with the host_error.hook
// that install.sh frontend ships; onehook list shows it), fires when oned
// puts the cut-off host in ERROR. OpenNebula's host_error.rb waits -p 2
// monitoring intervals (2 x 60 s, share/hooks/ft/host_error.rb:160-188),
// then runs `rbdfence fence-host`, which blocklists the VM's QEMU there (it
// still writes to Ceph) and exits 0; only then does host_error.rb
// reschedule the VM (-m), and the scheduler starts it on the other host.
func testHostErrorHookFencesAndReschedules(t *testing.T, s *Stack) {
	a := s.Victim
	hook := s.createHostErrorHook(t)
	vm, img, _ := s.DeployNew(t, "ha", true, a)
	old := s.QEMUClient(t, a, vm, img.Source)
	s.cutHost(t, a, vm)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := s.waitHostState(ctx, a.Name, "ERROR", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	// The hook's 2-minute pause, the fence, the reschedule, the deploy
	// (on a host the scheduler picks: not the failed one).
	v := s.WaitVM(t, vm, "RUNNING on another host after the HA hook", 5*time.Minute, func(v *VM) bool {
		return v.Running() && v.Host() != a.Name
	})
	b := s.Host(t, v.Host())
	s.WaitFenced(t, a, vm)
	if !s.Blocklisted(t, old) {
		t.Fatalf("the failed host's client %s is not blocklisted", old)
	}
	// The hook's execution record: host_error.rb exited 0 (it exits
	// non-zero, rescheduling nothing, when the fence fails).
	hx := s.One(t, "onehook", "show", "-x", strconv.Itoa(hook))
	if !strings.Contains(hx, "<CODE>0</CODE>") {
		t.Fatalf("hook %d has no successful execution:\n%s", hook, hx)
	}
	var hostFenced bool
	for _, e := range s.ShowVM(t, vm).User.Events() {
		hostFenced = hostFenced || strings.Contains(e.Action, "host-fenced")
	}
	if !hostFenced {
		t.Fatalf("VM %d shows no host-fenced event: %+v", vm, s.ShowVM(t, vm).User.Events())
	}
	if !s.GuestWrite(t, b, vm, 0xd3) {
		t.Fatalf("VM %d cannot write on %s after the reschedule", vm, b.Name)
	}
}

// createHostErrorHook creates rbdfence's HA hook from the template that
// install.sh frontend installed (README, Host failure: onehook create,
// then onehook list to see that it is the only host_error hook) and
// removes it at cleanup.
func (s *Stack) createHostErrorHook(t testenv.T) int {
	t.Helper()
	out := s.One(t, "onehook", "create", "/var/lib/one/remotes/hooks/rbdfence/host_error.hook")
	id, err := parseID(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = s.Try("onehook", "delete", strconv.Itoa(id)) })
	list := s.One(t, "onehook", "list")
	n := 0
	for _, l := range strings.Split(list, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[2] == "state" {
			n++
			if f[0] != strconv.Itoa(id) || f[1] != "host_error_rbdfence" {
				t.Fatalf("onehook list shows another state hook than rbdfence's (%d):\n%s", id, list)
			}
		}
	}
	if n != 1 {
		t.Fatalf("onehook list does not show rbdfence's hook %d once:\n%s", id, list)
	}
	return id
}

// breakMonitoring makes OpenNebula's monitoring of h fail while the host,
// its libvirtd and its QEMUs stay up and reachable: the monitoring client
// on h stops and cannot be started again, because the rsync of the
// remotes that precedes every start (src/im_mad/im_exec/one_im_exec.rb:
// 68-97, src/mad/ruby/HostSyncManager.rb:82-98 in 7.4.0) fails on h (its
// rsync is /bin/false, as a full /var/tmp or a broken package would make
// it). Undone at cleanup; the test waits until h is monitored again.
func (s *Stack) breakMonitoring(t *testing.T, h Host) {
	t.Helper()
	id, err := s.HostID(h.Name)
	if err != nil {
		t.Fatal(err)
	}
	s.OnHost(t, h, fmt.Sprintf(`set -e
mount --bind /bin/false /usr/bin/rsync
pid=$(cat /tmp/one-monitord-%d.pid)
kill "$pid"`, id))
	t.Cleanup(func() {
		if _, err := s.TryHost(h, "while mountpoint -q /usr/bin/rsync; do umount /usr/bin/rsync; done"); err != nil {
			t.Error(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := s.waitHostState(ctx, h.Name, "MONITORED", 2*time.Minute); err != nil {
			t.Error(err)
		}
	})
}

// testResumeUnknownRunningRefused (row "resume of a VM in UNKNOWN that in
// fact runs on H"): the host's monitoring breaks (breakMonitoring) while
// the VM goes on running: the host goes ERROR and the VM UNKNOWN
// (src/im/InformationManager.cc:267-276, src/lcm/LifeCycleStates.cc:1176 in
// 7.4.0). `onevm resume` is then a deploy on the same host with the same
// HISTORY (src/dm/DispatchManagerActions.cc:746,
// src/lcm/LifeCycleActions.cc:853-857): rbdfence's host step sees one-<ID>
// running in libvirt and refuses; oned puts the VM back in UNKNOWN with the
// refusal in its ERROR, nothing is fenced and the guest writes on.
func testResumeUnknownRunningRefused(t *testing.T, s *Stack) {
	a := s.Victim
	vm, img, _ := s.DeployNew(t, "unknown", true, a)
	client := s.QEMUClient(t, a, vm, img.Source)
	s.breakMonitoring(t, a)
	s.WaitHost(t, a.Name, "ERROR")
	s.WaitVM(t, vm, "UNKNOWN", 2*time.Minute, func(v *VM) bool { return v.State == StateActive && v.LCM == LCMUnknown })
	s.resumeRefused(t, a, vm, client, "runs on "+a.Name+" already; use onevm recover --success")
	if !strings.Contains(s.VMLog(t, vm), "BOOT_UNKNOWN") {
		t.Fatalf("VM %d's log shows no BOOT_UNKNOWN (the deploy of the resume):\n%s", vm, s.VMLog(t, vm))
	}
	if !s.GuestWrite(t, a, vm, 0xd4) {
		t.Fatalf("the running guest of VM %d cannot write after the refused resume", vm)
	}
}

// resumeRefused is `onevm resume` of VM vm, UNKNOWN on a (its QEMU's
// client of its disk: client), refused by rbdfence: oned shows the VM
// UNKNOWN again with want in its ERROR (oned keeps the first 100
// characters of the driver's message there, src/vm/VirtualMachine.cc:
// 3092-3097, MAX_ERROR_MSG_LENGTH in include/VirtualMachine.h:1938; the
// whole line is in the VM log), on the same HISTORY record and host, and
// nothing was fenced: no blocklist entry of a's was added (the other
// tests fence on other hosts meanwhile), the live QEMU is a's only client.
func (s *Stack) resumeRefused(t *testing.T, a Host, vm int, client, want string) *VM {
	t.Helper()
	before := s.blocklistedFrom(t, a)
	seq := len(s.ShowVM(t, vm).History)
	s.One(t, "onevm", "resume", strconv.Itoa(vm))
	v := s.WaitVM(t, vm, "UNKNOWN again with the refusal in ERROR", CmdTimeout, func(v *VM) bool {
		return v.LCM == LCMUnknown && strings.Contains(v.User.Error, want)
	})
	wantRefusalShown(t, v, "DEPLOY", "nothing fenced", want)
	if len(v.History) != seq || v.Host() != a.Name {
		t.Fatalf("VM %d: the refused resume made HISTORY %d on %s, want the same record (%d) on %s", vm, len(v.History), v.Host(), seq, a.Name)
	}
	if n := s.blocklistedFrom(t, a); n != before {
		t.Fatalf("the refused resume changed the blocklist entries of %s: %d -> %d", a.Name, before, n)
	}
	if s.Blocklisted(t, client) {
		t.Fatalf("the running VM's client %s was blocklisted by the refused resume", client)
	}
	if w := s.QEMUClients(t, a, v.Disks[0].Image(vm)); len(w) != 1 || w[0] != client {
		t.Fatalf("after the refused resume %s has clients %v from %s, want the live QEMU's %s only", v.Disks[0].Image(vm), w, a.Name, client)
	}
	return v
}

// blocklistedFrom counts the blocklist entries of h's addresses.
func (s *Stack) blocklistedFrom(t testenv.T, h Host) int {
	t.Helper()
	n := 0
	for addr := range s.Ceph.BlocklistEntries(t) {
		if strings.HasPrefix(addr, h.IP+":") {
			n++
		}
	}
	return n
}

// testFailClosedThenRecoverRetry (rows "fail closed" and "recover --retry of
// a deploy that did not start"): a VM undeployed (its disk stays in Ceph)
// is deployed again on a host that no longer reaches Ceph (hosts.sh
// cephcut: its storage network is down). OpenNebula's own part of that start
// needs no Ceph (PROLOG_UNDEPLOY is the ceph TM's mv: ssh and tar, src/
// tm_mad/ceph/mv in 7.4.0), rbdfence's check on the host does: with
// fence.fail_open false it refuses, oned shows BOOT_UNDEPLOY_FAILURE with
// the one-line reason in the VM's ERROR, and no domain was started. Once
// the host reaches Ceph again, `onevm recover --retry` deploys it.
func testFailClosedThenRecoverRetry(t *testing.T, s *Stack) {
	a := s.Victim
	vm, _, _ := s.DeployNew(t, "failclosed", true, a)
	s.One(t, "onevm", "undeploy", "--hard", strconv.Itoa(vm))
	s.WaitVM(t, vm, "UNDEPLOYED", CmdTimeout, func(v *VM) bool { return v.State == StateUndeploy })
	heal := s.cutCeph(t, a)
	s.One(t, "onevm", "deploy", strconv.Itoa(vm), a.Name, strconv.Itoa(s.SystemDS))
	v := s.WaitVM(t, vm, "BOOT_UNDEPLOY_FAILURE", 3*time.Minute, func(v *VM) bool { return v.LCM == LCMBootUndeployFailure })
	wantRefusalShown(t, v, "DEPLOY", "nothing fenced", "Ceph")
	if st := s.DomainState(t, a, vm); st != "" {
		t.Fatalf("one-%d exists on %s after the refused deploy: %q", vm, a.Name, st)
	}
	heal()
	s.One(t, "onevm", "recover", "--retry", strconv.Itoa(vm))
	s.WaitRunning(t, vm)
	if !s.GuestWrite(t, a, vm, 0xd5) {
		t.Fatalf("VM %d cannot write after recover --retry", vm)
	}
}

// testResumeUnknownLibvirtdDownRefused (row "resume of a VM in UNKNOWN ...
// while libvirtd there does not answer", issue 18): libvirtd on the VM's
// host stops while its QEMU runs on, and the host's monitoring breaks
// (breakMonitoring): host ERROR, VM UNKNOWN. `onevm resume` is a deploy on
// the same host; rbdfence's host step cannot get libvirt's answer about
// one-<ID> and refuses (exit 3, "cannot tell whether one-N still runs"):
// oned puts the VM back in UNKNOWN with the refusal in its ERROR, nothing
// is fenced, and once libvirtd is back the live guest's next write
// succeeds.
func testResumeUnknownLibvirtdDownRefused(t *testing.T, s *Stack) {
	a := s.Victim
	vm, img, _ := s.DeployNew(t, "libvirtd-down", true, a)
	client := s.QEMUClient(t, a, vm, img.Source)
	// In this order, so that the cleanups start libvirtd before they wait
	// for the host to be monitored again.
	s.breakMonitoring(t, a)
	s.stopLibvirtd(t, a)
	s.WaitHost(t, a.Name, "ERROR")
	s.WaitVM(t, vm, "UNKNOWN", 2*time.Minute, func(v *VM) bool { return v.State == StateActive && v.LCM == LCMUnknown })
	s.resumeRefused(t, a, vm, client, "libvirt on "+a.Name+" silent; retry when it answers")
	if l := s.VMLog(t, vm); !strings.Contains(l, "libvirt did not answer") || !strings.Contains(l, "retry once libvirt answers") {
		t.Fatalf("VM %d's log does not give the refusal's reason (libvirt did not answer) and what to do:\n%s", vm, l)
	}
	s.startLibvirtd(t, a)
	if !s.GuestWrite(t, a, vm, 0xd6) {
		t.Fatalf("the live guest of VM %d cannot write after the refused resume", vm)
	}
	if s.Blocklisted(t, client) {
		t.Fatalf("the live VM's client %s was blocklisted", client)
	}
}

// testRecreateFencesOldInstance (row "recover --recreate"): libvirtd on the
// VM's host has stopped while its QEMU writes on, and the operator
// recreates the VM. OpenNebula's cleanup "cancels" it there: the kvm cancel
// takes a domain libvirt cannot describe for one already gone
// (`virsh --readonly dominfo ... || return 0`, vmm_mad/remotes/kvm/cancel
// in 7.4.0), so the old QEMU stays, a zombie; the recreated VM is deployed
// on the other host, where rbdfence blocklists the old instance's client
// before the new QEMU starts: once libvirtd is back the old QEMU's next
// write fails, `onevm show` has the event, the new guest writes.
//
// The same with the host cut off silently, or with its sshd down, loses the
// cleanup in oned's kvm driver now and then (the VM stays in
// CLEANUP_RESUBMIT, docs/LIFECYCLE.md): not a row rbdfence can prove there.
func testRecreateFencesOldInstance(t *testing.T, s *Stack) {
	a, b := s.Victim, s.Hosts[1]
	img := s.NewImage(t, "recreate", true)
	// The scheduler places the recreated VM (PENDING again): on b.
	vm := s.NewVM(t, VMTemplate("recreate", img)+`SCHED_REQUIREMENTS = "NAME = \"`+b.Name+`\""`+"\n")
	s.Deploy(t, vm, a)
	old := s.QEMUClient(t, a, vm, img.Source)
	t.Cleanup(func() { _, _ = s.TryHost(a, "virsh -q destroy one-"+strconv.Itoa(vm)+" >/dev/null 2>&1 || true") })
	if !s.GuestWrite(t, a, vm, 0xd7) {
		t.Fatalf("the QEMU of VM %d on %s cannot write before the recreate: the test is wrong", vm, a.Name)
	}
	s.stopLibvirtd(t, a)
	s.One(t, "onevm", "recover", "--recreate", strconv.Itoa(vm))
	s.WaitVM(t, vm, "RUNNING on "+b.Name+" after the recreate", 4*time.Minute, func(v *VM) bool { return v.Running() && v.Host() == b.Name })
	if !s.Blocklisted(t, old) {
		t.Fatalf("the old instance's client %s is not blocklisted", old)
	}
	s.FencedEvent(t, vm, old)
	s.startLibvirtd(t, a)
	if st := s.DomainState(t, a, vm); st == "" {
		t.Fatalf("one-%d is gone from %s: the old QEMU did not outlive the cleanup, the test is wrong", vm, a.Name)
	}
	s.WaitFenced(t, a, vm)
	if !s.GuestWrite(t, b, vm, 0xd8) {
		t.Fatalf("the recreated VM %d on %s cannot write", vm, b.Name)
	}
}

// stopLibvirtd stops libvirtd on h (its QEMUs run on); it is started again
// by startLibvirtd or at cleanup.
func (s *Stack) stopLibvirtd(t *testing.T, h Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sh(ctx, "", "hosts.sh", "libvirtd", h.Name, "stop"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.startLibvirtd(t, h) })
}

// startLibvirtd starts libvirtd on h (a no-op when it runs) and waits until
// it answers.
func (s *Stack) startLibvirtd(t *testing.T, h Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sh(ctx, "", "hosts.sh", "libvirtd", h.Name, "start"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if _, err := s.TryHost(h, "virsh -q list >/dev/null"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("libvirtd on %s does not answer a minute after its start", h.Name)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// cutCeph cuts host h off the Ceph cluster (hosts.sh cephcut) until the
// returned heal runs, or the test ends.
func (s *Stack) cutCeph(t *testing.T, h Host) (heal func()) {
	t.Helper()
	return s.hostRules(t, h, "cephcut", "cephheal")
}

// stallSSH drops every packet host h's sshd sends (hosts.sh sshstall)
// until the returned heal runs, or the test ends.
func (s *Stack) stallSSH(t *testing.T, h Host) (heal func()) {
	t.Helper()
	return s.hostRules(t, h, "sshstall", "sshheal")
}

// hangLibvirtd stops libvirtd on h with SIGSTOP (hosts.sh libvirtd hang:
// its sockets accept, nothing answers) until the returned heal continues
// it, or the test ends.
func (s *Stack) hangLibvirtd(t *testing.T, h Host) (heal func()) {
	t.Helper()
	return undoable(t, func() error { return hostsSh("libvirtd", h.Name, "hang") },
		func() error { return hostsSh("libvirtd", h.Name, "cont") })
}

// pauseMon stops the stack's Ceph monitor, its only one, with SIGSTOP
// until the returned heal continues it, or the test ends: no client can
// connect, open clients' I/O to the OSD goes on.
func (s *Stack) pauseMon(t *testing.T) (heal func()) {
	t.Helper()
	f := filepath.Join(s.Ceph.Dir, "run", "mon.pid")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatalf("mon-pause: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("mon-pause: %s holds no pid: %q", f, b)
	}
	if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) != "ceph-mon" {
		t.Fatalf("mon-pause: process %d of %s is not ceph-mon (%q)", pid, f, comm)
	}
	return undoable(t, func() error { return syscall.Kill(pid, syscall.SIGSTOP) },
		func() error { return syscall.Kill(pid, syscall.SIGCONT) })
}

// hostRules runs hosts.sh on for host h and returns what runs hosts.sh
// off, once, at the latest when the test ends.
func (s *Stack) hostRules(t *testing.T, h Host, on, off string) (heal func()) {
	t.Helper()
	return undoable(t, func() error { return hostsSh(on, h.Name) }, func() error { return hostsSh(off, h.Name) })
}

// hostsSh runs hosts.sh with args, bounded by a minute.
func hostsSh(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := sh(ctx, "", "hosts.sh", args...)
	return err
}

// undoable runs do and returns what runs undo, once, at the latest when the
// test ends.
func undoable(t *testing.T, do, undo func() error) (heal func()) {
	t.Helper()
	if err := do(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	heal = func() {
		once.Do(func() {
			if err := undo(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(heal)
	return heal
}
