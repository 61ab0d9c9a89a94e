//go:build pacific

package disks

import (
	"context"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/fencer"
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
// failmigrate on dst fences the copy's clients in both.
func TestFailmigrateFencesEveryCluster(t *testing.T) {
	v := newTwoClusterVM(t)
	cfg := hostConfig(t, v.c1, "127.0.0.1") // the copy runs here, on dst
	step(t, cfg, &hoststep.Request{Op: hoststep.OpFailmigrate, VM: v.vm, Seq: 1, Host: "dst", Src: "src", Dst: "dst",
		Run: run(), Source: "frontend", Disks: v.disks})
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
