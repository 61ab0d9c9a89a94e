package oned

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestFailedLiveMigrationFencesCopy (lifecycle row "live migrate: it
// failed"): a persistent disk's VM runs on A, and a client on B (a copy
// left there, say by an earlier attempt) writes the same image. `onevm
// migrate --live` to B fails in libvirt: B's libvirtd refuses the incoming
// domain (a qemu hook of B's, after rbdfence's, exits 1 at `migrate begin`
// for this VM alone), so OpenNebula's vmm/kvm/migrate exits 1. The
// migrate action asks A's libvirt (step `domain`: one-N running, no job)
// and the close step on B fences every client of the image on B: the copy
// is blocklisted (its next write fails with errno 108) and shown in
// `onevm show`; oned reverts the VM to RUNNING on A ("Fail to live migrate
// VM", LifeCycleStates.cc:153-154 of release-7.4.0, a new history record
// copying A's), where its guest still writes. With B's hook gone, the next
// live migration to B (a new window) goes through unfenced.
func TestFailedLiveMigrationFencesCopy(t *testing.T) {
	t.Parallel()
	s := Start(t, "fe74")
	a, b := s.Hosts[0], s.Hosts[1]
	vm, img, v := s.DeployNew(t, "failed-migrate", true, a)
	records := len(v.History)
	if !s.GuestWrite(t, a, vm, 0xc1) {
		t.Fatalf("the guest of VM %d cannot write its disk on %s", vm, a.Name)
	}
	onA := []string{s.QEMUClient(t, a, vm, img.Source)}
	copyOnB := testenv.StartZombieOn(t, s.Ceph, b.Net(), img.Source, "write")
	copyOnB.WaitWrite(t, true, 30*time.Second)

	allow := s.refuseIncoming(t, b, vm)

	s.One(t, "onevm", "migrate", "--live", strconv.Itoa(vm), b.Name)
	v = s.WaitVM(t, vm, "RUNNING on "+a.Name+" after the failed migration", CmdTimeout, func(v *VM) bool {
		return v.Running() && v.Host() == a.Name && len(v.History) >= records+2
	})
	if log := s.VMLog(t, vm); !strings.Contains(log, "Fail to live migrate VM") {
		t.Fatalf("VM %d's log does not say the live migration failed:\n%s", vm, log)
	}
	if ev := copyOnB.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the copy on %s after the failed migration: errno %d, want 108 (blocklisted)", b.Name, ev.Errno)
	}
	ev := s.FencedEvent(t, vm, copyOnB.Addr)
	if ev.Host != b.Name || ev.Image != img.Source {
		t.Fatalf("collision event %+v: want host %s, image %s", ev, b.Name, img.Source)
	}
	if st := s.DomainState(t, b, vm); st != "" {
		t.Fatalf("one-%d is %q on %s after the failed migration, want no domain", vm, st, b.Name)
	}
	if !s.GuestWrite(t, a, vm, 0xc2) {
		t.Fatalf("the guest of VM %d on %s cannot write after the failed migration", vm, a.Name)
	}
	for _, c := range onA {
		if s.Blocklisted(t, c) {
			t.Fatalf("the source's QEMU client %s was blocklisted", c)
		}
	}

	// The refusal gone, the migration is retried and hands over.
	allow()
	s.One(t, "onevm", "migrate", "--live", strconv.Itoa(vm), b.Name)
	s.WaitVM(t, vm, "RUNNING on "+b.Name, CmdTimeout, func(v *VM) bool { return v.MigratedTo(b.Name) })
	if !s.GuestWrite(t, b, vm, 0xc3) {
		t.Fatalf("the guest of VM %d cannot write on %s after the retried migration", vm, b.Name)
	}
	for _, c := range s.QEMUClients(t, b, img.Source) {
		if s.Blocklisted(t, c) {
			t.Fatalf("the migrated QEMU's client %s on %s was blocklisted", c, b.Name)
		}
	}
}

// TestRecoverDuringLiveMigration (row "recover --success / --failure"): a
// live migration hangs in B's libvirtd (a qemu hook of B's holds the
// incoming domain at `started begin`, its QEMU up and paused, until the
// test releases it), and while oned shows the VM in MIGRATE the admin
// decides with `onevm recover`: oned runs no driver
// for it (src/lcm/LifeCycleActions.cc:1454-1477 of release-7.4.0: --success
// is the deploy's success, RUNNING on B; --failure its failure, reverted to
// RUNNING on A) while rbdfence's migrate action goes on. When libvirt lets
// the migration go on (success) or refuses it (failure), the action closes
// the window as the migration really ended: the guest runs and writes where
// libvirt put it, nothing of it is fenced, and the next live migration,
// from there, hands over (the claim follows the VM, not oned's guess).
func TestRecoverDuringLiveMigration(t *testing.T) {
	t.Parallel()
	s := Start(t, "fe74")
	for _, c := range []struct {
		how  string
		code int // the hook's exit after the hold: 0 lets the migration go on
	}{{"success", 0}, {"failure", 1}} {
		t.Run(c.how, func(t *testing.T) { testRecoverDuringLiveMigration(t, s, c.how, c.code) })
	}
}

func testRecoverDuringLiveMigration(t *testing.T, s *Stack, how string, code int) {
	a, b := s.Hosts[0], s.Hosts[1]
	vm, img, _ := s.DeployNew(t, "recover-"+how, true, a)
	id := strconv.Itoa(vm)
	// A success is held at `started`, not at `migrate` (before the
	// incoming domain exists): oned's monitoring of B, once recover
	// --success has put the VM there, must find one-<ID> on B (paused, "starting up" or
	// "migrating": RUNNING in src/im_mad/remotes/lib/kvm.rb:337-358 of
	// release-7.4.0); a VM missing from a host's state sync is set POWEROFF
	// (src/im/InformationManager.cc:504-575), and with SYNC_STATE_VM at
	// 30 s a hold at `migrate` met a sync on a busy machine. The test
	// releases the hold as soon as the recover has returned. A failure is
	// held at `migrate`, whose non-zero exit makes libvirt refuse the
	// incoming domain (oned has the VM on A, monitored there).
	at := "started"
	if code != 0 {
		at = "migrate"
	}
	hold := s.hostFS(b, "etc-libvirt/hooks/qemu.d/90-test-hold-one-"+id)
	held, release := hold+".held", hold+".release"
	body := fmt.Sprintf("#!/bin/sh\ncat >/dev/null\nh=/etc/libvirt/hooks/qemu.d/90-test-hold-one-%d\n[ \"$1\" = one-%d ] && [ \"$2\" = %s ] && { : > $h.held; n=0; while [ ! -e $h.release ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done; exit %d; }\nexit 0\n", vm, vm, at, code)
	if err := os.WriteFile(hold, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(hold); _ = os.Remove(held); _ = os.Remove(release) })

	s.One(t, "onevm", "migrate", "--live", id, b.Name)
	s.WaitVM(t, vm, "in MIGRATE, held by "+b.Name+"'s libvirtd", CmdTimeout, func(v *VM) bool {
		_, err := os.Stat(held)
		return v.LCM == LCMMigrate && err == nil
	})
	s.One(t, "onevm", "recover", "--"+how, id)
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want, other := b, a
	if how == "failure" {
		want, other = a, b
	}
	s.WaitVM(t, vm, "RUNNING on "+want.Name+" right after recover --"+how, 10*time.Second, func(v *VM) bool {
		return v.Running() && v.Host() == want.Name
	})
	waitAnswered(t, s, vm, "MIGRATE", 1)
	if st := s.DomainState(t, want, vm); st != "running" {
		t.Fatalf("one-%d on %s after recover --%s and the migration's end: %q, want running", vm, want.Name, how, st)
	}
	if st := s.DomainState(t, other, vm); st != "" {
		t.Fatalf("one-%d on %s after recover --%s and the migration's end: %q, want no domain", vm, other.Name, how, st)
	}
	if !s.GuestWrite(t, want, vm, 0xc4) {
		t.Fatalf("the guest of VM %d cannot write on %s", vm, want.Name)
	}
	for _, c := range s.Watchers(t, img.Source) {
		if s.Blocklisted(t, c) {
			t.Fatalf("VM %d's client %s was blocklisted", vm, c)
		}
	}
	// The next live migration starts where the VM is: the claim agrees.
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	s.One(t, "onevm", "migrate", "--live", id, other.Name)
	s.WaitVM(t, vm, "RUNNING on "+other.Name, CmdTimeout, func(v *VM) bool { return v.MigratedTo(other.Name) })
	if st := s.DomainState(t, other, vm); st != "running" {
		t.Fatalf("oned shows VM %d RUNNING on %s after the next migration, but one-%d there is %q (on %s: %q); history %+v\noned's answers: %q\n%s\n%s's qemu log of one-%d:\n%s\n%s's libvirtd log:\n%s",
			vm, other.Name, vm, st, want.Name, s.DomainState(t, want, vm), s.ShowVM(t, vm).History, answers(t, s, vm), s.VMLog(t, vm),
			other.Name, vm, fileTail(s.hostFS(other, fmt.Sprintf("var-log/libvirt/qemu/one-%d.log", vm)), 15),
			other.Name, fileTail(s.hostFS(other, "var-log/libvirt/libvirtd.log"), 30))
	}
	if !s.GuestWrite(t, other, vm, 0xc5) {
		t.Fatalf("the guest of VM %d cannot write on %s after the next migration", vm, other.Name)
	}
}

// waitAnswered waits, at most a minute, until oned has received n answers
// of its VMM driver to action (MIGRATE, DEPLOY...) for VM vm: oned's log has
// "Message received: MIGRATE SUCCESS|FAILURE <vm> ..." once the driver's
// whole action ended (rbdfence's local action, then the network and
// transfer steps: src/vmm_mad/exec/one_vmm_exec.rb:598-674 of
// release-7.4.0). Waiting for rbdfence's action alone is not enough after a
// recover: oned applies a late answer to whatever migration the VM is in by
// then (src/vmm/VirtualMachineManagerProtocol.cc:368-391 does not check
// which migration it answers), so a next migration started before the answer
// came in is shown RUNNING on its destination before libvirt moved anything.
func waitAnswered(t *testing.T, s *Stack, vm int, action string, n int) {
	t.Helper()
	logf := s.onedLog()
	re := answerRe(action, vm)
	deadline := time.Now().Add(time.Minute)
	for {
		b, err := os.ReadFile(logf)
		if err != nil {
			t.Fatal(err)
		}
		got := len(re.FindAll(b, -1))
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("oned received %d of %d %s answers for VM %d after a minute (%s)", got, n, action, vm, logf)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *Stack) onedLog() string { return filepath.Join(s.dir, s.FE, "one/var/oned.log") }

// answerRe matches oned's log line of a VMM driver answer to action for vm.
func answerRe(action string, vm int) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^.*Message received: ` + action + ` (SUCCESS|FAILURE) ` + strconv.Itoa(vm) + ` .*$`)
}

// answers is oned's log lines of the driver's MIGRATE answers for vm.
func answers(t *testing.T, s *Stack, vm int) []string {
	b, err := os.ReadFile(s.onedLog())
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, l := range answerRe("MIGRATE", vm).FindAll(b, -1) {
		out = append(out, tail(string(l), 1))
	}
	return out
}

// fileTail is the last n lines of file path (or why there are none).
func fileTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return tail(string(b), n)
}

// refuseIncoming makes libvirt on h refuse the incoming live migration of
// VM vm (a qemu hook of h's, after rbdfence's, exits 1 at `migrate begin`
// for this VM alone), so that OpenNebula's vmm/kvm/migrate fails, until the
// returned function (or the test's end) removes it. libvirt runs every
// qemu.d script in name order and refuses the operation when one fails
// (libvirt docs/hooks.rst); it lists the directory on every call, so the
// script works without a restart.
func (s *Stack) refuseIncoming(t *testing.T, h Host, vm int) (allow func()) {
	t.Helper()
	p := s.hostFS(h, fmt.Sprintf("etc-libvirt/hooks/qemu.d/90-test-refuse-one-%d", vm))
	body := fmt.Sprintf("#!/bin/sh\ncat >/dev/null\n[ \"$1\" = one-%d ] && [ \"$2\" = migrate ] && { echo 'test: migration of one-%d refused' >&2; exit 1; }\nexit 0\n", vm, vm)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(p) })
	return func() {
		t.Helper()
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}
