//go:build pacific

package disks

import (
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// The case: a VM installed from a shared ISO (read-only CD-ROM) with
// a shareable disk too, its host also running other VMs' clients of both.
// record keeps only the VM's own writer; after "power off, detach the
// CD-ROM, resume" the start fences nothing of the other VMs.
func TestRecordOnlyOwnWriters(t *testing.T) {
	c := testenv.StartCeph(t)
	own, iso, shared := c.NewImage(t, "own"), c.NewImage(t, "iso"), c.NewImage(t, "shared")
	cd := disk(t, c, "1", iso)
	cd.ReadOnly = true
	sh := disk(t, c, "2", shared)
	sh.Shareable = true
	disks := []vmdisk.Disk{disk(t, c, "0", own), cd, sh}

	mine := testenv.StartZombie(t, c, own, "write")
	otherISO := testenv.StartZombie(t, c, iso, "idle")       // another VM's CD-ROM: QEMU opens it read-write
	otherShared := testenv.StartZombie(t, c, shared, "idle") // another VM's shareable disk
	mine.WaitWrite(t, true, 30*time.Second)

	vm := newVM()
	here := hostConfig(t, c, "127.0.0.1")
	rec := step(t, here, &hoststep.Request{Op: hoststep.OpRecord, VM: vm, Seq: 1, Host: "h1", Run: run(), Source: "frontend", Disks: disks})
	if rec.Claim == nil || len(rec.Claim.Addrs) != 1 || rec.Claim.Addrs[0].String() != addr(t, mine) {
		t.Fatalf("record kept %v, want only the VM's own writer %s", rec.Claim, addr(t, mine))
	}
	if got := rec.Claim.Images[own]; len(got) != 1 || got[0].String() != addr(t, mine) {
		t.Fatalf("record per image: %v, want %s: [%s]", rec.Claim.Images, own, addr(t, mine))
	}

	// Power off (the VM's client goes), detach the CD-ROM, resume here.
	mine.Stop()
	step(t, here, &hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 2, Host: "h1", Run: run(), Source: "frontend", Disks: []vmdisk.Disk{disks[0], disks[2]}})
	notBlocklisted(t, c, addr(t, otherISO))
	notBlocklisted(t, c, addr(t, otherShared))
	blocklisted(t, c, addr(t, mine)) // the previous instance's recorded writer
}

// A persistent image carries its last writer: VM Y's recorded client of P
// (no longer visible: its host is cut off) is fenced when P is started in
// VM X, whose own claim never saw it.
func TestRecordedWriterFollowsImage(t *testing.T) {
	c := testenv.StartCeph(t)
	p := c.NewImage(t, "persistent")
	y, x := newVM(), newVM()
	zy := testenv.StartZombie(t, c, p, "write")
	zy.WaitWrite(t, true, 30*time.Second)
	hostY := hostConfig(t, c, "127.0.0.1")
	step(t, hostY, &hoststep.Request{Op: hoststep.OpRecord, VM: y, Seq: 1, Host: "hy", Run: run(), Source: "frontend", Disks: []vmdisk.Disk{disk(t, c, "0", p)}})
	yAddr := addr(t, zy)
	zy.Stop()

	hostX := hostConfig(t, c, "192.0.2.9")
	st := step(t, hostX, &hoststep.Request{Op: hoststep.OpStart, VM: x, Seq: 1, Host: "hx", Run: run(), Source: "frontend", Disks: []vmdisk.Disk{disk(t, c, "0", p)}})
	blocklisted(t, c, yAddr)
	if len(st.Report.Recorded) != 1 || st.Report.Recorded[0].Address != yAddr {
		t.Fatalf("start of VM %d reported recorded %+v, want Y's writer %s", x, st.Report.Recorded, yAddr)
	}
}

// A detached disk's recorded writer is not lost: after a record of the
// remaining disks (the disk detached), a start elsewhere still fences the
// detached disk's last writer, which may still run on a cut-off host.
func TestDetachedDiskKeepsRecord(t *testing.T) {
	c := testenv.StartCeph(t)
	a, b := c.NewImage(t, "keep-a"), c.NewImage(t, "keep-b")
	da, db := disk(t, c, "0", a), disk(t, c, "1", b)
	za := testenv.StartZombie(t, c, a, "write")
	zb := testenv.StartZombie(t, c, b, "write")
	za.WaitWrite(t, true, 30*time.Second)
	vm := newVM()
	here := hostConfig(t, c, "127.0.0.1")
	step(t, here, &hoststep.Request{Op: hoststep.OpRecord, VM: vm, Seq: 1, Host: "h1", Run: run(), Source: "frontend", Disks: []vmdisk.Disk{da, db}})
	// b is detached; a record of the VM's remaining disk follows.
	bAddr := addr(t, zb)
	zb.Stop()
	step(t, here, &hoststep.Request{Op: hoststep.OpRecord, VM: vm, Seq: 1, Host: "h1", Run: run(), Source: "frontend", Disks: []vmdisk.Disk{da}})
	there := hostConfig(t, c, "192.0.2.12")
	step(t, there, &hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 2, Host: "h2", Run: run(), Source: "frontend", Disks: []vmdisk.Disk{da}})
	blocklisted(t, c, addr(t, za))
	blocklisted(t, c, bAddr)
}
