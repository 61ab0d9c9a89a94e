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

// TestDemoOpenNebula is `make demo-opennebula` (issue 28 item 6), the story
// an operator cares about on the real oned 7.4.0: a persistent Ceph image, a
// zombie writing it from another host, `onevm deploy`; the zombie's next
// write fails, the VM runs and writes, `onevm show` and `rbdfence events`
// show the collision, the audit log has its line; then a live migration
// that fences nothing. Every step is asserted (it runs in make test); with
// RBDFENCE_DEMO_OPENNEBULA=1 it tells the story on stdout as it goes.
func TestDemoOpenNebula(t *testing.T) {
	s := Start(t, "fe74")
	a, b := s.Hosts[0], s.Hosts[1]
	say := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("RBDFENCE_DEMO_OPENNEBULA") != "" {
			fmt.Printf("\n\033[1m== %s\033[0m\n", msg)
		} else {
			t.Log(msg)
		}
	}
	show := func(text string) {
		if os.Getenv("RBDFENCE_DEMO_OPENNEBULA") != "" {
			fmt.Println(strings.TrimRight(text, "\n"))
		}
	}

	img := s.NewImage(t, "demo", true)
	say("OpenNebula %s front-end %s with hosts %s and %s; persistent Ceph image %d (%s) registered", s.Version, s.FE, a.Name, b.Name, img.ID, img.Source)
	z := testenv.StartZombieOn(t, s.Ceph, b.Net(), img.Source, "write")
	z.WaitWrite(t, true, 30*time.Second)
	say("a zombie QEMU on %s (a real librbd client, %s) writes %s", b.Name, z.Addr, img.Source)

	vm := s.NewVM(t, VMTemplate("demo", img))
	say("onevm deploy %d %s", vm, a.Name)
	s.Deploy(t, vm, a)
	ev := s.ZombieFenced(t, vm, z, a, img.Source, 0xd1, "the deploy")
	say("the zombie's next write failed with errno 108 (blocklisted); VM %d is RUNNING on %s and its guest writes its disk", vm, a.Name)

	// The user template's RBDFENCE_ attributes as onevm show prints them
	// (an event is a vector attribute: NAME=[ ... ] over several lines).
	var lines []string
	in := false
	text := s.ShowText(t, vm)
	for _, l := range strings.Split(text, "\n") {
		tl := strings.TrimSpace(l)
		switch {
		case in:
			lines = append(lines, l)
			in = !strings.HasSuffix(tl, "]")
		case strings.HasPrefix(tl, "RBDFENCE_"):
			lines = append(lines, l)
			in = strings.Contains(tl, "=[") && !strings.HasSuffix(tl, "]")
		}
	}
	if !strings.Contains(strings.Join(lines, "\n"), z.Addr) {
		t.Fatalf("onevm show %d has no collision event of %s:\n%s", vm, z.Addr, text)
	}
	say("onevm show %d: the collision event in the VM's USER TEMPLATE", vm)
	show(strings.Join(lines, "\n"))

	out, code := s.Rbdfence(t, "events", "--vm", strconv.Itoa(vm))
	if code != 0 || !strings.Contains(out, z.Addr) {
		t.Fatalf("rbdfence events --vm %d: exit %d, without %s:\n%s", vm, code, z.Addr, out)
	}
	say("rbdfence events --vm %d (on the front-end)", vm)
	show(out)

	audit, err := os.ReadFile(s.hostFS(a, "var-log/one/rbdfence-audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	var rec string
	for _, l := range strings.Split(string(audit), "\n") {
		if strings.Contains(l, z.Addr) && strings.Contains(l, `"vm":`+strconv.Itoa(vm)) {
			rec = l
		}
	}
	if rec == "" {
		t.Fatalf("the audit log on %s has no record of %s (event %+v)", a.Name, z.Addr, ev)
	}
	say("the audit record on %s (/var/log/one/rbdfence-audit.log)", a.Name)
	show(rec)

	onA := s.QEMUClient(t, a, vm, img.Source)
	events := len(s.ShowVM(t, vm).User.Events())
	say("onevm migrate --live %d %s", vm, b.Name)
	s.One(t, "onevm", "migrate", "--live", strconv.Itoa(vm), b.Name)
	v := s.WaitVM(t, vm, "RUNNING on "+b.Name, CmdTimeout, func(v *VM) bool { return v.MigratedTo(b.Name) })
	onB := s.QEMUClient(t, b, vm, img.Source)
	for _, c := range []string{onA, onB} {
		if s.Blocklisted(t, c) {
			t.Fatalf("the live migration fenced VM %d's client %s", vm, c)
		}
	}
	if !s.GuestWrite(t, b, vm, 0xd2) {
		t.Fatalf("the guest of VM %d cannot write on %s after the live migration", vm, b.Name)
	}
	if n := len(v.User.Events()); n != events {
		t.Fatalf("the live migration added collision events: %d, had %d", n, events)
	}
	say("VM %d runs on %s and writes; the handover fenced nothing (no new event). The test's cleanup terminates the VM; make demo-opennebula then stops the front-end, the hosts and Ceph", vm, b.Name)
}
