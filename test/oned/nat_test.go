package oned

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// natAddr is the address Ceph sees for every client of the hosts behind
// the test's NAT: no host has it.
const natAddr = "10.78.0.200"

// TestHostsBehindNAT (rows "live migrate: hosts behind one NAT toward
// Ceph", "live migrate: it failed, behind NAT", "recover --recreate behind
// NAT", issue 31 item 1): both hosts reach the Ceph cluster through one
// source NAT (hosts.sh nat), so every client of either, rbdfence's own
// included, shows Ceph 10.78.0.200 and nothing tells the two hosts' clients
// apart by address. A live migration hands over with nothing fenced (the
// postmigrate's scope holds the address Ceph sees for the migrated QEMU:
// before, it took that QEMU for a lock owner off the host and blocklisted
// the live VM); a failed live migration's failmigrate refuses and fences
// nothing (fencing "every client on the destination" would fence the
// running source); a recreate on the other host fences the old instance
// left running (a start fences every client but its own, whatever the
// address).
//
// Not parallel: the NAT changes what Ceph sees of every new client of the
// two hosts, the other tests' too; it runs alone, and the cleanup removes
// it.
func TestHostsBehindNAT(t *testing.T) {
	s := Start(t, "fe74")
	a, b := s.Hosts[0], s.Hosts[1]
	s.nat(t, a, natAddr)
	s.nat(t, b, natAddr)
	img := s.NewImage(t, "nat", true)
	// The recreate below is placed on a (the scheduler's choice).
	vm := s.NewVM(t, VMTemplate("nat", img)+`SCHED_REQUIREMENTS = "NAME = \"`+a.Name+`\""`+"\n")
	s.Deploy(t, vm, a)
	onA := s.onlyWatcher(t, vm, img.Source, a)
	if !strings.HasPrefix(onA, natAddr+":") {
		t.Fatalf("VM %d's QEMU on %s shows Ceph %s, want the NAT's address %s: the test is wrong", vm, a.Name, onA, natAddr)
	}
	if !s.GuestWrite(t, a, vm, 0xe1) {
		t.Fatalf("the guest of VM %d cannot write on %s", vm, a.Name)
	}
	// The hook's `started` recorded the instance (its scope holds the
	// address Ceph sees for a's clients): a later start fences it even
	// when it is cut off from Ceph and invisible.
	if cl := s.claim(t, vm); !slices.ContainsFunc(cl.Addrs, func(x engine.Addr) bool { return x.String() == onA }) {
		t.Fatalf("VM %d's claim does not record its QEMU's client %s: %+v", vm, onA, cl)
	}

	// Live migration a -> b: nothing fenced.
	s.One(t, "onevm", "migrate", "--live", strconv.Itoa(vm), b.Name)
	v := s.WaitVM(t, vm, "RUNNING on "+b.Name, CmdTimeout, func(v *VM) bool { return v.MigratedTo(b.Name) })
	onB := []string{s.onlyWatcher(t, vm, img.Source, b)}
	for _, c := range append([]string{onA}, onB...) {
		if s.Blocklisted(t, c) {
			t.Fatalf("VM %d's client %s was blocklisted by the live migration behind NAT", vm, c)
		}
	}
	if !s.GuestWrite(t, b, vm, 0xe2) {
		t.Fatalf("the guest of VM %d cannot write on %s after the live migration behind NAT", vm, b.Name)
	}
	if len(v.User.Events()) != 0 {
		t.Fatalf("VM %d has collision events after a clean live migration: %+v", vm, v.User.Events())
	}

	// A live migration b -> a that fails in libvirt (a's hook refuses the
	// incoming domain, as in TestFailedLiveMigrationFencesCopy): the
	// failmigrate on a cannot tell a's clients from b's and refuses.
	records := len(v.History)
	allow := s.refuseIncoming(t, a, vm)
	s.One(t, "onevm", "migrate", "--live", strconv.Itoa(vm), a.Name)
	s.WaitVM(t, vm, "RUNNING on "+b.Name+" after the failed migration", CmdTimeout, func(v *VM) bool {
		return v.Running() && v.Host() == b.Name && len(v.History) >= records+2
	})
	waitAnswered(t, s, vm, "MIGRATE", 2)
	if l := s.VMLog(t, vm); !strings.Contains(l, "refused, nothing fenced: Ceph sees "+a.Name+" as "+natAddr+", not its own address (NAT?)") {
		t.Fatalf("VM %d's log does not give the failmigrate's refusal behind NAT:\n%s", vm, l)
	}
	for _, c := range onB {
		if s.Blocklisted(t, c) {
			t.Fatalf("the running source's client %s was blocklisted by the failmigrate behind NAT", c)
		}
	}
	if !s.GuestWrite(t, b, vm, 0xe3) {
		t.Fatalf("the guest of VM %d cannot write on %s after the failed migration behind NAT", vm, b.Name)
	}
	allow()

	// libvirtd on b stops (its QEMU writes on) and the operator recreates
	// the VM: placed on a, whose start fences the instance left on b,
	// though both show Ceph one address.
	s.stopLibvirtd(t, b)
	t.Cleanup(func() { _, _ = s.TryHost(b, "virsh -q destroy one-"+strconv.Itoa(vm)+" >/dev/null 2>&1 || true") })
	s.One(t, "onevm", "recover", "--recreate", strconv.Itoa(vm))
	s.WaitVM(t, vm, "RUNNING on "+a.Name+" after the recreate", 4*time.Minute, func(v *VM) bool { return v.Running() && v.Host() == a.Name })
	if !s.Blocklisted(t, onB[0]) {
		t.Fatalf("the old instance's client %s on %s is not blocklisted after the recreate", onB[0], b.Name)
	}
	s.FencedEvent(t, vm, onB[0])
	s.startLibvirtd(t, b)
	s.WaitFenced(t, b, vm)
	if !s.GuestWrite(t, a, vm, 0xe4) {
		t.Fatalf("the recreated VM %d on %s cannot write", vm, a.Name)
	}
}

// onlyWatcher is the one client that has image open, VM vm's QEMU on h
// (behind NAT no address says which host a client is on: the image is
// the VM's alone, and its domain must run on h).
func (s *Stack) onlyWatcher(t *testing.T, vm int, image string, h Host) string {
	t.Helper()
	w := s.Watchers(t, image)
	if len(w) != 1 {
		t.Fatalf("%s has watchers %v, want one: VM %d's QEMU on %s", image, w, vm, h.Name)
	}
	if st := s.DomainState(t, h, vm); st != "running" {
		t.Fatalf("one-%d is %q on %s, want running", vm, st, h.Name)
	}
	return w[0]
}

// claim is VM vm's claim as the suite's cluster holds it.
func (s *Stack) claim(t *testing.T, vm int) engine.Claim {
	t.Helper()
	out := s.Ceph.Admin(t, "rados", "-p", engine.DefaultClaimPool, "get", engine.ClaimObject(vm), "/dev/stdout")
	var cl engine.Claim
	if i := strings.Index(out, "{"); i < 0 || json.Unmarshal([]byte(out[i:]), &cl) != nil {
		t.Fatalf("claim of VM %d: %q", vm, out)
	}
	return cl
}

// nat puts host h behind the source NAT toward Ceph that shows Ceph addr
// (hosts.sh nat) until the test ends.
func (s *Stack) nat(t *testing.T, h Host, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sh(ctx, "", "hosts.sh", "nat", h.Name, addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := sh(ctx, "", "hosts.sh", "unnat", h.Name); err != nil {
			t.Error(err)
		}
	})
}
