//go:build pacific

package disks

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/testenv"
)

const xtraPool = "rbdfence-xtra"

// xtraImage creates an image in a second pool of c (created once), and
// returns the disk as client.admin sees it (client.libvirt's caps name pool
// one only).
func xtraImage(t *testing.T, c *testenv.Ceph, id string) vmdisk.Disk {
	t.Helper()
	if out, _ := exec.Command("ceph", "-c", c.AdminConf, "osd", "pool", "ls").Output(); !strings.Contains(string(out), xtraPool+"\n") {
		c.Admin(t, "ceph", "osd", "pool", "create", xtraPool, "8", "8")
		c.Admin(t, "rbd", "pool", "init", xtraPool)
	}
	name := fmt.Sprintf("x-%d", newVM())
	c.Admin(t, "rbd", "create", xtraPool+"/"+name, "--size", "16M")
	t.Cleanup(func() { _ = exec.Command("rbd", "-c", c.AdminConf, "rm", "--no-progress", xtraPool+"/"+name).Run() })
	return adminDisk(c, id, xtraPool+"/"+name)
}

func adminDisk(c *testenv.Ceph, id, spec string) vmdisk.Disk {
	pool, _, name, _ := vmdisk.ParseImage(spec)
	return vmdisk.Disk{ID: id, Pool: pool, Name: name, Monitors: []string{c.Mon}, User: "admin", Keyring: c.AdminKeyring, Conf: c.Conf}
}

// The claim does not move with the disks: after a start and record with
// the disks in one order, the same deploy started elsewhere with the disks
// reordered (or the first one detached) finds the claim and is refused.
func TestClaimStaysWhenDisksReorder(t *testing.T) {
	c := testenv.StartCeph(t)
	x := xtraImage(t, c, "0")
	o := adminDisk(c, "1", c.NewImage(t, "loc"))
	vm := newVM()
	z := testenv.StartZombie(t, c, o.Pool+"/"+o.Name, "write")
	z.WaitWrite(t, true, 30*time.Second)
	h1 := hostConfig(t, c, "127.0.0.1")
	step(t, h1, &hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 3, Host: "h1", Run: run(), Source: "frontend", Disks: []vmdisk.Disk{x}})
	step(t, h1, &hoststep.Request{Op: hoststep.OpRecord, VM: vm, Seq: 3, Host: "h1", Run: run(), Source: "frontend", Disks: []vmdisk.Disk{x, o}})
	h2 := hostConfig(t, c, "192.0.2.10")
	resp := fencer.Do(ctxT(t), h2, &hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 3, Host: "h2", Run: run(), Source: "frontend", Disks: []vmdisk.Disk{o, x}})
	if resp.OK || resp.Kind != outcome.Refused {
		t.Fatalf("the same deploy on another host with the disks reordered was not refused: ok=%v kind=%s error=%s", resp.OK, resp.Kind, resp.Error)
	}
	notBlocklisted(t, c, addr(t, z))
	if cl := readClaim(t, c, engine.DefaultClaimPool, vm); cl == nil || cl.Host != "h1" {
		t.Fatalf("claim of VM %d is not in pool %s: %+v", vm, engine.DefaultClaimPool, cl)
	}
}

// A claim an older version kept in the first disk's pool moves to the claim
// pool at the first step, with its history; the old copy is emptied.
func TestLegacyClaimMoved(t *testing.T) {
	c := testenv.StartCeph(t)
	x := xtraImage(t, c, "0")
	vm := newVM()
	legacy := engine.Claim{VM: vm, Seq: 5, Host: "h1", Source: "frontend", State: "running", Run: "old", Updated: time.Now().UTC()}
	putObject(t, c, xtraPool, engine.ClaimObject(vm), legacy)

	h2 := hostConfig(t, c, "192.0.2.11")
	resp := fencer.Do(ctxT(t), h2, &hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 4, Host: "h2", Run: run(), Source: "frontend", Disks: []vmdisk.Disk{x}})
	if resp.OK || resp.Kind != outcome.Refused || !strings.Contains(resp.Error, "#5") {
		t.Fatalf("an older deploy than the moved claim's was not refused: ok=%v kind=%s error=%s", resp.OK, resp.Kind, resp.Error)
	}
	cl := readClaim(t, c, engine.DefaultClaimPool, vm)
	if cl == nil || cl.Seq != 5 || cl.Host != "h1" {
		t.Fatalf("claim not moved to pool %s: %+v", engine.DefaultClaimPool, cl)
	}
	if old := readClaim(t, c, xtraPool, vm); old != nil {
		t.Fatalf("legacy copy in %s not emptied: %+v", xtraPool, old)
	}
}
