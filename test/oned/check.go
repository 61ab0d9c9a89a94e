package oned

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// FencedEvent waits until the VM's user template (what `onevm show`
// displays) holds a collision event for address addr and returns it.
func (s *Stack) FencedEvent(t testenv.T, vm int, addr string) Event {
	t.Helper()
	var got Event
	s.WaitVM(t, vm, "showing the collision event of "+addr, time.Minute, func(v *VM) bool {
		for _, e := range v.User.Events() {
			if e.Address == addr {
				got = e
				return true
			}
		}
		return false
	})
	return got
}

// ZombieFenced checks what a start of VM vm on h (after names it) leaves
// of zombie z, a client of image that wrote before: z's next write fails
// with errno 108 (blocklisted), its address is in the blocklist, the VM's
// collision event names h and image, and the VM's guest writes on h
// (pattern). It returns the event.
func (s *Stack) ZombieFenced(t testenv.T, vm int, z *testenv.Zombie, h Host, image string, pattern byte, after string) Event {
	t.Helper()
	if ev := z.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the zombie's next write after %s: errno %d, want 108 (blocklisted)", after, ev.Errno)
	}
	if !s.Blocklisted(t, z.Addr) {
		t.Fatalf("zombie %s is not in the blocklist after %s", z.Addr, after)
	}
	ev := s.FencedEvent(t, vm, z.Addr)
	if ev.Host != h.Name || ev.Image != image {
		t.Fatalf("collision event %+v: want host %s, image %s", ev, h.Name, image)
	}
	if !s.GuestWrite(t, h, vm, pattern) {
		t.Fatalf("the guest of VM %d cannot write on %s after %s", vm, h.Name, after)
	}
	return ev
}

// ShowText is `onevm show ID` as an admin reads it.
func (s *Stack) ShowText(t testenv.T, vm int) string {
	t.Helper()
	return s.One(t, "onevm", "show", strconv.Itoa(vm))
}

// Blocklisted says whether addr is in the suite cluster's blocklist.
func (s *Stack) Blocklisted(t testenv.T, addr string) bool {
	t.Helper()
	_, ok := s.Ceph.BlocklistEntries(t)[addr]
	return ok
}

// Watchers are the client addresses that have image open.
func (s *Stack) Watchers(t testenv.T, image string) []string {
	t.Helper()
	out := s.Ceph.Admin(t, "rbd", "status", image, "--format", "json")
	// {"watchers":[{"address":"10.78.0.11:0/123","client":4242,"cookie":...}]}
	var addrs []string
	for _, part := range strings.Split(out, `"address":"`)[1:] {
		if i := strings.IndexByte(part, '"'); i > 0 {
			addrs = append(addrs, strings.TrimPrefix(part[:i], "v1:"))
		}
	}
	return addrs
}

// QEMUClients are the client addresses of VM vm's QEMU on host h for
// image: the watchers of image whose IP is h's.
func (s *Stack) QEMUClients(t testenv.T, h Host, image string) []string {
	t.Helper()
	var out []string
	for _, a := range s.Watchers(t, image) {
		if strings.HasPrefix(a, h.IP+":") {
			out = append(out, a)
		}
	}
	return out
}

// DomainState is `virsh domstate one-ID` on h, "" when libvirt answers
// that h has no such domain. A virsh that fails (libvirtd restarting,
// stopped, or the host's shell unreachable) is no answer, not "no domain":
// it is asked again for up to a minute, then the test fails, so that no
// caller (the soak's recovery above all) acts on a missing answer.
func (s *Stack) DomainState(t testenv.T, h Host, vm int) string {
	t.Helper()
	name := fmt.Sprintf("one-%d", vm)
	// list answers for every domain; domstate alone cannot tell "no such
	// domain" from other failures by its exit status.
	cmd := fmt.Sprintf(`names=$(virsh -q list --all --name) || exit 1
printf '%%s\n' "$names" | grep -qx %[1]s || exit 0
virsh -q domstate %[1]s`, name)
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := s.TryHost(h, cmd)
		if err == nil {
			return strings.TrimSpace(out)
		}
		if time.Now().After(deadline) {
			t.Fatalf("state of domain %s on %s unknown: virsh gave no answer for a minute: %v", name, h.Name, err)
		}
		time.Sleep(time.Second)
	}
}

// WaitFenced waits until the QEMU of VM vm on host h can no longer write
// its disk (its Ceph client blocklisted): a write fails.
func (s *Stack) WaitFenced(t testenv.T, h Host, vm int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if !s.GuestWrite(t, h, vm, 0xee) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the QEMU of VM %d on %s still writes its disk a minute after the fence", vm, h.Name)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
