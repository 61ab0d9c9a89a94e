package frontend_test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// standIn is a "QEMU" client the remote deploy stand-in started.
type standIn struct {
	image, out, addr string
}

// standIns returns the clients the deploy stand-in started, oldest first.
func (f *fe) standIns() []standIn {
	f.t.Helper()
	b, _ := os.ReadFile(f.path("remote-calls", "qemu.images"))
	var out []standIn
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		img, file, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		s := standIn{image: img, out: file}
		for _, ev := range zombieEvents(f.t, file) {
			if ev.Event == "ready" {
				s.addr = ev.Addr
			}
		}
		out = append(out, s)
	}
	return out
}

func zombieEvents(t *testing.T, file string) []testenv.ZombieEvent {
	t.Helper()
	fh, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var evs []testenv.ZombieEvent
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var ev testenv.ZombieEvent
		if json.Unmarshal(sc.Bytes(), &ev) == nil {
			evs = append(evs, ev)
		}
	}
	return evs
}

// waitWrites waits until the client's output shows a write with ok after
// write number after, and returns it.
func waitWrites(t *testing.T, s standIn, ok bool, after int, within time.Duration) testenv.ZombieEvent {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, ev := range zombieEvents(t, s.out) {
			if ev.Event == "write" && ev.OK == ok && ev.N > after {
				return ev
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("client %s on %s: no write with ok=%v after #%d within %s", s.addr, s.image, ok, after, within)
	return testenv.ZombieEvent{}
}

func lastWrite(t *testing.T, s standIn) int {
	n := 0
	for _, ev := range zombieEvents(t, s.out) {
		if ev.Event == "write" && ev.N > n {
			n = ev.N
		}
	}
	return n
}

// place registers VM vm in oned as placed on host (deploy seq).
func (f *fe) place(vm int, host string, hostID, seq, lcm int, specs []diskSpec) {
	f.t.Helper()
	var disks []onedsim.Disk
	for _, s := range specs {
		disks = append(disks, s.disk)
	}
	if err := f.sim.Put(onedsim.VM{ID: vm, Host: host, HostID: hostID, Seq: seq, State: onedsim.StateActive, LCMState: lcm, Disks: disks}); err != nil {
		f.t.Fatal(err)
	}
}

// deployOn runs the deploy wrapper for VM vm on host as oned does, with the
// stand-in starting one client per image in mode.
func (f *fe) deployOn(vm, seq int, host testenv.Host, specs []diskSpec, mode string) result {
	f.t.Helper()
	var imgs []string
	for _, s := range specs {
		imgs = append(imgs, s.image)
	}
	f.write(f.path("remote-calls", "starts"), strings.Join(imgs, "\n")+"\n", 0o644)
	f.write(f.path("remote-calls", "starts.mode"), mode, 0o644)
	local, _, domain := f.deployFiles(vm, seq, specs)
	return f.run(f.vmm("deploy-rbdfence"), base64.StdEncoding.EncodeToString([]byte(domain)), local, host.Name, fmt.Sprint(vm), host.Name)
}

// TestHostFenceHA: OpenNebula's HA path with rbdfence as the host fence.
// Two VMs (2 RBD disks each) are deployed on host A through the deploy
// wrapper; their "QEMU" clients write. A healthy host is refused (exit 4,
// one line, nothing fenced), and so is a host in ERROR that still reports.
// Then A fails (cut off from oned, not from Ceph: its VMs keep writing):
// fence-host, fed as host_error.rb feeds ft/fence_host.sh (the host's XML,
// base64, on stdin), exits 0 once every writer is blocklisted; each gets
// errno 108. The claims say fenced; one event per VM and a summary on the
// host; audit and metrics. The VMs are then rescheduled to host B and start
// there through the normal deploy path; the old writers stay fenced.
// unfence --host A removes exactly the host's entries.
func TestHostFenceHA(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	f.extra = fmt.Sprintf("ceph:\n  mon_host: %s\n  user: %s\n  keyring: %s\nfence:\n  expire: 2h\nmetrics: %s\n",
		f.ceph.Mon, f.ceph.User, f.ceph.Keyring, f.path("metrics.prom"))
	f.writeConfig()
	now := time.Now()
	f.sim.PutHost(onedsim.Host{ID: 1, Name: a.Name, State: onedsim.HostMonitored, LastMonitored: now.Add(-20 * time.Second)})
	f.sim.PutHost(onedsim.Host{ID: 2, Name: b.Name, State: onedsim.HostMonitored, LastMonitored: now.Add(-10 * time.Second)})

	const seq = 3
	type vmT struct {
		id    int
		specs []diskSpec
	}
	var vms []vmT
	for _, kinds := range [][]string{{"persistent", "clone"}, {"volatile", "clone"}} {
		id, specs := f.newVM(a.Name, seq, kinds...)
		f.place(id, a.Name, 1, seq, onedsim.LCMBoot, specs)
		if r := f.deployOn(id, seq, a, specs, "write"); r.code != 0 {
			t.Fatalf("deploy of VM %d on %s: exit %d\n%s", id, a, r.code, r.stderr)
		}
		f.place(id, a.Name, 1, seq, onedsim.LCMRunning, specs)
		vms = append(vms, vmT{id, specs})
	}
	writers := f.standIns()
	if len(writers) != 4 {
		t.Fatalf("%d stand-in QEMU clients, want 4", len(writers))
	}
	for _, w := range writers {
		if !strings.HasPrefix(w.addr, a.IP+":") {
			t.Fatalf("writer %s is not on %s", w.addr, a)
		}
		waitWrites(t, w, true, 0, 30*time.Second)
	}
	for _, v := range vms {
		if c := f.claim(v.id); c.Host != a.Name || len(c.Addrs) != 2 {
			t.Fatalf("claim of VM %d after the deploy: %+v", v.id, c)
		}
	}
	rbd := testenv.Bin(t, "rbdfence")
	refused := func(r result, says string) {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
		if r.code != 4 || len(lines) != 1 || !strings.Contains(r.stderr, says) {
			t.Fatalf("fence-host of a healthy host: exit %d, want 4 and one line saying %q:\n%s", r.code, says, r.stderr)
		}
		bl := f.ceph.BlocklistEntries(t)
		for _, w := range writers {
			if _, ok := bl[w.addr]; ok {
				t.Fatalf("a refused fence-host blocklisted %s", w.addr)
			}
		}
	}

	// A healthy host is refused, by name and as the hook sends it.
	refused(f.run(rbd, "", "fence-host", "--host", a.Name), "its state is MONITORED")
	hostDoc, _ := f.sim.HostXML(1)
	refused(f.run(rbd, base64.StdEncoding.EncodeToString([]byte(hostDoc)), "fence-host"), "its state is MONITORED")
	// In ERROR but oned still hears from it (a monitoring glitch): refused.
	f.sim.PutHost(onedsim.Host{ID: 1, Name: a.Name, State: onedsim.HostError, LastMonitored: time.Now().Add(-15 * time.Second)})
	hostDoc, _ = f.sim.HostXML(1)
	refused(f.run(rbd, base64.StdEncoding.EncodeToString([]byte(hostDoc)), "fence-host"), "still reports to oned")
	for _, w := range writers {
		waitWrites(t, w, true, lastWrite(t, w), 30*time.Second) // still writing
	}

	// Host A fails: silent for 10 minutes, in ERROR. Its VMs keep writing.
	f.sim.PutHost(onedsim.Host{ID: 1, Name: a.Name, State: onedsim.HostError, LastMonitored: time.Now().Add(-10 * time.Minute)})
	hostDoc, _ = f.sim.HostXML(1)
	before := map[string]int{}
	for _, w := range writers {
		before[w.addr] = lastWrite(t, w)
	}
	// As host_error.rb runs it: the installed fence_host.sh (next to the
	// link to host_error.rb), the host's XML base64 on stdin, no argument.
	r := f.run(filepath.Join(f.remotes, "hooks/rbdfence/fence_host.sh"), base64.StdEncoding.EncodeToString([]byte(hostDoc)))
	t.Logf("fence-host took %s\n%s%s", r.took, r.stdout, r.stderr)
	if r.code != 0 {
		t.Fatalf("fence-host: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	bl := f.ceph.BlocklistEntries(t)
	for _, w := range writers {
		if _, ok := bl[w.addr]; !ok {
			t.Errorf("writer %s not blocklisted", w.addr)
		}
		if ev := waitWrites(t, w, false, before[w.addr], 30*time.Second); ev.Errno != 108 {
			t.Errorf("writer %s: write #%d failed with errno %d (%s), want 108", w.addr, ev.N, ev.Errno, ev.Error)
		}
	}
	for ad := range bl {
		if strings.HasSuffix(ad, ":0/0") {
			t.Errorf("a whole-address entry %s without --whole-address", ad)
		}
	}
	for _, v := range vms {
		c := f.claim(v.id)
		if c.State != engine.StateFenced || c.Host != a.Name || c.Seq != seq || len(c.Addrs) != 2 || c.Source != engine.SourceHostFence {
			t.Fatalf("claim of VM %d after fence-host: %+v", v.id, c)
		}
		ut, _ := f.sim.UserTemplate(v.id)
		if n := strings.Count(ut.String(), "ACTION=\"host-fenced\""); n != 1 {
			t.Errorf("VM %d: %d host-fenced events, want 1:\n%s", v.id, n, ut.String())
		}
		for _, w := range writers {
			for _, s := range v.specs {
				if s.image == w.image && !strings.Contains(ut.String(), w.addr) {
					t.Errorf("VM %d's event does not name %s", v.id, w.addr)
				}
			}
		}
	}
	ht, _ := f.sim.HostTemplate(1)
	if !strings.Contains(ht.String(), "RBDFENCE_HOST_FENCE") || !strings.Contains(ht.String(), `CLIENTS="4"`) || !strings.Contains(ht.String(), `RESULT="complete"`) {
		t.Errorf("host summary event:\n%s", ht.String())
	}
	auditText := readFile(t, f.path("frontend-audit.log"))
	if n := strings.Count(auditText, `"op":"fence-host"`); n != 4 {
		t.Errorf("%d fence-host audit records, want 4:\n%s", n, auditText)
	}
	if m := readFile(t, f.path("metrics.prom")); !strings.Contains(m, `rbdfence_fences_total{op="fence-host"} 4`) {
		t.Errorf("metrics:\n%s", m)
	}
	// Idempotent: a second run is complete too.
	if r := f.run(rbd, base64.StdEncoding.EncodeToString([]byte(hostDoc)), "fence-host"); r.code != 0 {
		t.Fatalf("second fence-host: exit %d\n%s", r.code, r.stderr)
	}

	// OpenNebula reschedules (host_error.rb -m): deploy 4 on host B,
	// through the normal deploy path. Admitted; A's writers stay fenced.
	for _, v := range vms {
		f.place(v.id, b.Name, 2, seq+1, onedsim.LCMBoot, v.specs)
		if r := f.deployOn(v.id, seq+1, b, v.specs, "idle"); r.code != 0 {
			t.Fatalf("reschedule of VM %d to %s: exit %d\n%s", v.id, b, r.code, r.stderr)
		}
		c := f.claim(v.id)
		if c.Host != b.Name || c.Seq != seq+1 || c.State != engine.StateRunning || len(c.Addrs) != 2 {
			t.Fatalf("claim of VM %d after the reschedule: %+v", v.id, c)
		}
		for _, ad := range c.Addrs {
			if !strings.HasPrefix(ad.String(), b.IP+":") {
				t.Fatalf("VM %d's new instance %s is not on %s", v.id, ad, b)
			}
		}
	}
	bl = f.ceph.BlocklistEntries(t)
	for _, w := range writers {
		if _, ok := bl[w.addr]; !ok {
			t.Errorf("writer %s no longer blocklisted after the reschedule", w.addr)
		}
		if ev := waitWrites(t, w, false, lastWrite(t, w), 30*time.Second); ev.Errno != 108 {
			t.Errorf("old writer %s after the reschedule: errno %d", w.addr, ev.Errno)
		}
	}
	for _, s := range f.standIns()[4:] {
		if _, ok := bl[s.addr]; ok || !strings.HasPrefix(s.addr, b.IP+":") {
			t.Errorf("new instance %s: blocklisted %v", s.addr, ok)
		}
	}

	// Host A is repaired: doctor shows its live fence, unfence --host
	// removes exactly its entries.
	dr := f.run(rbd, "", "doctor", "--role", "frontend", "--root", f.prefix)
	if !strings.Contains(dr.stdout, "host-fences") || !strings.Contains(dr.stdout, a.Name) {
		t.Errorf("doctor does not show host %s's live fence:\n%s", a.Name, dr.stdout)
	}
	r = f.run(rbd, "", "unfence", "--host", a.Name, "--yes", "--id", f.ceph.RMUser, "--keyring", f.ceph.RMUserKeyring)
	if r.code != 0 {
		t.Fatalf("unfence --host: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	bl = f.ceph.BlocklistEntries(t)
	for _, w := range writers {
		if _, ok := bl[w.addr]; ok {
			t.Errorf("%s still blocklisted after unfence --host", w.addr)
		}
	}
	if strings.Count(r.stdout, "unfenced ") != 4 {
		t.Errorf("unfence --host removed other entries too:\n%s", r.stdout)
	}
}

// TestHostFenceWholeAddress: by default fence-host blocklists exact client
// instances only: another Ceph client on the failed host that belongs to no
// VM of it (on a hyper-converged host: an OSD) keeps working. With
// --whole-address the host's address is blocklisted as a whole (ip:0/0) and
// that client is cut off too; a client on host B is never touched. unfence
// --host removes the whole-address entry as well.
func TestHostFenceWholeAddress(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	f.extra = fmt.Sprintf("ceph:\n  mon_host: %s\n  user: %s\n  keyring: %s\nfence:\n  expire: 2h\n", f.ceph.Mon, f.ceph.User, f.ceph.Keyring)
	f.writeConfig()
	whole := a.IP + ":0/0"
	t.Cleanup(func() { // never leave the shared test host cut off
		_ = exec.Command("ceph", "-c", f.ceph.AdminConf, "osd", "blocklist", "rm", whole).Run()
	})
	f.sim.PutHost(onedsim.Host{ID: 1, Name: a.Name, State: onedsim.HostMonitored, LastMonitored: time.Now()})
	id, specs := f.newVM(a.Name, 2, "persistent")
	f.place(id, a.Name, 1, 2, onedsim.LCMBoot, specs)
	if r := f.deployOn(id, 2, a, specs, "write"); r.code != 0 {
		t.Fatalf("deploy on %s: exit %d\n%s", a, r.code, r.stderr)
	}
	writer := f.standIns()[0]
	waitWrites(t, writer, true, 0, 30*time.Second)
	// Not a client of the VM: another writer on host A, and one on host B.
	other := testenv.StartZombieOn(t, f.ceph, a, f.ceph.NewImage(t, "hf-other"), "write")
	onB := testenv.StartZombieOn(t, f.ceph, b, f.ceph.NewImage(t, "hf-onb"), "write")
	other.WaitWrite(t, true, 30*time.Second)
	onB.WaitWrite(t, true, 30*time.Second)
	f.sim.PutHost(onedsim.Host{ID: 1, Name: a.Name, State: onedsim.HostOffline, LastMonitored: time.Now().Add(-time.Hour)})
	rbd := testenv.Bin(t, "rbdfence")

	n := lastWrite(t, writer)
	if r := f.run(rbd, "", "fence-host", "--host", a.Name); r.code != 0 {
		t.Fatalf("fence-host: exit %d\n%s", r.code, r.stderr)
	}
	if ev := waitWrites(t, writer, false, n, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the VM's writer: errno %d", ev.Errno)
	}
	bl := f.ceph.BlocklistEntries(t)
	if _, ok := bl[whole]; ok {
		t.Fatalf("%s blocklisted without --whole-address", whole)
	}
	if _, ok := bl[other.Addr]; ok {
		t.Fatalf("the other client %s on %s was fenced by an exact fence", other.Addr, a)
	}
	for i := 0; i < 3; i++ {
		other.WaitWrite(t, true, 30*time.Second)
	}

	r := f.run(rbd, "", "fence-host", "--host", a.Name, "--whole-address", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"whole_address": [`) || !strings.Contains(r.stdout, whole) {
		t.Fatalf("fence-host --whole-address: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, ok := f.ceph.BlocklistEntries(t)[whole]; !ok {
		t.Fatalf("%s is not in the blocklist", whole)
	}
	if ev := other.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the other client on %s after --whole-address: errno %d (%s), want 108", a, ev.Errno, ev.Error)
	}
	for i := 0; i < 3; i++ {
		onB.WaitWrite(t, true, 30*time.Second) // host B is not touched
	}
	if _, ok := f.ceph.BlocklistEntries(t)[onB.Addr]; ok {
		t.Fatalf("the client on %s was blocklisted", b)
	}
	r = f.run(rbd, "", "unfence", "--host", a.Name, "--yes", "--id", f.ceph.RMUser, "--keyring", f.ceph.RMUserKeyring)
	if r.code != 0 || !strings.Contains(r.stdout, "unfenced "+whole) {
		t.Fatalf("unfence --host: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, ok := f.ceph.BlocklistEntries(t)[whole]; ok {
		t.Fatalf("%s still blocklisted after unfence --host", whole)
	}
}
