//go:build pacific

package disks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
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

// installReq is a host-step request as a front-end of this version sends
// it: JSON with the VM's STIME (and oned's history), read as the host reads
// it. (Written as JSON so that the same test runs against versions that
// ignore the fields.)
func installReq(t *testing.T, f map[string]any) *hoststep.Request {
	t.Helper()
	f["version"], f["run"] = hoststep.Version, run()
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	req, err := hoststep.ReadRequest(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// TestTwoInstallationsShareClaimPool (issue 18 item 4): prod and staging
// (two OpenNebula installations, or a front-end rebuilt with a fresh
// database) share one Ceph cluster and its default claim pool; each has a
// VM of the same id, each created at its own time (STIME). Prod's runs
// deploy #5, its client recorded. Staging's first deploy #0 must be
// admitted (not "older than deploy #5"), and neither it nor a later deploy
// of staging's VM may fence prod's running VM; prod's claim stays as it
// is. A claim an older rbdfence wrote (no identity) is adopted only by the
// VM oned shows it is for.
// installations are prod's and staging's disk and host of one VM id, each
// installation's VM created at its own time (STIME).
type installations struct {
	c                 *testenv.Ceph
	prodDisk, stgDisk vmdisk.Disk
	prodHost, stgHost *config.Config
}

const prodStime, stgStime = int64(1700000000), int64(1760000000)

func newInstallations(t *testing.T) *installations {
	c := testenv.StartCeph(t)
	return &installations{c: c, prodDisk: adminDisk(c, "0", c.NewImage(t, "prod")), stgDisk: adminDisk(c, "0", c.NewImage(t, "stg")),
		prodHost: hostConfig(t, c, "127.0.0.1"), stgHost: hostConfig(t, c, "192.0.2.61")}
}

func disks(d vmdisk.Disk) []vmdisk.Disk { return []vmdisk.Disk{d} }

func TestTwoInstallationsShareClaimPool(t *testing.T) {
	in := newInstallations(t)
	c, prodDisk, stgDisk, prodHost, stgHost := in.c, in.prodDisk, in.stgDisk, in.prodHost, in.stgHost
	vm := newVM()

	step(t, prodHost, installReq(t, map[string]any{"op": "start", "vm": vm, "seq": 5, "host": "kvm1", "source": "frontend", "disks": disks(prodDisk), "stime": prodStime}))
	zp := testenv.StartZombie(t, c, prodDisk.Pool+"/"+prodDisk.Name, "write")
	zp.WaitWrite(t, true, 30*time.Second)
	step(t, prodHost, installReq(t, map[string]any{"op": "record", "vm": vm, "seq": 5, "host": "kvm1", "source": "frontend", "disks": disks(prodDisk), "stime": prodStime}))

	for _, d := range []struct {
		seq  int
		host string
	}{{0, "kvm1"}, {7, "kvm2"}} {
		resp := fencer.Do(ctxT(t), stgHost, installReq(t, map[string]any{"op": "start", "vm": vm, "seq": d.seq, "host": d.host, "source": "frontend", "disks": disks(stgDisk), "stime": stgStime}))
		if !resp.OK {
			t.Fatalf("staging's deploy #%d of its VM %d on %s: %s (%s)", d.seq, vm, d.host, resp.Error, resp.Kind)
		}
		if resp.Report != nil && resp.Report.Fenced > 0 {
			t.Fatalf("staging's deploy #%d fenced: %+v", d.seq, resp.Report)
		}
	}
	notBlocklisted(t, c, addr(t, zp))
	zp.WaitWrite(t, true, 30*time.Second)
	if cl := readClaim(t, c, engine.DefaultClaimPool, vm); cl == nil || cl.Seq != 5 || cl.Host != "kvm1" || !hasAddr(cl.Addrs, addr(t, zp)) {
		t.Fatalf("prod's claim of VM %d changed: %+v", vm, cl)
	}
}

// TestOlderClaimAdoptedOnlyByItsVM (issue 18 item 4, the upgrade; issue 31
// item 2): a claim an older rbdfence wrote in the shared claim pool (no
// identity) records the client of staging's running VM on its host kvm9.
// Prod's VM of the same id (oned shows it never ran on kvm9) is deployed:
// nothing shows the old claim to be prod's VM's or another's (it could be
// prod's own from before a restore of oned's database), so the deploy is
// refused, nothing is fenced and the claim is not touched. Staging's VM
// (oned's history has that deploy on kvm9) then records its instance: the
// old claim is its own and keeps what it recorded; it now names staging's
// VM, and prod's deploy goes on, in prod's VM's own object.
func TestOlderClaimAdoptedOnlyByItsVM(t *testing.T) {
	in := newInstallations(t)
	c, prodDisk, stgDisk, prodHost, stgHost := in.c, in.prodDisk, in.stgDisk, in.prodHost, in.stgHost
	vm2 := newVM()
	zs := testenv.StartZombie(t, c, stgDisk.Pool+"/"+stgDisk.Name, "write")
	zs.WaitWrite(t, true, 30*time.Second)
	zsAddr, _ := engine.ParseAddr(zs.Addr)
	putObject(t, c, engine.DefaultClaimPool, engine.ClaimObject(vm2), map[string]any{"vm": vm2, "seq": 3, "host": "kvm9", "source": "frontend", "state": "running",
		"addrs": []string{zsAddr.String()}, "run": "old", "updated": time.Unix(stgStime+3600, 0).UTC()})
	resp := fencer.Do(ctxT(t), prodHost, installReq(t, map[string]any{"op": "start", "vm": vm2, "seq": 3, "host": "kvm2", "source": "frontend", "disks": disks(prodDisk),
		"stime": prodStime + 10, "history": []map[string]any{{"seq": 3, "host": "kvm2"}}}))
	if resp.OK || !strings.HasPrefix(resp.Error, "refused, nothing fenced: ") || !strings.Contains(resp.Error, "claim reset --vm") {
		t.Fatalf("prod's deploy of VM %d next to an older version's claim of unknown belonging: want a refusal naming claim reset, got ok=%v %s", vm2, resp.OK, resp.Error)
	}
	notBlocklisted(t, c, zsAddr.String())
	if cl := readClaim(t, c, engine.DefaultClaimPool, vm2); cl == nil || cl.Host != "kvm9" || cl.Stime != 0 {
		t.Fatalf("the older version's claim was touched: %+v", cl)
	}
	step(t, stgHost, installReq(t, map[string]any{"op": "record", "vm": vm2, "seq": 3, "host": "kvm9", "source": "frontend", "disks": disks(stgDisk),
		"stime": stgStime, "history": []map[string]any{{"seq": 3, "host": "kvm9"}}}))
	if cl := readClaim(t, c, engine.DefaultClaimPool, vm2); cl == nil || cl.Host != "kvm9" || cl.Stime != stgStime || !hasAddr(cl.Recorded(), zsAddr.String()) {
		t.Fatalf("staging's VM must adopt the older version's claim: %+v", cl)
	}
	resp = fencer.Do(ctxT(t), prodHost, installReq(t, map[string]any{"op": "start", "vm": vm2, "seq": 3, "host": "kvm2", "source": "frontend", "disks": disks(prodDisk),
		"stime": prodStime + 10, "history": []map[string]any{{"seq": 3, "host": "kvm2"}}}))
	if !resp.OK {
		t.Fatalf("prod's deploy of VM %d once staging's VM adopted its claim: %s (%s)", vm2, resp.Error, resp.Kind)
	}
	notBlocklisted(t, c, zsAddr.String())
	zs.WaitWrite(t, true, 30*time.Second)
}
