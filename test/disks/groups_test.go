//go:build pacific

package disks

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/hook"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// twoClusterVM is a VM with disk A in the default cluster and disk B in a
// second real cluster, each written by a librbd client on this host.
type twoClusterVM struct {
	c1, c2 *testenv.Ceph
	vm     int
	disks  []vmdisk.Disk
	za, zb *testenv.Zombie
}

func newTwoClusterVM(t *testing.T) *twoClusterVM {
	t.Helper()
	v := &twoClusterVM{c1: testenv.StartCeph(t), c2: secondCeph(t), vm: newVM()}
	a, b := v.c1.NewImage(t, "grp-a"), v.c2.NewImage(t, "grp-b")
	v.disks = []vmdisk.Disk{disk(t, v.c1, "0", a), disk(t, v.c2, "1", b)}
	v.za = testenv.StartZombie(t, v.c1, a, "write")
	v.zb = testenv.StartZombie(t, v.c2, b, "write")
	v.za.WaitWrite(t, true, 30*time.Second)
	v.zb.WaitWrite(t, true, 30*time.Second)
	return v
}

func step(t *testing.T, c *config.Config, req *hoststep.Request) *hoststep.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	resp := fencer.Do(ctx, c, req)
	if !resp.OK {
		t.Fatalf("%s: %s (%s)", req.Op, resp.Error, resp.Kind)
	}
	return resp
}

// A failed live migration whose copy on dst writes disks in two clusters:
// failmigrate on dst, with the source's libvirt's word (relayed by the
// front-end) that one-N runs there with no job, fences the copy's clients
// in both.
func TestFailmigrateFencesEveryCluster(t *testing.T) {
	v := newTwoClusterVM(t)
	cfg := hostConfig(t, v.c1, "127.0.0.1") // the copy runs here, on dst
	src := &engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobNone, JobSaid: "Job type: None"}
	step(t, cfg, &hoststep.Request{Op: hoststep.OpFailmigrate, VM: v.vm, Seq: 1, Host: "dst", Src: "src", Dst: "dst",
		Run: run(), Source: "frontend", Disks: v.disks, SrcDomain: src})
	blocklisted(t, v.c1, addr(t, v.za))
	blocklisted(t, v.c2, addr(t, v.zb))
	v.zb.WaitWrite(t, false, 30*time.Second)
}

// A live migration that succeeded: postmigrate on dst fences the source's
// lock owners in both clusters.
func TestPostmigrateFencesEveryCluster(t *testing.T) {
	v := newTwoClusterVM(t)
	cfg := hostConfig(t, v.c1, "192.0.2.7") // dst; the writers here play src
	step(t, cfg, &hoststep.Request{Op: hoststep.OpPostmigrate, VM: v.vm, Seq: 1, Host: "dst", Src: "src", Dst: "dst",
		Run: run(), Source: "frontend", Disks: v.disks})
	blocklisted(t, v.c1, addr(t, v.za))
	blocklisted(t, v.c2, addr(t, v.zb))
	v.zb.WaitWrite(t, false, 30*time.Second)
}

// record keeps the instance's clients in both clusters: a later start on
// another host fences the second cluster's client even when it is no longer
// visible on the image.
func TestRecordEveryCluster(t *testing.T) {
	v := newTwoClusterVM(t)
	here := hostConfig(t, v.c1, "127.0.0.1")
	resp := step(t, here, &hoststep.Request{Op: hoststep.OpRecord, VM: v.vm, Seq: 1, Host: "h1", Run: run(), Source: "frontend", Disks: v.disks})
	if resp.Claim == nil || !hasAddr(resp.Claim.Addrs, addr(t, v.zb)) || !hasAddr(resp.Claim.Addrs, addr(t, v.za)) {
		t.Fatalf("record did not report both clients %s and %s: %+v", addr(t, v.za), addr(t, v.zb), resp.Claim)
	}
	// The instance's client of B closes the image (it is not visible any
	// more) but its address is recorded: the start elsewhere fences it.
	bAddr := addr(t, v.zb)
	v.zb.Stop()
	there := hostConfig(t, v.c1, "192.0.2.8")
	step(t, there, &hoststep.Request{Op: hoststep.OpStart, VM: v.vm, Seq: 2, Host: "h2", Run: run(), Source: "frontend", Disks: v.disks})
	blocklisted(t, v.c1, addr(t, v.za))
	blocklisted(t, v.c2, bAddr)
}

// TestLiveMigrationEveryCluster (issue 18 item 9): VM with a disk in each
// of two clusters runs deploy #5 on src; the front-end's premigrate opens
// the handover in both clusters (each claim's window has its own open
// time). On dst the hook accepts the migration at `migrate begin` and keeps
// the answer's window in its mark; the `prepare` and `started` that follow
// carry it. Both must be the handover in both clusters (nothing fenced,
// the running source kept), each cluster's bound to its own window.
func TestLiveMigrationEveryCluster(t *testing.T) {
	c1, c2 := testenv.StartCeph(t), secondCeph(t)
	vm := newVM()
	a, b := c1.NewImage(t, "mig-a"), c2.NewImage(t, "mig-b")
	disks := []vmdisk.Disk{disk(t, c1, "0", a), disk(t, c2, "1", b)}
	src := hostConfig(t, c1, "127.0.0.1") // the source's writers run here
	dst := hostConfig(t, c1, "192.0.2.2")
	step(t, src, &hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 5, Host: "src", Run: run(), Source: "frontend", Disks: disks})
	za, zb := testenv.StartZombie(t, c1, a, "write"), testenv.StartZombie(t, c2, b, "write")
	za.WaitWrite(t, true, 30*time.Second)
	zb.WaitWrite(t, true, 30*time.Second)
	step(t, src, &hoststep.Request{Op: hoststep.OpRecord, VM: vm, Seq: -1, Host: "src", Run: run(), Source: "hook", Disks: disks})
	step(t, src, &hoststep.Request{Op: hoststep.OpPremigrate, VM: vm, Seq: 6, Host: "src", Src: "src", Dst: "dst", Run: run(), Source: "frontend", Disks: disks})
	w1, w2 := readClaim(t, c1, "one", vm).Window, readClaim(t, c2, "one", vm).Window
	if w1 == nil || w2 == nil {
		t.Fatalf("premigrate must open the window in both clusters: %+v %+v", w1, w2)
	}

	// migrate begin on dst: the hook keeps the answer's window in its mark.
	in := step(t, dst, &hoststep.Request{Op: hoststep.OpIncoming, VM: vm, Seq: -1, Host: "dst", Run: run(), Source: "hook", Disks: disks})
	marks := hook.Marks{Dir: filepath.Join(t.TempDir(), hook.MarkDir), Window: 10 * time.Minute}
	if in.Claim == nil || in.Claim.Window == nil {
		t.Fatalf("migrate begin: no window in the answer: %+v", in)
	}
	if err := marks.Set("one-x", run(), in.Claim.Window); err != nil {
		t.Fatal(err)
	}
	fresh, mk, err := marks.Fresh("one-x")
	if err != nil || !fresh {
		t.Fatalf("mark: %v %v", fresh, err)
	}
	for _, op := range []string{hoststep.OpStart, hoststep.OpRecord} {
		resp := step(t, dst, &hoststep.Request{Op: op, VM: vm, Seq: -1, Host: "dst", Run: run(), Source: "hook", Disks: disks, Incoming: mk.Window})
		if op == hoststep.OpStart && !resp.Handover {
			t.Fatalf("prepare on dst must be the handover in both clusters: %+v", resp)
		}
		if resp.Report != nil && resp.Report.Fenced > 0 {
			t.Fatalf("%s on dst fenced: %+v", op, resp.Report)
		}
	}
	notBlocklisted(t, c1, addr(t, za))
	notBlocklisted(t, c2, addr(t, zb))
	za.WaitWrite(t, true, 30*time.Second)
	zb.WaitWrite(t, true, 30*time.Second)
	if cl := readClaim(t, c2, "one", vm); cl == nil || cl.Window == nil || !cl.Window.Same(w2) || cl.Host != "src" {
		t.Fatalf("the second cluster's claim must keep its own window and the source: %+v", cl)
	}
}
