package hostfence_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// disk is one RBD disk of a test VM, as the host step and oned see it.
func (g *rig) disk(id int, image string, shareable bool) (vmdisk.Disk, onedsim.Disk) {
	pool, name, _ := strings.Cut(image, "/")
	return vmdisk.Disk{ID: fmt.Sprint(id), Pool: pool, Name: name, Monitors: []string{g.c.Mon}, Shareable: shareable},
		onedsim.Disk{ID: id, Source: image, Persistent: true, Shareable: shareable, CephHost: g.c.Mon, CephKey: g.c.Keyring}
}

func (g *rig) blocklisted(z *testenv.Zombie) bool {
	_, ok := g.c.BlocklistEntries(g.t)[z.Addr]
	return ok
}

// TestFenceHostFromTemplateAddresses (issue 18 item 11): the failed host's
// name does not resolve to its Ceph-side address and its VM's claim records
// no address (the start's record never happened). OpenNebula's HA hook
// passes no --host-addr (share/hooks/ft/host_error.rb:210-222 of
// release-7.4.0), so fence-host is incomplete and says how to fix it, and
// doctor flags the host; once the operator set the addresses in the host's
// template, the same hook call fences the host's writer (errno 108), and
// nothing elsewhere. A bad attribute refuses the fence with one line.
func TestFenceHostFromTemplateAddresses(t *testing.T) {
	g := newRig(t)
	vm := 810000 + rand.IntN(90000)*10
	im := g.c.NewImage(t, "hfa")
	d, od := g.disk(0, im, false)
	g.step(g.hostCfg("a", ipA), hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 2, Host: hostA, Disks: []vmdisk.Disk{d}})
	writer := testenv.StartZombie(t, g.c, im, "write", "--bind", ipA)
	other := testenv.StartZombie(t, g.c, im, "idle", "--bind", ipB) // not on the failed host
	writer.WaitWrite(t, true, 30*time.Second)
	if err := g.sim.Put(onedsim.VM{ID: vm, Host: hostA, HostID: 1, Seq: 2, Disks: []onedsim.Disk{od}}); err != nil {
		t.Fatal(err)
	}
	if cl := claim(t, g.c, vm); len(cl.Addrs) != 0 || len(cl.HostAddrs) != 0 {
		t.Fatalf("the scenario needs a claim without addresses: %+v", cl)
	}
	failed := onedsim.Host{ID: 1, Name: hostA, State: onedsim.HostError, LastMonitored: time.Now().Add(-10 * time.Minute)}
	g.putHost(failed, "")

	doctor := func() string {
		t.Helper()
		r := run(t, g.env, "", g.rbd, "doctor", "--role", "frontend", "--root", g.prefix)
		for _, l := range strings.Split(r.stdout, "\n") {
			if strings.Contains(l, "host-fence-addresses") {
				return l
			}
		}
		t.Fatalf("doctor has no host-fence-addresses check:\n%s", r.stdout)
		return ""
	}
	if l := doctor(); !strings.Contains(l, "fence-host of "+hostA+" would be incomplete") {
		t.Errorf("doctor does not flag %s: %s", hostA, l)
	}
	r := run(t, g.env, g.hookStdin(1), g.fenceHost)
	if r.code != 1 || !strings.Contains(r.stderr, "RBDFENCE_HOST_ADDRESSES") {
		t.Fatalf("fence-host without any address: exit %d, want 1 naming RBDFENCE_HOST_ADDRESSES\n%s", r.code, r.stderr)
	}
	if g.blocklisted(writer) {
		t.Fatal("fenced without knowing the host's address")
	}

	g.putHost(failed, "127.0.0.9, "+hostA)
	r = run(t, g.env, g.hookStdin(1), g.fenceHost)
	if r.code != 2 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, `"`+hostA+`" is not an IP address`) {
		t.Fatalf("fence-host with a bad attribute: exit %d, want 2 and one line\n%s", r.code, r.stderr)
	}

	g.putHost(failed, ipA)
	if l := doctor(); strings.Contains(l, "incomplete") || strings.Contains(l, "refuse") {
		t.Errorf("doctor after the fix: %s", l)
	}
	r = run(t, g.env, g.hookStdin(1), g.fenceHost)
	if r.code != 0 {
		t.Fatalf("fence-host with the host's template addresses: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if ev := writer.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the failed host's writer: errno %d, want 108", ev.Errno)
	}
	if g.blocklisted(other) {
		t.Fatalf("the client on %s was fenced", ipB)
	}
	if cl := claim(t, g.c, vm); cl.State != engine.StateFenced || !slices.ContainsFunc(cl.Addrs, func(a engine.Addr) bool { return a.String() == writer.Addr }) {
		t.Fatalf("claim after fence-host: %+v", cl)
	}
}

// TestFenceHostScope (issue 18 item 3): VM 42 runs on h1 with a root and
// a data disk, the data disk is detached, VM 42 live-migrates to h2 and
// hot-attaches a shareable disk that VM 43 on h1 writes too. The claim on
// h2 still records the detached disk's client on h1 (CloseWindow keeps
// the entries of disks it was not given). h2 fails: fence-host fences h2's
// clients and the recorded address as an exact entry, and VM 43's client
// on the healthy h1 keeps writing.
func TestFenceHostScope(t *testing.T) {
	g := newRig(t)
	const hostB = "hostB"
	h1, h2 := g.hostCfg("a", ipA), g.hostCfg("b", ipB)
	vm := 820000 + rand.IntN(90000)*10
	rootIm, dataIm, sharedIm := g.c.NewImage(t, "hfs-root"), g.c.NewImage(t, "hfs-data"), g.c.NewImage(t, "hfs-shared")
	root, oroot := g.disk(0, rootIm, false)
	data, _ := g.disk(1, dataIm, false)
	shared, oshared := g.disk(2, sharedIm, true)
	step := func(cfg, op string, seq int, host string, disks ...vmdisk.Disk) hoststep.Response {
		t.Helper()
		return g.step(cfg, hoststep.Request{Op: op, VM: vm, Seq: seq, Host: host, Src: hostA, Dst: hostB, Disks: disks})
	}

	step(h1, hoststep.OpStart, 3, hostA, root, data)
	rootA := testenv.StartZombie(t, g.c, rootIm, "write", "--bind", ipA)
	dataA := testenv.StartZombie(t, g.c, dataIm, "idle", "--bind", ipA)
	step(h1, hoststep.OpRecord, 3, hostA, root, data)
	dataA.Stop() // onevm disk-detach
	step(h1, hoststep.OpPremigrate, 4, hostA, root)
	rootB := testenv.StartZombie(t, g.c, rootIm, "write", "--bind", ipB) // the migrated QEMU
	rootA.Stop()
	step(h2, hoststep.OpPostmigrate, 4, hostB, root)
	step(h2, hoststep.OpAttach, 4, hostB, shared)
	sharedB := testenv.StartZombie(t, g.c, sharedIm, "idle", "--bind", ipB)
	step(h2, hoststep.OpRecord, 4, hostB, shared)
	vm43 := testenv.StartZombie(t, g.c, sharedIm, "write", "--bind", ipA) // VM 43 on h1
	rootB.WaitWrite(t, true, 30*time.Second)
	vm43.WaitWrite(t, true, 30*time.Second)
	cl := claim(t, g.c, vm)
	if cl.Host != hostB || !slices.ContainsFunc(cl.Addrs, func(a engine.Addr) bool { return a.String() == dataA.Addr }) {
		t.Fatalf("the scenario needs the claim on %s to record h1's %s: %+v", hostB, dataA.Addr, cl)
	}

	if err := g.sim.Put(onedsim.VM{ID: vm, Host: hostB, HostID: 2, Seq: 4, Disks: []onedsim.Disk{oroot, oshared}}); err != nil {
		t.Fatal(err)
	}
	g.putHost(onedsim.Host{ID: 1, Name: hostA, State: onedsim.HostMonitored, LastMonitored: time.Now()}, ipA)
	g.putHost(onedsim.Host{ID: 2, Name: hostB, State: onedsim.HostError, LastMonitored: time.Now().Add(-10 * time.Minute)}, ipB)
	r := run(t, g.env, g.hookStdin(2), g.fenceHost, "-v")
	if r.code != 0 {
		t.Fatalf("fence-host %s: exit %d\n%s%s", hostB, r.code, r.stdout, r.stderr)
	}
	t.Logf("fence-host %s:\n%s%s", hostB, r.stdout, r.stderr)
	for i := 0; i < 3; i++ {
		if ev := vm43.WaitWrite(t, true, 30*time.Second); !ev.OK {
			t.Fatalf("VM 43's writer on the healthy h1: %+v", ev)
		}
	}
	if g.blocklisted(vm43) {
		t.Fatalf("VM 43's client %s on the healthy h1 was blocklisted", vm43.Addr)
	}
	if ev := rootB.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("VM 42's writer on the failed h2: errno %d, want 108", ev.Errno)
	}
	bl := g.c.BlocklistEntries(t)
	for _, a := range []string{sharedB.Addr, dataA.Addr} {
		if _, ok := bl[a]; !ok {
			t.Errorf("%s not blocklisted (h2's client of the shareable disk; the recorded address, as an exact entry)", a)
		}
	}
	for a := range bl {
		if strings.HasSuffix(a, ":0/0") {
			t.Errorf("a whole-address entry %s", a)
		}
	}
	if cl := claim(t, g.c, vm); cl.State != engine.StateFenced || slices.ContainsFunc(cl.Addrs, func(a engine.Addr) bool { return a.String() == sharedB.Addr }) {
		t.Fatalf("claim after fence-host (the shareable disk's client is not the instance's): %+v", cl)
	}
}

// TestFenceHostRefusesSharedAddress (issue 31 item 1): the failed host and
// a healthy one have one address in their templates (both behind one NAT
// toward Ceph, whose address the operator gave each): a fence by address
// would fence the healthy host's clients too. fence-host refuses in one
// line and fences nothing; once each host has its own, the same hook call
// fences the failed host's writer.
func TestFenceHostRefusesSharedAddress(t *testing.T) {
	g := newRig(t)
	const hostB = "hostB"
	vm := 830000 + rand.IntN(90000)*10
	im := g.c.NewImage(t, "hfn")
	d, od := g.disk(0, im, false)
	g.step(g.hostCfg("a", ipA), hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 2, Host: hostA, Disks: []vmdisk.Disk{d}})
	writer := testenv.StartZombie(t, g.c, im, "write", "--bind", ipA)
	writer.WaitWrite(t, true, 30*time.Second)
	if err := g.sim.Put(onedsim.VM{ID: vm, Host: hostA, HostID: 1, Seq: 2, Disks: []onedsim.Disk{od}}); err != nil {
		t.Fatal(err)
	}
	g.putHost(onedsim.Host{ID: 1, Name: hostA, State: onedsim.HostError, LastMonitored: time.Now().Add(-10 * time.Minute)}, ipA)
	g.putHost(onedsim.Host{ID: 2, Name: hostB, State: onedsim.HostMonitored, LastMonitored: time.Now()}, ipA)
	r := run(t, g.env, g.hookStdin(1), g.fenceHost)
	want := "refused, nothing fenced: hosts " + hostA + " and " + hostB + " both have address " + ipA
	if r.code != 2 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, want) {
		t.Fatalf("fence-host with an address two hosts have: exit %d, want 2 and one line with %q\n%s", r.code, want, r.stderr)
	}
	if ev := writer.WaitWrite(t, true, 30*time.Second); !ev.OK || g.blocklisted(writer) {
		t.Fatalf("the refused fence-host fenced %s: %+v", writer.Addr, ev)
	}

	g.putHost(onedsim.Host{ID: 2, Name: hostB, State: onedsim.HostMonitored, LastMonitored: time.Now()}, ipB)
	if r := run(t, g.env, g.hookStdin(1), g.fenceHost); r.code != 0 {
		t.Fatalf("fence-host once each host has its own address: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if ev := writer.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the failed host's writer: errno %d, want 108", ev.Errno)
	}
}
