// Package hook_test proves the libvirt qemu hook with the real parts: it
// installs the hook with install.sh into the hook directory of a running
// libvirtd, starts guest-less QEMU domains on RBD images of the test Ceph
// cluster with `virsh create`, writes through qemu-io inside QEMU, and
// checks what Ceph, libvirt and an oned stand-in saw.
package hook_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/hook"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/test/libvirt"
	"github.com/rbdfence/rbdfence/test/onedsim"
)

// TestHookFencesZombie is the point of rbdfence on a host: a zombie QEMU
// writes to a VM's image; starting the VM (domain one-<ID>) through libvirt
// fences the zombie, the new instance's data stays intact, the VM's claim
// records the new QEMU, and the collision reaches oned.
func TestHookFencesZombie(t *testing.T) {
	e := newEnv(t, "")
	id := vmID(1)
	e.removeClaimAtCleanup(id)
	if err := e.sim.Put(onedsim.VM{ID: id, Host: hostName, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	image := e.ceph.NewImage(t, "hooktest-zombie")
	disk := e.disk(image, false)

	zombie, _ := libvirttest.Create(t, e.xml(plainName("zombie"), disk))
	zombieWrites(t, zombie, 0xaa)
	zaddr := e.waitWatchers(image, 1)[0]
	if e.blocklisted(zaddr) {
		t.Fatalf("zombie %s blocklisted before the start", zaddr)
	}

	live, took := libvirttest.Create(t, e.xml(oneName(id), disk))
	t.Logf("%s started in %s with the hook", live, took.Round(time.Millisecond))

	if !e.blocklisted(zaddr) {
		t.Fatalf("the zombie's address %s is not blocklisted after the start", zaddr)
	}
	zombieFenced(t, zombie)
	if out, err := libvirttest.WritePattern(t, live, 0, 0xbb); err != nil {
		t.Fatalf("the new instance cannot write: %v\n%s", err, out)
	}
	if out, err := libvirttest.ReadPattern(t, live, 0, 0xbb); err != nil {
		t.Fatalf("the new instance does not read back its data: %v\n%s", err, out)
	}
	zombieFenced(t, zombie) // and still fenced: nothing of it reaches the image
	if out, err := libvirttest.ReadPattern(t, live, 0, 0xbb); err != nil {
		t.Fatalf("the new instance's data changed after the zombie tried again: %v\n%s", err, out)
	}

	// The audit log names the zombie, for this VM and host, from the hook.
	var found bool
	for _, r := range e.auditRecords() {
		if r.Address == zaddr && r.VM != nil && *r.VM == id && r.Host == hostName && r.Image == image && r.Result == "ok" {
			found = true
		}
	}
	if !found {
		t.Fatalf("audit log has no record of fencing %s for VM %d: %+v", zaddr, id, e.auditRecords())
	}

	// started begin recorded the new QEMU (the image's only watcher now).
	liveAddr := e.waitWatchers(image, 1)[0]
	if liveAddr == zaddr {
		t.Fatalf("the zombie %s still watches the image", zaddr)
	}
	claim := waitClaim(t, e, id, func(c *engine.Claim) bool { return c.State == engine.StateRunning })
	if claim.Host != hostName || claim.Source != engine.SourceHook || len(claim.Addrs) != 1 || claim.Addrs[0].String() != liveAddr {
		t.Fatalf("claim after the start: %+v; want host %s, source hook, addrs [%s]", claim, hostName, liveAddr)
	}

	// The collision reached oned: the VM's user template.
	ev := waitEvent(t, e.sim, id, zaddr)
	if ev["HOST"] != hostName || ev["IMAGE"] != image || ev["SOURCE"] != "hook/start" || !strings.HasPrefix(ev["ACTION"], "blocklisted") {
		t.Fatalf("event in oned: %v", ev)
	}
	ut, _ := e.sim.UserTemplate(id)
	if n, _ := ut.Single(opennebula.AttrCollisions); n != "1" {
		t.Fatalf("%s = %q, want 1", opennebula.AttrCollisions, n)
	}
}

// TestHookSpoolsWhenOnedDown: oned does not answer; the start still
// happens (within timeouts.oned) and the collision event is kept in the
// durable spool, to be sent later.
func TestHookSpoolsWhenOnedDown(t *testing.T) {
	e := newEnv(t, "")
	id := vmID(7)
	e.removeClaimAtCleanup(id)
	if err := e.sim.Put(onedsim.VM{ID: id, Host: hostName, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.sim.SetDown(true); err != nil {
		t.Fatal(err)
	}
	image := e.ceph.NewImage(t, "hooktest-spool")
	disk := e.disk(image, false)
	zombie, _ := libvirttest.Create(t, e.xml(plainName("spool-zombie"), disk))
	zombieWrites(t, zombie, 0xaa)
	zaddr := e.waitWatchers(image, 1)[0]

	_, took := libvirttest.Create(t, e.xml(oneName(id), disk))
	t.Logf("started in %s with oned down", took.Round(time.Millisecond))
	zombieFenced(t, zombie)
	sp, err := events.OpenSpool(filepath.Join(e.dir, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := sp.Pending()
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) != 1 || pending[0].VM != id || pending[0].Address != zaddr || pending[0].Source != "hook/start" {
		t.Fatalf("spool: %+v; want the event of fencing %s for VM %d", pending, zaddr, id)
	}
}

// TestHookFencesForeignDomain: a domain that is not an OpenNebula VM gets
// the same protection without a claim; the fence is in the audit log as VM
// -1 and no event is raised.
func TestHookFencesForeignDomain(t *testing.T) {
	e := newEnv(t, "")
	image := e.ceph.NewImage(t, "hooktest-plain")
	disk := e.disk(image, false)
	zombie, _ := libvirttest.Create(t, e.xml(plainName("plain-zombie"), disk))
	zombieWrites(t, zombie, 0xaa)
	zaddr := e.waitWatchers(image, 1)[0]

	live, _ := libvirttest.Create(t, e.xml(plainName("plain-live"), disk))
	zombieFenced(t, zombie)
	if out, err := libvirttest.WritePattern(t, live, 0, 0xbb); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var found bool
	for _, r := range e.auditRecords() {
		if r.Address == zaddr && r.VM == nil && r.Op == "fence" {
			found = true
		}
	}
	if !found {
		t.Fatalf("audit log has no VM -1 fence of %s: %+v", zaddr, e.auditRecords())
	}
	if n := len(e.sim.Updates()); n != 0 {
		t.Fatalf("a domain that is no VM raised %d oned updates", n)
	}
}

// TestHookShareable: two VMs with one <shareable/> image both start and
// both write; nobody is fenced.
func TestHookShareable(t *testing.T) {
	e := newEnv(t, "")
	a, b := vmID(2), vmID(3)
	e.removeClaimAtCleanup(a)
	e.removeClaimAtCleanup(b)
	image := e.ceph.NewImage(t, "hooktest-shared")
	disk := e.disk(image, true)

	domA, _ := libvirttest.Create(t, e.xml(oneName(a), disk))
	zombieWrites(t, domA, 0xaa)
	domB, _ := libvirttest.Create(t, e.xml(oneName(b), disk))
	watchers := e.waitWatchers(image, 2)
	zombieWrites(t, domA, 0xa1)
	zombieWrites(t, domB, 0xb1)
	for _, w := range watchers {
		if e.blocklisted(w) {
			t.Fatalf("a client of the shareable image was blocklisted: %s", w)
		}
	}
	if recs := e.auditRecords(); len(recs) != 0 {
		t.Fatalf("nothing may be fenced on a shareable image; audit: %+v", recs)
	}
}

// TestHookIncomingMigration calls the installed hook as libvirtd does on
// the destination of a live migration the front-end opened (premigrate):
// migrate begin, then prepare for the same domain while the source QEMU
// runs: nothing is fenced, and started records this host's instance in the
// claim's window and clears the mark. After release end clears the mark of
// a second migration, a prepare without it is a second copy: refused, and
// the source is not fenced.
func TestHookIncomingMigration(t *testing.T) {
	e := newEnv(t, "")
	id := vmID(4)
	e.removeClaimAtCleanup(id)
	src, srcAddr := e.startWriter("migrate", plainName("migration-source"))

	// The real domain XML, as libvirt renders it, under the VM's name.
	live, err := libvirttest.Virsh("dumpxml", src)
	if err != nil {
		t.Fatal(err)
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(live); err != nil {
		t.Fatal(err)
	}
	name := oneName(id)
	dom.Name, dom.UUID, dom.ID = name, "", nil
	xml, err := dom.Marshal()
	if err != nil {
		t.Fatal(err)
	}

	e.frontendClaim(id, 3, "kvm-src")
	e.premigrate(id, 4, "kvm-src", hostName)
	mark := filepath.Join(e.stateDir, hook.MarkDir, name)
	steps := []struct {
		args    string
		fenced  bool
		marked  bool
		comment string
		refused bool
	}{
		{"migrate begin -", false, true, "incoming migration marked", false},
		{"prepare begin -", false, true, "the source runs: not fenced", false},
		{"start begin -", false, true, "", false},
		{"started begin -", false, false, "the start sequence is over: recorded in the window, mark cleared", false},
		{"migrate begin -", false, true, "a second incoming migration", false},
		{"prepare begin -", false, true, "the source runs: not fenced", false},
		{"release end -", false, false, "the migration was aborted: mark cleared", false},
		{"prepare begin -", false, false, "a start that is not the migration: a second copy", true},
	}
	for _, st := range steps {
		r := e.callHook(xml, append([]string{name}, strings.Fields(st.args)...)...)
		if (r.code != 0) != st.refused {
			t.Fatalf("%s %s: exit %d (refusal wanted: %v): %s", name, st.args, r.code, st.refused, r.stderr)
		}
		_, serr := os.Stat(mark)
		if marked := serr == nil; marked != st.marked {
			t.Fatalf("after %s: mark %s present = %v, want %v", st.args, mark, marked, st.marked)
		}
		if got := e.blocklisted(srcAddr); got != st.fenced {
			t.Fatalf("after %s (%s): source %s blocklisted = %v, want %v", st.args, st.comment, srcAddr, got, st.fenced)
		}
		if st.args == "migrate begin -" {
			fi, _ := os.Stat(mark)
			di, _ := os.Stat(filepath.Dir(mark))
			if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
				t.Fatalf("mark mode %v, dir mode %v; want 0600 and 0700", fi.Mode(), di.Mode())
			}
		}
		if st.args == "started begin -" {
			c, err := e.engine().ReadClaim(context.Background(), e.ceph.Pool, id)
			if err != nil || c == nil || c.Host != "kvm-src" || c.Seq != 3 || c.Window == nil || len(c.Window.DstAddrs) != 1 {
				t.Fatalf("during an incoming migration the claim stays the source's, with this host's instance in its window: %+v, %v", c, err)
			}
		}
		if !st.fenced {
			zombieWrites(t, src, 0xab)
		}
	}
}

// TestHookRefusesClaimElsewhere: the VM's claim records a newer deploy on
// another host (written by the front-end's prestart): the start here must
// not happen, libvirt's error shows our one line naming the winner, and the
// running instance is not touched.
func TestHookRefusesClaimElsewhere(t *testing.T) {
	e := newEnv(t, "")
	id := vmID(5)
	e.removeClaimAtCleanup(id)
	image := e.ceph.NewImage(t, "hooktest-refused")
	disk := e.disk(image, false)
	running, _ := libvirttest.Create(t, e.xml(plainName("newer-instance"), disk))
	zombieWrites(t, running, 0xaa)
	addr := e.waitWatchers(image, 1)[0]

	who := engine.Who{VM: id, Seq: 7, Host: "other-node", Source: engine.SourceFrontend, Run: "hooktest", Pool: e.ceph.Pool}
	claim := engine.Claim{VM: id, Seq: 7, Host: "other-node", Source: engine.SourceFrontend, State: engine.StateRunning}
	if err := e.engine().WriteClaim(context.Background(), who, claim); err != nil {
		t.Fatal(err)
	}

	_, err := e.tryCreate(e.xml(oneName(id), disk))
	if err == nil {
		t.Fatalf("%s started although host other-node holds deploy #7", oneName(id))
	}
	msg := err.Error()
	want := fmt.Sprintf("rbdfence: not starting %s: VM %d: deploy #7 was claimed by host other-node", oneName(id), id)
	if !strings.Contains(msg, want) || ourLines(msg) != 1 {
		t.Fatalf("libvirt's error must show our one line %q:\n%s", want, msg)
	}
	t.Logf("libvirt: %s", msg)
	if e.blocklisted(addr) {
		t.Fatal("a refused start fenced the running instance")
	}
	zombieWrites(t, running, 0xab)
	if c, err := e.engine().ReadClaim(context.Background(), e.ceph.Pool, id); err != nil || c.Host != "other-node" || c.Seq != 7 {
		t.Fatalf("the refused start changed the claim: %+v, %v", c, err)
	}
}

// TestHookCephUnreachable: the disk names no monitors (QEMU finds them in
// its <config file>) and the hook's config points at a dead monitor port.
// Fail closed (the default): `virsh create` fails with our message, in
// bounded time. With fence.fail_open the domain starts.
func TestHookCephUnreachable(t *testing.T) {
	e := newEnv(t, "")
	id := vmID(6)
	e.removeClaimAtCleanup(id)
	dead := deadPort(t)
	e.writeConfig(dead, "")
	image := e.ceph.NewImage(t, "hooktest-unreachable")
	xml := withConfigFile(t, e.xml(oneName(id), e.disk(image, false)), e.ceph.Conf)

	took, err := e.tryCreate(xml)
	if err == nil {
		t.Fatal("the domain started although the hook could not reach Ceph (fail closed)")
	}
	want := fmt.Sprintf("rbdfence: not starting %s: cannot reach Ceph monitors %s", oneName(id), dead)
	if msg := err.Error(); !strings.Contains(msg, want) || !strings.Contains(msg, "fail closed") || ourLines(msg) != 1 {
		t.Fatalf("libvirt's error must show our one line %q:\n%s", want, msg)
	}
	if took > 30*time.Second {
		t.Fatalf("the refused start took %s: the hook must be bounded by timeouts.connect (3s)", took)
	}
	t.Logf("fail closed: virsh create failed after %s: %s", took.Round(time.Millisecond), err)

	e.writeConfig(dead, "  fail_open: true\n")
	if _, err := e.tryCreate(xml); err != nil {
		t.Fatalf("with fence.fail_open the domain must start: %v", err)
	}
	zombieWrites(t, oneName(id), 0xaa)
}

// withConfigFile replaces the monitors of every RBD disk of xml by a
// ceph.conf (OpenNebula: CEPH_CONF set, CEPH_HOST empty).
func withConfigFile(t *testing.T, xml, conf string) string {
	t.Helper()
	var d libvirtxml.Domain
	if err := d.Unmarshal(xml); err != nil {
		t.Fatal(err)
	}
	for i := range d.Devices.Disks {
		n := d.Devices.Disks[i].Source.Network
		n.Hosts = nil
		n.Config = &libvirtxml.DomainDiskSourceNetworkConfig{File: conf}
	}
	out, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// deadPort returns 127.0.0.1:PORT where nothing listens.
func deadPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func waitClaim(t *testing.T, e *env, id int, ok func(*engine.Claim) bool) *engine.Claim {
	t.Helper()
	eng := e.engine()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := eng.ReadClaim(context.Background(), e.ceph.Pool, id)
		if err != nil {
			t.Fatal(err)
		}
		if c != nil && ok(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("VM %d claim: %+v", id, c)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitEvent returns the RBDFENCE_EVENT of VM id for address addr.
func waitEvent(t *testing.T, sim *onedsim.Sim, id int, addr string) map[string]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ut, _ := sim.UserTemplate(id)
		for _, a := range ut {
			if opennebula.IsEventAttr(a.Name) && a.Vector["ADDRESS"] == addr {
				return a.Vector
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s for %s in VM %d's user template; updates: %+v", opennebula.AttrEvent, addr, id, sim.Updates())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
