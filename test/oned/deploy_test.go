package oned

import (
	"strconv"
	"strings"
	"testing"
)

// TestDeployAndLiveMigrate: the real oned 7.4.0 deploys a VM with an RBD disk
// on a real KVM host (its own libvirtd) through rbdfence's deploy action, the
// guest writes its disk, and OpenNebula's own live migration (vmm/kvm/migrate:
// virsh migrate --live ... qemu+ssh://DST/system) moves it to the other host
// through migrate-rbdfence; the guest still writes there and nothing was
// fenced.
func TestDeployAndLiveMigrate(t *testing.T) {
	s := Start(t, "fe74")
	a, b := s.Hosts[0], s.Hosts[1]
	img := s.NewImage(t, "deploy-migrate", false)
	vm := s.NewVM(t, VMTemplate("deploy-migrate", img))
	before := s.Ceph.BlocklistEntries(t)
	v := s.Deploy(t, vm, a)
	if v.Host() != a.Name {
		t.Fatalf("VM %d runs on %q, want %s", vm, v.Host(), a.Name)
	}
	if len(v.Disks) != 1 || !strings.HasPrefix(v.Disks[0].Source, s.Ceph.Pool+"/one-") {
		t.Fatalf("VM %d disks %+v: want one RBD disk in pool %s", vm, v.Disks, s.Ceph.Pool)
	}
	if !s.GuestWrite(t, a, vm, 0xa1) {
		t.Fatalf("the guest of VM %d cannot write its disk on %s", vm, a.Name)
	}
	s.One(t, "onevm", "migrate", "--live", strconv.Itoa(vm), b.Name)
	v = s.WaitVM(t, vm, "RUNNING on "+b.Name, CmdTimeout, func(v *VM) bool { return v.Running() && v.Host() == b.Name })
	if !s.GuestWrite(t, b, vm, 0xa2) {
		t.Fatalf("the guest of VM %d cannot write its disk on %s after the live migration", vm, b.Name)
	}
	if out := s.OnHost(t, a, "virsh -q list --all --name"); strings.Contains(out, "one-"+strconv.Itoa(vm)) {
		t.Fatalf("one-%d still defined on %s after the live migration: %q", vm, a.Name, out)
	}
	if got := s.Ceph.BlocklistEntries(t); len(got) != len(before) {
		t.Fatalf("the blocklist changed across a clean deploy and migration: %d -> %d entries", len(before), len(got))
	}
	if len(v.User.Events) != 0 {
		t.Fatalf("VM %d has collision events after a clean deploy and migration: %+v", vm, v.User.Events)
	}
}
