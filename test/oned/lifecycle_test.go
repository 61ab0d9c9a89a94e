package oned

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestDeployFencesZombie (lifecycle row "deploy"): a librbd client on the
// other host writes the persistent image a VM is about to use. `onevm deploy`
// through the real oned runs deploy-rbdfence: the zombie is blocklisted (its
// next write fails with errno 108), the VM runs and writes its disk, and
// `onevm show` displays the collision event in the USER TEMPLATE.
func TestDeployFencesZombie(t *testing.T) {
	s := Start(t, "fe74")
	a, b := s.Hosts[0], s.Hosts[1]
	img := s.NewImage(t, "zombie-deploy", true)
	z := testenv.StartZombieOn(t, s.Ceph, b.Net(), img.Source, "write")
	z.WaitWrite(t, true, 30*time.Second)
	vm := s.NewVM(t, VMTemplate("zombie-deploy", img))
	s.Deploy(t, vm, a)
	if ev := z.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the zombie's next write after the deploy: errno %d, want 108 (blocklisted)", ev.Errno)
	}
	if !s.Blocklisted(t, z.Addr) {
		t.Fatalf("zombie %s is not in the blocklist", z.Addr)
	}
	ev := s.FencedEvent(t, vm, z.Addr)
	if ev.Host != a.Name || ev.Image != img.Source || !strings.Contains(ev.Action, "blocklisted") {
		t.Fatalf("collision event %+v: want host %s, image %s, action blocklisted", ev, a.Name, img.Source)
	}
	if show := s.ShowText(t, vm); !strings.Contains(show, "RBDFENCE_EVENT") || !strings.Contains(show, z.Addr) {
		t.Fatalf("onevm show %d does not display the collision event of %s:\n%s", vm, z.Addr, show)
	}
	if !s.GuestWrite(t, a, vm, 0xb1) {
		t.Fatalf("the guest of VM %d cannot write its disk after the fence", vm)
	}
}

// TestAttachFencesZombie (row "hot-attach"): `onevm disk-attach` of a
// persistent image that a client on the other host still writes: the
// attach_disk local action fences it before the disk reaches the VM, and
// the guest writes the attached disk.
func TestAttachFencesZombie(t *testing.T) {
	s := Start(t, "fe74")
	a, b := s.Hosts[0], s.Hosts[1]
	root := s.NewImage(t, "attach-root", false)
	vm := s.NewVM(t, VMTemplate("attach", root))
	s.Deploy(t, vm, a)
	data := s.NewImage(t, "attach-data", true)
	z := testenv.StartZombieOn(t, s.Ceph, b.Net(), data.Source, "write")
	z.WaitWrite(t, true, 30*time.Second)
	s.One(t, "onevm", "disk-attach", strconv.Itoa(vm), "--image", strconv.Itoa(data.ID), "--prefix", "vd")
	v := s.WaitVM(t, vm, "RUNNING with two disks", CmdTimeout, func(v *VM) bool { return v.Running() && len(v.Disks) == 2 })
	if ev := z.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the zombie's next write after the attach: errno %d, want 108", ev.Errno)
	}
	ev := s.FencedEvent(t, vm, z.Addr)
	if ev.Image != data.Source {
		t.Fatalf("collision event %+v: want image %s", ev, data.Source)
	}
	if got := s.QEMUClients(t, a, data.Source); len(got) != 1 {
		t.Fatalf("VM %d's QEMU on %s has %d clients of the attached %s, want 1 (disks %+v)", vm, a.Name, len(got), data.Source, v.Disks)
	}
}

// TestPoweroffResume (row "resume from POWEROFF"): poweroff --hard, then
// resume: the deploy on the same host is admitted (the claim's own previous
// instance is gone) and the guest writes again.
func TestPoweroffResume(t *testing.T) {
	s := Start(t, "fe74")
	a := s.Hosts[0]
	img := s.NewImage(t, "poweroff", false)
	vm := s.NewVM(t, VMTemplate("poweroff", img))
	s.Deploy(t, vm, a)
	s.One(t, "onevm", "poweroff", "--hard", strconv.Itoa(vm))
	s.WaitVM(t, vm, "POWEROFF", CmdTimeout, func(v *VM) bool { return v.State == StatePoweroff })
	if st := s.DomainState(t, a, vm); st != "" {
		t.Fatalf("one-%d on %s after poweroff --hard: %q, want no domain", vm, a.Name, st)
	}
	s.One(t, "onevm", "resume", strconv.Itoa(vm))
	v := s.WaitRunning(t, vm)
	if v.Host() != a.Name {
		t.Fatalf("VM %d resumed on %s, want %s", vm, v.Host(), a.Name)
	}
	if !s.GuestWrite(t, a, vm, 0xc1) {
		t.Fatalf("the guest of VM %d cannot write after resume from POWEROFF", vm)
	}
}
