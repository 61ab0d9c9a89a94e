package frontend_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// migrating re-registers vm in oned as oned has it during a live
// migration from src (seq) to dst (seq+1).
func (f *fe) migrating(vm, seq int, src, dst string, specs []diskSpec) {
	f.t.Helper()
	var disks []onedsim.Disk
	for _, s := range specs {
		disks = append(disks, s.disk)
	}
	err := f.sim.Put(onedsim.VM{ID: vm, State: onedsim.StateActive, LCMState: onedsim.LCMMigrate, Disks: disks,
		History: []onedsim.History{{Seq: seq, Host: src, HostID: 1}, {Seq: seq + 1, Host: dst, HostID: 2}}})
	if err != nil {
		f.t.Fatal(err)
	}
}

// tmRun runs an installed TM wrapper as oned does and checks that the
// original ran once more, as the wrapper ($0), with the same args and stdin.
func (f *fe) tmRun(op string, stdin string, args ...string) result {
	f.t.Helper()
	before := len(f.tmCalls(op))
	r := f.run(f.tm(op), stdin, args...)
	f.t.Logf("%s took %s:\n%s", op, r.took, r.stderr)
	calls := f.tmCalls(op)
	if len(calls) != before+1 {
		f.t.Fatalf("%s: the original ran %d time(s), want 1\n%s", op, len(calls)-before, r.stderr)
	}
	last := calls[len(calls)-1]
	if got := strings.TrimSpace(readFile(f.t, last+".argv0")); got != f.tm(op) {
		f.t.Errorf("%s: original saw $0 %q, want the wrapper's path %q", op, got, f.tm(op))
	}
	if got := strings.TrimSpace(readFile(f.t, last+".self")); got != "ceph/"+op {
		f.t.Errorf("%s: original finds itself as %q (migrate_other would call tm/<TM>/%s)", op, got, filepath.Base(got))
	}
	if got, want := readFile(f.t, last+".args"), strings.Join(args, "\n")+"\n"; got != want {
		f.t.Errorf("%s: original args %q, want %q", op, got, want)
	}
	if got := readFile(f.t, last+".stdin"); got != stdin {
		f.t.Errorf("%s: original stdin differs (%d bytes, want %d)", op, len(got), len(stdin))
	}
	if !strings.Contains(r.stdout, "upstream "+op+" done") {
		f.t.Errorf("%s: the original's stdout was not relayed: %q", op, r.stdout)
	}
	return r
}

// TestFailedMigration: premigrate opens the window while the source keeps
// writing; the migration "fails" but left a copy writing on the
// destination; failmigrate fences that copy and keeps the source.
func TestFailedMigration(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	vm, specs := f.newVM(a.Name, 1, "persistent", "volatile")
	if r := f.deployVM(vm, 1, a.Name, specs); r.code != 0 {
		t.Fatalf("deploy on %s: exit %d\n%s", a, r.code, r.stderr)
	}
	src := testenv.StartZombieOn(t, f.ceph, a, specs[0].image, "write")
	src.WaitWrite(t, true, 30*time.Second)

	f.migrating(vm, 1, a.Name, b.Name, specs)
	args := []string{a.Name, b.Name, fmt.Sprintf("/var/lib/one//datastores/0/%d", vm), fmt.Sprint(vm), "0"}
	stdin := f.vmXML64(vm)
	r := f.tmRun("premigrate", stdin, args...)
	if r.code != 0 {
		t.Fatalf("premigrate: exit %d\n%s", r.code, r.stderr)
	}
	if c := f.claim(vm); c.Window == nil || c.Window.Src != a.Name || c.Window.Dst != b.Name {
		t.Fatalf("no handover window after premigrate: %+v", c)
	}

	// No front-end start runs during a live migration: a prestart on the
	// destination now would be a new deploy and fence the source (issue 11
	// item 2, enginetest lifecycle NewerDeployOnDestinationFencesSource).

	// The "failed" migration left a copy writing on the destination.
	dst := testenv.StartZombieOn(t, f.ceph, b, specs[0].image, "write")
	dst.WaitWrite(t, true, 30*time.Second)

	r = f.tmRun("failmigrate", stdin, args...)
	if r.code != 0 {
		t.Fatalf("failmigrate: exit %d\n%s", r.code, r.stderr)
	}
	if ev := dst.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the destination's copy: errno %d, want 108", ev.Errno)
	}
	bl := f.ceph.BlocklistEntries(t)
	if _, ok := bl[dst.Addr]; !ok {
		t.Fatalf("destination client %s not blocklisted", dst.Addr)
	}
	if _, ok := bl[src.Addr]; ok {
		t.Fatal("failmigrate blocklisted the source")
	}
	src.WaitWrite(t, true, 30*time.Second)
	c := f.claim(vm)
	if c.Host != a.Name || c.Window != nil {
		t.Fatalf("claim after failmigrate: %+v", c)
	}
	ut, _ := f.sim.UserTemplate(vm)
	if text := ut.String(); !strings.Contains(text, dst.Addr) || !strings.Contains(text, `SOURCE="failmigrate"`) || strings.Contains(text, src.Addr) {
		t.Fatalf("user template:\n%s", text)
	}
}

// TestMigrationDone: after a successful migration the old source still
// holds the lock (it did not die); postmigrate, run on the destination,
// fences that lock owner, keeps the destination's client and records it.
func TestMigrationDone(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	vm, specs := f.newVM(a.Name, 4, "clone")
	old := testenv.StartZombieOn(t, f.ceph, a, specs[0].image, "write")
	old.WaitWrite(t, true, 30*time.Second)
	f.migrating(vm, 4, a.Name, b.Name, specs)
	args := []string{a.Name, b.Name, fmt.Sprintf("/var/lib/one//datastores/0/%d", vm), fmt.Sprint(vm), "0"}
	stdin := f.vmXML64(vm)
	if r := f.tmRun("premigrate", stdin, args...); r.code != 0 {
		t.Fatalf("premigrate: exit %d\n%s", r.code, r.stderr)
	}
	moved := testenv.StartZombieOn(t, f.ceph, b, specs[0].image, "idle")
	r := f.tmRun("postmigrate", stdin, args...)
	if r.code != 0 {
		t.Fatalf("postmigrate: exit %d\n%s", r.code, r.stderr)
	}
	if ev := old.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("old source lock owner: errno %d, want 108", ev.Errno)
	}
	if _, ok := f.ceph.BlocklistEntries(t)[moved.Addr]; ok {
		t.Fatal("postmigrate blocklisted the destination's client")
	}
	c := f.claim(vm)
	if c.Host != b.Name || c.Window != nil || len(c.Addrs) != 1 || c.Addrs[0].String() != moved.Addr {
		t.Fatalf("claim after postmigrate: %+v (want host %s, addrs [%s])", c, b.Name, moved.Addr)
	}
}

// TestPremigrateFailureAbortsMigration: when the window cannot be opened
// (Ceph unreachable from the source), premigrate exits non-zero after the
// original ran, so that oned aborts the migration.
func TestPremigrateFailureAbortsMigration(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	vm, specs := f.vmWithCeph(a.Name, f.hs.BridgeIP+":6999", f.ceph.Keyring)
	f.migrating(vm, 0, a.Name, b.Name, specs)
	r := f.tmRun("premigrate", f.vmXML64(vm), a.Name, b.Name, "/var/lib/one//datastores/0/x", fmt.Sprint(vm), "0")
	if r.code != 3 || len(r.plainLines()) != 1 || !strings.Contains(r.plainLines()[0], "premigrate") {
		t.Fatalf("exit %d, want 3 with one plain line:\n%s", r.code, r.stderr)
	}
	// postmigrate never turns a done migration into a failed one.
	r = f.tmRun("postmigrate", f.vmXML64(vm), a.Name, b.Name, "/var/lib/one//datastores/0/x", fmt.Sprint(vm), "0")
	if r.code != 0 || !strings.Contains(r.stderr, "ERROR: "+fmt.Sprint(vm)+" rbdfence:") {
		t.Fatalf("postmigrate: exit %d, want 0 with an ERROR line:\n%s", r.code, r.stderr)
	}
	// The original's own failure code is kept.
	f.write(f.path("tm-calls", "postmigrate.code"), "9", 0o644)
	r = f.tmRun("postmigrate", f.vmXML64(vm), a.Name, a.Name, "/var/lib/one//datastores/0/x", fmt.Sprint(vm), "0")
	if r.code != 9 {
		t.Fatalf("postmigrate with a failing original: exit %d, want 9", r.code)
	}
}
