package frontend_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestOnedDownEventsSpooled: while oned is down, a failed migration's copy
// on the destination is still fenced (the migrate action reads the VM from
// stdin); its event goes to the spool, which is not a failure of ours. The next run that reaches oned delivers
// it, and "rbdfence events flush" delivers the next one; every event lands
// in the VM's user template exactly once.
func TestOnedDownEventsSpooled(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	vm, specs := f.newVM(a.Name, 1, "persistent")
	f.migrating(vm, 1, a.Name, b.Name, specs)
	f.sourceRunsVM(vm) // the failmigrates fence on the source's "running, no job"
	spooled := func() int {
		m, _ := filepath.Glob(filepath.Join(f.path("spool"), "*.json"))
		return len(m)
	}
	collisions := func() string {
		ut, _ := f.sim.UserTemplate(vm)
		return ut.String()
	}

	failedCopy := func() *testenv.Zombie {
		t.Helper()
		z := testenv.StartZombieOn(t, f.ceph, b, specs[0].image, "write")
		z.WaitWrite(t, true, 30*time.Second)
		if err := f.sim.SetDown(true); err != nil {
			t.Fatal(err)
		}
		f.write(f.path("remote-calls", "migrate.fail"), "", 0o644)
		r, _ := f.migrateRun(vm, a.Name, b.Name)
		_ = os.Remove(f.path("remote-calls", "migrate.fail"))
		if err := f.sim.SetDown(false); err != nil {
			t.Fatal(err)
		}
		if r.code != 1 || !strings.Contains(r.stderr, "kept in "+f.path("spool")) {
			t.Fatalf("failed migration with oned down: exit %d, want the migration's 1 and the events spooled:\n%s", r.code, r.stderr)
		}
		if ev := z.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
			t.Fatalf("copy on the destination: errno %d", ev.Errno)
		}
		return z
	}

	z1 := failedCopy()
	if n := spooled(); n != 1 {
		t.Fatalf("%d spooled events, want 1", n)
	}
	if strings.Contains(collisions(), z1.Addr) {
		t.Fatal("event delivered while oned was down?")
	}
	// The next run that reaches oned (a start of another VM) delivers it.
	other, _ := f.newVM(a.Name, 0, "clone")
	if r := f.run(filepath.Join(f.remotes, "rbdfence/prestart"), "", fmt.Sprint(other)); r.code != 0 {
		t.Fatalf("prestart: exit %d\n%s", r.code, r.stderr)
	}
	if n := spooled(); n != 0 {
		t.Fatalf("%d events still spooled after the next run", n)
	}
	if text := collisions(); !strings.Contains(text, z1.Addr) || !strings.Contains(text, `RBDFENCE_COLLISIONS="1"`) {
		t.Fatalf("user template after the next run:\n%s", text)
	}

	// A second spooled event, delivered by "rbdfence events flush".
	z2 := failedCopy()
	if n := spooled(); n != 1 {
		t.Fatalf("%d spooled events, want 1", n)
	}
	rbdfence := testenv.Bin(t, "rbdfence")
	r := f.run(rbdfence, "", "events", "flush")
	if r.code != 0 || !strings.Contains(r.stdout, "delivered 1 event(s); 0 still pending") {
		t.Fatalf("events flush: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = f.run(rbdfence, "", "events", "flush")
	if r.code != 0 || !strings.Contains(r.stdout, "delivered 0 event(s); 0 still pending") {
		t.Fatalf("second flush: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	text := collisions()
	if !strings.Contains(text, `RBDFENCE_COLLISIONS="2"`) {
		t.Fatalf("user template:\n%s", text)
	}
	r = f.run(rbdfence, "", "events", "--vm", fmt.Sprint(vm), "--json")
	var evs []events.Event
	if err := json.Unmarshal([]byte(r.stdout), &evs); r.code != 0 || err != nil {
		t.Fatalf("rbdfence events --json: exit %d %v\n%s", r.code, err, r.stderr)
	}
	for _, z := range []*testenv.Zombie{z1, z2} {
		n := 0
		for _, ev := range evs {
			if ev.Address == z.Addr {
				n++
			}
		}
		if n != 1 {
			t.Errorf("event for %s recorded %d times, want once", z.Addr, n)
		}
	}
	// Both are listed cluster-wide.
	r = f.run(rbdfence, "", "events", "--since", "1h")
	if r.code != 0 || !strings.Contains(r.stdout, z1.Addr) || !strings.Contains(r.stdout, z2.Addr) || !strings.Contains(r.stdout, "failmigrate") {
		t.Fatalf("rbdfence events: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// flush with oned down: nothing lost, a clear failure.
	if err := f.sim.SetDown(true); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.sim.SetDown(false) }()
	r = f.run(rbdfence, "", "events", "flush")
	if r.code == 0 && !strings.Contains(r.stdout, "delivered 0") {
		t.Fatalf("flush with oned down: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(f.path("spool")); err != nil {
		t.Fatal(err)
	}
}
