package frontend_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// TestHookKnowsItsHostByAddress: OpenNebula may name a host differently
// from the name its libvirt hook uses (an IP, an FQDN). The front-end's
// claim records the address Ceph sees for the host's clients, so the hook's
// start on that host continues the deploy, and on another host it is refused.
func TestHookKnowsItsHostByAddress(t *testing.T) {
	f := setup(t)
	vm, specs := f.newVM(f.hs.A.Name, 2, "persistent")
	if r := f.deployVM(vm, 2, f.hs.A.Name, specs); r.code != 0 {
		t.Fatalf("deploy: %d\n%s", r.code, r.stderr)
	}
	c := f.claim(vm)
	if len(c.HostAddrs) != 1 || c.HostAddrs[0].String() != f.hs.A.IP {
		t.Fatalf("the claim must record host A's Ceph address %s: %+v", f.hs.A.IP, c)
	}
	pool, name, _ := strings.Cut(specs[0].image, "/")
	hookStart := func(on string) hoststep.Response {
		req, _ := json.Marshal(hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: -1, Host: "kvm-node-with-another-name", Run: "hook-" + on,
			Source: engine.SourceHook, Disks: []vmdisk.Disk{{ID: "0", Pool: pool, Name: name}}})
		h := f.hs.A
		if on == "b" {
			h = f.hs.B
		}
		out, stderr, _ := f.hs.SSH(t, h, string(req), filepath.Join(f.remotes, "rbdfence/rbdfence-host"), "host", "--config", f.path("host.yaml"))
		var resp hoststep.Response
		if err := json.Unmarshal([]byte(out), &resp); err != nil {
			t.Fatalf("host step on %s: %v\n%s%s", on, err, out, stderr)
		}
		return resp
	}
	// After the whole deploy (its instance recorded, the claim running), a
	// start on A is a copy started by hand: refused as on the claim's own
	// host (StartedAgainError fires only there), so A is known by address.
	if resp := hookStart("a"); resp.OK || resp.Kind != outcome.Refused || !strings.Contains(resp.Error, "deploy #2 already started on kvm-node-with-another-name") {
		t.Fatalf("the hook on host A after the deploy must refuse a copy started by hand: %+v", resp)
	}
	// As prestart leaves the claim before libvirt's prepare (starting):
	// the hook on A continues deploy #2.
	c.State, c.Addrs, c.Images = engine.StateStarting, nil, nil
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	starting := f.path("claim.starting")
	f.write(starting, string(b), 0o644)
	f.ceph.Admin(t, "rados", "-p", "one", "put", engine.ClaimObject(vm), starting)
	if resp := hookStart("a"); !resp.OK || resp.Claim == nil || resp.Claim.Host != f.hs.A.Name || resp.Claim.Seq != 2 {
		t.Fatalf("the hook on host A (another name, same address) must continue deploy #2: %+v", resp)
	}
	if resp := hookStart("b"); resp.OK || resp.Kind != outcome.Refused || !strings.Contains(resp.Error, f.hs.A.Name) {
		t.Fatalf("the hook on host B must be refused naming %s: %+v", f.hs.A.Name, resp)
	}
}
