package oned

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// cutHost takes host h off the front-end's network view (hosts.sh cut: sshd
// and the monitoring client stop; libvirtd and QEMU go on) and heals it at
// cleanup, destroying what is left of the VM's domain there.
func (s *Stack) cutHost(t testenv.T, h Host, vm int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sh(ctx, "", "hosts.sh", "cut", h.Name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = sh(ctx, "", "hosts.sh", "heal", h.Name)
		_, _ = s.TryHost(h, "virsh -q destroy one-"+strconv.Itoa(vm)+" >/dev/null 2>&1 || true")
		_ = s.waitHostState(ctx, h.Name, "MONITORED", 45*time.Second)
	})
}

// TestRecreateFencesCutOffInstance (row "recover --recreate ... on another
// host"): the VM's host is cut off from the front-end but not from Ceph;
// `onevm recover --recreate` cannot stop the QEMU there, which goes on
// writing. The new deploy on the other host fences it: the old QEMU's write
// fails, the new one's succeeds, and the event names the old client.
func TestRecreateFencesCutOffInstance(t *testing.T) {
	s := Start(t, "fe74")
	a, b := s.Hosts[0], s.Hosts[1]
	img := s.NewImage(t, "recreate", true)
	vm := s.NewVM(t, VMTemplate("recreate", img))
	s.Deploy(t, vm, a)
	old := s.QEMUClients(t, a, img.Source)
	if len(old) != 1 {
		t.Fatalf("VM %d's QEMU on %s: clients %v of %s, want 1", vm, a.Name, old, img.Source)
	}
	s.cutHost(t, a, vm)
	s.One(t, "onevm", "recover", "--recreate", strconv.Itoa(vm))
	s.WaitVM(t, vm, "PENDING after recreate", CmdTimeout, func(v *VM) bool { return v.State == StatePending })
	if !s.GuestWrite(t, a, vm, 0xd1) {
		t.Fatalf("the cut-off QEMU of VM %d on %s cannot write before the new deploy: the test is wrong", vm, a.Name)
	}
	v := s.Deploy(t, vm, b)
	if v.Host() != b.Name {
		t.Fatalf("VM %d runs on %s, want %s", vm, v.Host(), b.Name)
	}
	s.WaitFenced(t, a, vm)
	if !s.Blocklisted(t, old[0]) {
		t.Fatalf("the old instance's client %s is not blocklisted", old[0])
	}
	s.FencedEvent(t, vm, old[0])
	if !s.GuestWrite(t, b, vm, 0xd2) {
		t.Fatalf("the new instance of VM %d on %s cannot write", vm, b.Name)
	}
}

// TestHostErrorHookFencesAndReschedules (row "host failure"): rbdfence's HA
// hook (the host_error.hook that install.sh frontend ships, created with
// onehook) fires when oned puts the cut-off host in ERROR; `rbdfence
// fence-host` blocklists the VM's QEMU there, which still writes to Ceph,
// and only then does OpenNebula's host_error.rb reschedule the VM (-m), which
// the scheduler deploys on the other host.
func TestHostErrorHookFencesAndReschedules(t *testing.T) {
	s := Start(t, "fe74")
	a, b := s.Hosts[0], s.Hosts[1]
	hook := s.createHostErrorHook(t)
	img := s.NewImage(t, "ha", true)
	vm := s.NewVM(t, VMTemplate("ha", img))
	s.Deploy(t, vm, a)
	old := s.QEMUClients(t, a, img.Source)
	if len(old) != 1 {
		t.Fatalf("VM %d's QEMU on %s: clients %v, want 1", vm, a.Name, old)
	}
	s.cutHost(t, a, vm)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := s.waitHostState(ctx, a.Name, "ERROR", 90*time.Second); err != nil {
		t.Fatal(err)
	}
	v := s.WaitVM(t, vm, "RUNNING on "+b.Name+" after the HA hook", 3*time.Minute, func(v *VM) bool {
		return v.Running() && v.Host() == b.Name
	})
	s.WaitFenced(t, a, vm)
	if !s.Blocklisted(t, old[0]) {
		t.Fatalf("the failed host's client %s is not blocklisted", old[0])
	}
	// The hook's execution record: host_error.rb exited 0 (it exits
	// non-zero, rescheduling nothing, when the fence fails).
	hx := s.One(t, "onehook", "show", "-x", strconv.Itoa(hook))
	if !strings.Contains(hx, "<CODE>0</CODE>") {
		t.Fatalf("hook %d has no successful execution:\n%s", hook, hx)
	}
	if !s.GuestWrite(t, b, vm, 0xd3) {
		t.Fatalf("VM %d cannot write on %s after the reschedule: %s", vm, b.Name, v)
	}
}

// createHostErrorHook creates rbdfence's HA hook from the template that
// install.sh frontend installed (README, Host failure) and removes it at
// cleanup.
func (s *Stack) createHostErrorHook(t testenv.T) int {
	t.Helper()
	out := s.One(t, "onehook", "create", "/var/lib/one/remotes/hooks/rbdfence/host_error.hook")
	id, err := parseID(out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = s.Try("onehook", "delete", strconv.Itoa(id)) })
	return id
}
