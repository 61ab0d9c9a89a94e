package frontend_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
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

// migrateRun runs a live migration of vm as OpenNebula's VMM driver runs
// it (onedsim.LiveMigration: one_vmm_exec.rb:598-673 of release-7.4.0)
// with a ceph system datastore: the TM's premigrate, the VMM migrate step
// as the installed VM_MAD ARGUMENTS make the driver run it (our local
// action), failmigrate or postmigrate. It returns the VMM step's run and
// the driver action XML.
func (f *fe) migrateRun(vm int, src, dst string) (result, string) {
	return f.migrateUnder("ceph", vm, src, dst)
}

// migrateUnder is migrateRun with the system datastore's TM sysTM (the
// disks' TM is ceph): with "shared" the TM scripts of ceph run only through
// migrate_other, whose status is ignored, and failmigrate is
// tm/common/failmigrate (exit 0).
func (f *fe) migrateUnder(sysTM string, vm int, src, dst string) (result, string) {
	f.t.Helper()
	doc, ok := f.sim.VMXML(vm)
	if !ok {
		f.t.Fatalf("VM %d not in oned", vm)
	}
	xml := fmt.Sprintf("<VMM_DRIVER_ACTION_DATA><HOST>%s</HOST><MIGR_HOST>%s</MIGR_HOST><DEPLOY_ID>one-%d</DEPLOY_ID>%s</VMM_DRIVER_ACTION_DATA>", src, dst, vm, doc)
	line := kvmArguments(f.t, f.prefix)
	_, v, _ := strings.Cut(line, `"`)
	v, _, _ = strings.Cut(v, `"`)
	da, err := onedsim.ParseDriverArgs(v)
	if err != nil {
		f.t.Fatalf("the driver would not start with %q: %v", v, err)
	}
	var vmmRun result
	m := onedsim.LiveMigration{SystemTM: sysTM, DiskTMs: []string{"ceph"}, Local: da.Local, Run: func(s onedsim.MigrationStep) int {
		switch s.Kind {
		case "tm":
			r := f.run(filepath.Join(f.remotes, "tm", s.Script), s.Stdin, s.Args...)
			return r.code
		case "vmm-local":
			vmmRun = f.run(f.vmm(s.Script), s.Stdin, s.Args...)
			return vmmRun.code
		}
		// The driver's own remote migrate over ssh (no rbdfence).
		h := f.hs.A
		if src == f.hs.B.Name {
			h = f.hs.B
		}
		_, _, code := f.hs.SSH(f.t, h, s.Stdin, append([]string{filepath.Join(f.path("hostremotes"), "vmm/kvm", s.Script)}, s.Args...)...)
		return code
	}}
	_, trace := m.Migrate(vm, fmt.Sprintf("one-%d", vm), src, dst, fmt.Sprintf("/var/lib/one//datastores/0/%d", vm), 0, doc, xml)
	var steps []string
	for _, s := range trace {
		steps = append(steps, s.Kind+" "+s.Script)
	}
	f.t.Logf("migration under a %s system datastore: %s; migrate-rbdfence took %s:\n%s", sysTM, strings.Join(steps, ", "), vmmRun.took, vmmRun.stderr)
	if strings.Contains(vmmRun.stderr, fmt.Sprintf("VM %d: VM %d:", vm, vm)) || strings.Contains(vmmRun.stderr, fmt.Sprintf("rbdfence: VM %d: ", vm)) {
		f.t.Errorf("doubled prefix:\n%s", vmmRun.stderr)
	}
	return vmmRun, xml
}

// checkMigrateCall checks the one remote migrate call: on the source, with
// the driver's arguments and the XML on stdin; it returns the claim as it
// was during the migration.
func (f *fe) checkMigrateCall(vm int, src testenv.Host, dst, xml string) engine.Claim {
	f.t.Helper()
	calls := f.calls("migrate")
	if len(calls) != 1 {
		f.t.Fatalf("the remote migrate ran %d times, want 1", len(calls))
	}
	want := strings.Join([]string{fmt.Sprintf("one-%d", vm), dst, src.Name, fmt.Sprint(vm), src.Name}, "\n") + "\n"
	if got := readFile(f.t, calls[0]+".args"); got != want {
		f.t.Errorf("remote migrate args %q, want %q", got, want)
	}
	if got := readFile(f.t, calls[0]+".stdin"); got != xml {
		f.t.Errorf("remote migrate stdin is not the driver action XML: %.120q", got)
	}
	if where := readFile(f.t, calls[0]+".where"); !strings.Contains(where, " "+src.IP+"/") {
		f.t.Errorf("remote migrate did not run on the source %s", src.Name)
	}
	var c engine.Claim
	if err := json.Unmarshal([]byte(readFile(f.t, calls[0]+".claim")), &c); err != nil {
		f.t.Fatalf("claim during the migration: %v (%s)", err, readFile(f.t, calls[0]+".err"))
	}
	return c
}

// TestFailedMigration: the migrate action opens the window (the claim
// shows it while the real migration runs), the migration fails and left a
// copy writing on the destination; the action fences that copy, keeps the
// source, closes the window and exits with the migration's own code.
func TestFailedMigration(t *testing.T) {
	f := setup(t)
	for _, sysTM := range []string{"ceph", "shared"} {
		t.Run(sysTM+" system datastore", func(t *testing.T) { f.t = t; failedMigration(t, f, sysTM) })
	}
}

func failedMigration(t *testing.T, f *fe, sysTM string) {
	a, b := f.hs.A, f.hs.B
	_ = os.RemoveAll(f.path("remote-calls"))
	vm, specs := f.newVM(a.Name, 1, "persistent", "volatile")
	if r := f.deployVM(vm, 1, a.Name, specs); r.code != 0 {
		t.Fatalf("deploy on %s: exit %d\n%s", a, r.code, r.stderr)
	}
	src := testenv.StartZombieOn(t, f.ceph, a, specs[0].image, "write")
	src.WaitWrite(t, true, 30*time.Second)
	f.migrating(vm, 1, a.Name, b.Name, specs)
	// After the failed migration libvirt on the source says one-N runs
	// there with no job (the only answer the destination fences on:
	// TestFailmigrateOnDestinationAsksSource).
	f.sourceRunsVM(vm)

	// The "failed" migration left a copy writing on the destination.
	dst := testenv.StartZombieOn(t, f.ceph, b, specs[0].image, "write")
	dst.WaitWrite(t, true, 30*time.Second)
	f.write(f.path("remote-calls", "migrate.fail"), "", 0o644)

	r, xml := f.migrateUnder(sysTM, vm, a.Name, b.Name)
	if r.code != 1 || !strings.Contains(r.stderr, "Could not migrate") {
		t.Fatalf("migrate-rbdfence: exit %d, want the migration's 1 with its message\n%s", r.code, r.stderr)
	}
	if w := f.checkMigrateCall(vm, a, b.Name, xml).Window; w == nil || w.Src != a.Name || w.Dst != b.Name {
		t.Fatalf("no handover window %s -> %s while the migration ran: %+v", a.Name, b.Name, w)
	}
	if ev := dst.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the destination's copy: errno %d, want 108", ev.Errno)
	}
	bl := f.ceph.BlocklistEntries(t)
	if _, ok := bl[dst.Addr]; !ok {
		t.Fatalf("destination client %s not blocklisted", dst.Addr)
	}
	if _, ok := bl[src.Addr]; ok {
		t.Fatal("the failed migration's fence blocklisted the source")
	}
	src.WaitWrite(t, true, 30*time.Second)
	c := f.claim(vm)
	if c.Host != a.Name || c.Window != nil {
		t.Fatalf("claim after the failed migration: %+v", c)
	}
	ut, _ := f.sim.UserTemplate(vm)
	if text := ut.String(); !strings.Contains(text, dst.Addr) || !strings.Contains(text, `SOURCE="failmigrate"`) || strings.Contains(text, src.Addr) {
		t.Fatalf("user template:\n%s", text)
	}
}

// TestMigrationDone: after a successful migration the old source still
// holds the lock (it did not die); the action fences that lock owner,
// keeps the destination's client, records it and closes the window.
func TestMigrationDone(t *testing.T) {
	f := setup(t)
	for _, sysTM := range []string{"ceph", "shared"} {
		t.Run(sysTM+" system datastore", func(t *testing.T) { f.t = t; migrationDone(t, f, sysTM) })
	}
}

func migrationDone(t *testing.T, f *fe, sysTM string) {
	a, b := f.hs.A, f.hs.B
	_ = os.RemoveAll(f.path("remote-calls"))
	vm, specs := f.newVM(a.Name, 4, "clone")
	old := testenv.StartZombieOn(t, f.ceph, a, specs[0].image, "write")
	old.WaitWrite(t, true, 30*time.Second)
	f.migrating(vm, 4, a.Name, b.Name, specs)
	moved := testenv.StartZombieOn(t, f.ceph, b, specs[0].image, "idle")
	r, xml := f.migrateUnder(sysTM, vm, a.Name, b.Name)
	if r.code != 0 {
		t.Fatalf("migrate-rbdfence: exit %d\n%s", r.code, r.stderr)
	}
	if w := f.checkMigrateCall(vm, a, b.Name, xml).Window; w == nil {
		t.Fatal("no handover window while the migration ran")
	}
	if ev := old.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("old source lock owner: errno %d, want 108", ev.Errno)
	}
	if _, ok := f.ceph.BlocklistEntries(t)[moved.Addr]; ok {
		t.Fatal("the migration's end blocklisted the destination's client")
	}
	c := f.claim(vm)
	if c.Host != b.Name || c.Window != nil || len(c.Addrs) != 1 || c.Addrs[0].String() != moved.Addr {
		t.Fatalf("claim after the migration: %+v (want host %s, addrs [%s])", c, b.Name, moved.Addr)
	}
}

// TestMigrationOutlivesActionTimeout (issue 18 item 2): a live migration
// takes longer than timeouts.action (a large busy VM). rbdfence sets no
// limit of its own on it (OpenNebula's driver sets none,
// one_vmm_exec.rb:598-674 of release-7.4.0): it waits, and when the
// migration succeeds the copy that now runs on the destination keeps
// writing and the claim follows it. Cutting the wait would kill our ssh
// while virsh migrate on the source goes on, then fence the destination
// the migration completes onto.
func TestMigrationOutlivesActionTimeout(t *testing.T) {
	f := setup(t)
	f.action = "2s"
	f.writeConfig()
	a, b := f.hs.A, f.hs.B
	vm, specs := f.newVM(a.Name, 4, "clone")
	old := testenv.StartZombieOn(t, f.ceph, a, specs[0].image, "write")
	old.WaitWrite(t, true, 30*time.Second)
	f.migrating(vm, 4, a.Name, b.Name, specs)
	moved := testenv.StartZombieOn(t, f.ceph, b, specs[0].image, "write")
	f.write(f.path("remote-calls", "migrate.sleep"), "7", 0o644)
	r, _ := f.migrateRun(vm, a.Name, b.Name)
	if r.code != 0 || r.took < 7*time.Second {
		t.Fatalf("migrate-rbdfence: exit %d after %s, want 0 after the 7 s migration\n%s", r.code, r.took, r.stderr)
	}
	if _, ok := f.ceph.BlocklistEntries(t)[moved.Addr]; ok {
		t.Fatalf("the destination's copy %s, where the migration completed, was blocklisted", moved.Addr)
	}
	for i := 0; i < 3; i++ {
		if ev := moved.WaitWrite(t, true, 30*time.Second); !ev.OK {
			t.Fatalf("the migrated copy: %+v", ev)
		}
	}
	if c := f.claim(vm); c.Host != b.Name || c.Window != nil {
		t.Fatalf("claim after the migration: %+v", c)
	}
}

// TestPremigrateFailureAbortsMigration: when the window cannot be opened
// (Ceph unreachable from the source) the action fails with one plain line
// before the real migration starts, so the VM keeps running on the source.
func TestPremigrateFailureAbortsMigration(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	vm, specs := f.vmWithCeph(a.Name, f.hs.BridgeIP+":6999", f.keyFile())
	f.migrating(vm, 0, a.Name, b.Name, specs)
	r, _ := f.migrateRun(vm, a.Name, b.Name)
	if r.code != 3 || len(r.plainLines()) != 1 || !strings.HasPrefix(r.plainLines()[0], "rbdfence: refused, nothing fenced: ") ||
		!strings.Contains(r.plainLines()[0], "the migration was not started") {
		t.Fatalf("exit %d, want 3 with one plain line:\n%s", r.code, r.stderr)
	}
	if n := len(f.calls("migrate")); n != 0 {
		t.Fatalf("the remote migrate ran %d time(s) without a window", n)
	}
}

// TestMigrationDoneBehindNAT (issue 31 item 1, lifecycle row "live migrate:
// hosts behind one NAT toward Ceph"): both hosts reach Ceph through one
// source NAT (test/netns/hosts.sh nat), so every client of either shows
// Ceph 10.77.0.200, an address neither has. The migrated QEMU on b has
// taken the image's lock by the time the action closes the window (its
// guest writes at once); the close fences lock owners that are not on b,
// and b's scope holds the address Ceph sees for b's clients: the live copy
// is not fenced, the claim records it. (Before, b's scope was its
// interface list, and the migrated VM was blocklisted.)
func TestMigrationDoneBehindNAT(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	const natAddr = "10.77.0.200"
	for _, h := range []testenv.Host{a, b} {
		netnsNAT(t, h.Name, natAddr)
	}
	vm, specs := f.newVM(a.Name, 4, "clone")
	testenv.StartZombieSeenAs(t, f.ceph, a, natAddr, specs[0].image, "idle") // the source's QEMU
	f.migrating(vm, 4, a.Name, b.Name, specs)
	moved := testenv.StartZombieSeenAs(t, f.ceph, b, natAddr, specs[0].image, "write")
	moved.WaitWrite(t, true, 30*time.Second)
	r, _ := f.migrateRun(vm, a.Name, b.Name)
	if r.code != 0 {
		t.Fatalf("migrate-rbdfence behind NAT: exit %d\n%s", r.code, r.stderr)
	}
	if ev := moved.WaitWrite(t, true, 30*time.Second); !ev.OK {
		t.Fatalf("the migrated copy on %s cannot write after the migration behind NAT: %+v", b.Name, ev)
	}
	if _, ok := f.ceph.BlocklistEntries(t)[moved.Addr]; ok {
		t.Fatalf("the migration's end blocklisted the migrated copy %s", moved.Addr)
	}
	if c := f.claim(vm); c.Host != b.Name || c.Window != nil || !slices.ContainsFunc(c.Addrs, func(x engine.Addr) bool { return x.String() == moved.Addr }) {
		t.Fatalf("claim after the migration behind NAT: %+v (want host %s, recording %s)", c, b.Name, moved.Addr)
	}
}

// netnsNAT puts test host name behind the source NAT that shows Ceph addr
// (test/netns/hosts.sh nat) until the test ends.
func netnsNAT(t *testing.T, name, addr string) {
	t.Helper()
	sh := func(args ...string) {
		t.Helper()
		out, err := exec.Command("bash", append([]string{filepath.Join(testenv.Root(), "test/netns/hosts.sh")}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("test/netns/hosts.sh %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	sh("nat", name, addr)
	t.Cleanup(func() { sh("unnat", name) })
}
