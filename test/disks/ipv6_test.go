//go:build pacific

package disks

import (
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// A cluster on the IPv6 loopback: the VM's clients there are found (check),
// recorded (record on their host, ::1) and fenced by a start elsewhere, the
// recorded one too when it is no longer visible; the blocklist entries are
// exactly the addresses Ceph prints.
func TestIPv6ClientsFoundRecordedFenced(t *testing.T) {
	c := ipv6Ceph(t)
	if !strings.HasPrefix(c.Mon, "[::1]:") {
		t.Fatalf("IPv6 cluster monitor is %s, want [::1]:PORT", c.Mon)
	}
	a, b := c.NewImage(t, "v6-a"), c.NewImage(t, "v6-b")
	disks := []vmdisk.Disk{disk(t, c, "0", a), disk(t, c, "1", b)}
	za := testenv.StartZombie(t, c, a, "write")
	zb := testenv.StartZombie(t, c, b, "idle")
	za.WaitWrite(t, true, 30*time.Second)
	if !strings.Contains(za.Addr, "[::1]") || !strings.Contains(zb.Addr, "[::1]") {
		t.Fatalf("the clients are not IPv6: %s, %s", za.Addr, zb.Addr)
	}
	vm := newVM()
	here := hostConfig(t, c, "::1")

	chk := step(t, here, &hoststep.Request{Op: hoststep.OpCheck, VM: vm, Seq: 1, Host: "h1", Run: run(), Source: "frontend", Disks: disks})
	found := map[string]bool{}
	for _, im := range chk.Report.Images {
		for _, cl := range im.Clients {
			found[cl.Address] = true
		}
	}
	if !found[addr(t, za)] || !found[addr(t, zb)] {
		t.Fatalf("check did not find the IPv6 clients %s and %s: %+v", addr(t, za), addr(t, zb), chk.Report.Images)
	}

	rec := step(t, here, &hoststep.Request{Op: hoststep.OpRecord, VM: vm, Seq: 1, Host: "h1", Run: run(), Source: "frontend", Disks: disks})
	if rec.Claim == nil || !hasAddr(rec.Claim.Addrs, addr(t, za)) || !hasAddr(rec.Claim.Addrs, addr(t, zb)) {
		t.Fatalf("record did not record the IPv6 clients %s and %s: %+v", addr(t, za), addr(t, zb), rec.Claim)
	}

	bAddr := addr(t, zb)
	zb.Stop() // no longer visible: only the claim knows it
	there := hostConfig(t, c, "2001:db8::7")
	st := step(t, there, &hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 2, Host: "h2", Run: run(), Source: "frontend", Disks: disks})
	if st.Report.Fenced < 2 {
		t.Fatalf("start fenced %d clients, want the visible and the recorded one: %+v", st.Report.Fenced, st.Report)
	}
	blocklisted(t, c, addr(t, za))
	blocklisted(t, c, bAddr)
	za.WaitWrite(t, false, 30*time.Second)
}
