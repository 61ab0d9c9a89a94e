package oned

import (
	"fmt"
	"os"
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

	// libvirt runs every qemu.d script in name order and refuses the
	// operation when one fails (libvirt docs/hooks.rst); it lists the
	// directory on every call, so the script works without a restart.
	refuse := s.hostFS(b, fmt.Sprintf("etc-libvirt/hooks/qemu.d/90-test-refuse-one-%d", vm))
	body := fmt.Sprintf("#!/bin/sh\ncat >/dev/null\n[ \"$1\" = one-%d ] && [ \"$2\" = migrate ] && { echo 'test: migration of one-%d refused' >&2; exit 1; }\nexit 0\n", vm, vm)
	if err := os.WriteFile(refuse, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(refuse) })

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
	if err := os.Remove(refuse); err != nil {
		t.Fatal(err)
	}
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
