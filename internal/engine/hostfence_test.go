package engine_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/engine/enginetest"
)

// hostVM starts VM vm (deploy seq) on host at ip through the engine and
// records its instance: one client per image, as QEMU opens them.
func hostVM(t *testing.T, f *enginetest.Fake, e *engine.Engine, vm, seq int, host, ip string, imgs ...engine.Image) []engine.Addr {
	t.Helper()
	// Instance: the deployment file's deployment_time, 1000+vm here.
	w := engine.Who{VM: vm, Seq: seq, Host: host, Source: engine.SourceFrontend, Run: "r", Pool: "one", Instance: int64(1000 + vm)}
	if _, err := e.Start(ctx, w, imgs, false); err != nil {
		t.Fatal(err)
	}
	var out []engine.Addr
	for _, im := range imgs {
		out = append(out, f.Open(im, ip, true))
	}
	if _, err := e.Record(ctx, w, imgs, engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{netip.MustParseAddr(ip)}}); err != nil {
		t.Fatal(err)
	}
	return out
}

func ipsOf(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestFenceHost(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, f *enginetest.Fake, e *engine.Engine)
	}{
		{"recorded and visible clients on the host are fenced, nothing elsewhere", func(t *testing.T, f *enginetest.Fake, e *engine.Engine) {
			a0, a1, b0 := img("one-1"), img("one-2"), img("one-3")
			for _, im := range []engine.Image{a0, a1, b0} {
				f.CreateImage(im)
			}
			shared := engine.Image{Pool: "one", Name: "one-shared", Shareable: true}
			f.CreateImage(shared)
			inst := hostVM(t, f, e, 10, 3, "hostA", "10.0.0.1", a0, a1)
			f.Hide(inst[0]) // cut off from Ceph: only the claim knows it
			other := hostVM(t, f, e, 11, 5, "hostB", "10.0.0.2", b0)
			extra := f.Open(a1, "10.0.0.1", false)      // a second client on the host (e.g. a qemu-img)
			sharedA := f.Open(shared, "10.0.0.1", true) // the failed host's writer of a shareable disk
			sharedB := f.Open(shared, "10.0.0.2", true) // a live VM on hostB uses it too
			res := e.FenceHost(ctx, engine.HostFence{Host: "hostA", HostIPs: ipsOf("10.0.0.1"), VMs: []engine.HostVM{{VM: 10, Seq: 3, Images: []engine.Image{a0, a1, shared}}}, Pool: "one", Run: "hf"})
			if err := res.Err(); err != nil {
				t.Fatal(err)
			}
			for _, a := range []engine.Addr{inst[0], inst[1], extra, sharedA} {
				if _, ok := f.Blocklisted(a); !ok {
					t.Errorf("%s on the failed host is not blocklisted", a)
				}
			}
			for _, a := range []engine.Addr{other[0], sharedB} {
				if _, ok := f.Blocklisted(a); ok {
					t.Errorf("%s on hostB was blocklisted", a)
				}
			}
			if len(res.HostIPs) != 1 || res.HostIPs[0].String() != "10.0.0.1" || res.Fenced != 4 {
				t.Fatalf("result: ips %v fenced %d", res.HostIPs, res.Fenced)
			}
			c := res.VMs[0].Claim
			// The shareable disk's client was fenced on the failed host but
			// is not the instance's: not recorded.
			if c == nil || c.State != engine.StateFenced || c.Host != "hostA" || c.Seq != 3 || len(c.Addrs) != 3 || c.Window != nil || c.Instance != 1010 {
				t.Fatalf("claim after the fence: %+v", c)
			}
			if slices.Contains(c.Addrs, sharedA) || len(c.Images[shared.String()]) != 0 {
				t.Fatalf("the shareable disk's client %s is recorded as the instance's: %+v", sharedA, c)
			}
			if len(res.VMs[0].Report.Recorded) != 1 || res.VMs[0].Report.Recorded[0].Address != inst[0].String() {
				t.Fatalf("recorded: %+v", res.VMs[0].Report.Recorded)
			}
			// The reschedule (deploy 4 on hostB) is admitted and fences the
			// recorded instances again (they stay fenced).
			r, err := e.Start(ctx, engine.Who{VM: 10, Seq: 4, Host: "hostB", Source: engine.SourceFrontend, Run: "resched", Pool: "one"}, []engine.Image{a0, a1}, false)
			if err != nil {
				t.Fatalf("the reschedule is refused: %v", err)
			}
			if len(r.Report.Recorded) != 3 || r.Claim.Host != "hostB" {
				t.Fatalf("reschedule: recorded %+v claim %+v", r.Report.Recorded, r.Claim)
			}
		}},
		{"a claim on another host is left alone", func(t *testing.T, f *enginetest.Fake, e *engine.Engine) {
			im := img("one-5")
			f.CreateImage(im)
			// VM 12 was placed on hostA but already runs on hostB (a race
			// with a reschedule): its instance there is never fenced.
			inst := hostVM(t, f, e, 12, 7, "hostB", "10.0.0.2", im)
			f.Hide(inst[0])
			before, _ := e.ReadClaim(ctx, "one", 12)
			res := e.FenceHost(ctx, engine.HostFence{Host: "hostA", HostIPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, VMs: []engine.HostVM{{VM: 12, Seq: 6, Images: []engine.Image{im}}}, Pool: "one", Run: "hf"})
			if err := res.Err(); err != nil {
				t.Fatal(err)
			}
			if _, ok := f.Blocklisted(inst[0]); ok {
				t.Fatal("the instance on hostB was fenced")
			}
			after, _ := e.ReadClaim(ctx, "one", 12)
			if res.VMs[0].Elsewhere != "hostB" || res.VMs[0].Claim != nil || after.Run != before.Run || after.State != engine.StateRunning {
				t.Fatalf("result %+v, claim %+v", res.VMs[0], after)
			}
		}},
		{"no address known: incomplete", func(t *testing.T, f *enginetest.Fake, e *engine.Engine) {
			im := img("one-6")
			f.CreateImage(im)
			z := f.Open(im, "10.0.0.1", true)
			res := e.FenceHost(ctx, engine.HostFence{Host: "hostA", VMs: []engine.HostVM{{VM: 13, Seq: 1, Images: []engine.Image{im}}}, Pool: "one", Run: "hf"})
			if err := res.Err(); err == nil || !strings.Contains(err.Error(), "--host-addr") {
				t.Fatalf("want an incomplete fence naming --host-addr, got %v", err)
			}
			if _, ok := f.Blocklisted(z); ok {
				t.Fatal("fenced a client without knowing the host's address")
			}
			// With the address: fenced, and a claim is written.
			res = e.FenceHost(ctx, engine.HostFence{Host: "hostA", HostIPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, VMs: []engine.HostVM{{VM: 13, Seq: 1, Images: []engine.Image{im}}}, Pool: "one", Run: "hf"})
			if _, ok := f.Blocklisted(z); !ok || res.Err() != nil || res.VMs[0].Claim == nil || res.VMs[0].Claim.Addrs[0] != z {
				t.Fatalf("with --host-addr: %v %+v", res.Err(), res.VMs[0])
			}
		}},
		{"recorded addresses never widen the scope (issue 18 item 3)", func(t *testing.T, f *enginetest.Fake, e *engine.Engine) {
			// VM 42 ran on h1 (root and data disks), the data disk was
			// detached, VM 42 live-migrated to h2 and hot-attached a
			// shareable disk that VM 43 on h1 uses too. Then h2 fails. Its
			// claim still records the detached disk's client on h1.
			root, data, shared := img("one-42-root"), img("one-42-data"), engine.Image{Pool: "one", Name: "one-shared-43", Shareable: true}
			for _, im := range []engine.Image{root, data, shared} {
				f.CreateImage(im)
			}
			h1, h2 := ipsOf("10.0.0.1"), ipsOf("10.0.0.2")
			on := func(host string, ips []netip.Addr, run string) engine.Who {
				return engine.Who{VM: 42, Seq: 1, Host: host, Source: engine.SourceFrontend, Run: run, Pool: "one", HostIPs: ips, Instance: 4242}
			}
			if _, err := e.Start(ctx, on("h1", h1, "start"), []engine.Image{root, data}, false); err != nil {
				t.Fatal(err)
			}
			rootH1, dataH1 := f.Open(root, "10.0.0.1", true), f.Open(data, "10.0.0.1", true)
			if _, err := e.Record(ctx, on("h1", h1, "rec"), []engine.Image{root, data}, engine.Scope{Kind: engine.ScopeOnHost, HostIPs: h1}); err != nil {
				t.Fatal(err)
			}
			f.Hide(dataH1) // detached on h1
			if _, err := e.OpenWindow(ctx, on("h1", h1, "pre"), "h1", "h2", 3600e9); err != nil {
				t.Fatal(err)
			}
			rootH2 := f.Open(root, "10.0.0.2", true)
			f.Hide(rootH1) // the source QEMU exits
			post := on("h2", h2, "post")
			post.Seq = 2
			if _, err := e.CloseWindow(ctx, post, []engine.Image{root}, "h1", "h2", h2, engine.Migrated); err != nil {
				t.Fatal(err)
			}
			att := on("h2", h2, "attach")
			att.Seq = 2
			if _, err := e.Attach(ctx, att, []engine.Image{shared}); err != nil {
				t.Fatal(err)
			}
			sharedH2 := f.Open(shared, "10.0.0.2", true)
			sharedH1 := f.Open(shared, "10.0.0.1", true) // VM 43, healthy on h1
			before, _ := e.ReadClaim(ctx, "one", 42)
			if !slices.Contains(before.Addrs, dataH1) || before.Host != "h2" {
				t.Fatalf("the scenario needs a claim on h2 that records h1's %s: %+v", dataH1, before)
			}

			// h2's name does not resolve: its identity is what its claims
			// record as its own.
			res := e.FenceHost(ctx, engine.HostFence{Host: "h2", VMs: []engine.HostVM{{VM: 42, Seq: 2, Images: []engine.Image{root, shared}}}, Pool: "one", Run: "hf"})
			if err := res.Err(); err != nil {
				t.Fatal(err)
			}
			if len(res.HostIPs) != 1 || res.HostIPs[0] != h2[0] {
				t.Fatalf("scope %v, want h2's own address only", res.HostIPs)
			}
			if _, ok := f.Blocklisted(sharedH1); ok {
				t.Fatalf("VM 43's client %s on the healthy h1 was blocklisted", sharedH1)
			}
			for _, a := range []engine.Addr{rootH2, sharedH2, dataH1} {
				if _, ok := f.Blocklisted(a); !ok {
					t.Errorf("%s not blocklisted (h2's clients, and the recorded address as an exact one)", a)
				}
			}
			c := res.VMs[0].Claim
			if c == nil || slices.Contains(c.Addrs, sharedH2) || !slices.Contains(c.Addrs, dataH1) || !slices.Contains(c.Addrs, rootH2) {
				t.Fatalf("claim after the fence: %+v", c)
			}
		}},
		{"a recorded entry of a shareable image is not fenced", func(t *testing.T, f *enginetest.Fake, e *engine.Engine) {
			// A claim an older fence-host marked: it recorded the failed
			// host's client of a shareable image as the instance's.
			root, shared := img("one-50"), engine.Image{Pool: "one", Name: "one-51", Shareable: true}
			f.CreateImage(root)
			f.CreateImage(shared)
			mine := f.Open(root, "10.0.0.1", false)
			theirs := f.Open(shared, "10.0.0.3", true) // another VM's, elsewhere now
			f.Hide(mine)
			w := engine.Who{VM: 50, Seq: 1, Host: "hostA", Source: engine.SourceHostFence, Run: "old", Pool: "one"}
			if err := e.WriteClaim(ctx, w, engine.Claim{VM: 50, Seq: 1, Host: "hostA", State: engine.StateFenced, Source: engine.SourceHostFence,
				Addrs: []engine.Addr{mine, theirs}, Images: map[string][]engine.Addr{root.String(): {mine}, shared.String(): {theirs}}}); err != nil {
				t.Fatal(err)
			}
			res := e.FenceHost(ctx, engine.HostFence{Host: "hostA", HostIPs: ipsOf("10.0.0.1"), VMs: []engine.HostVM{{VM: 50, Seq: 1, Images: []engine.Image{root, shared}}}, Pool: "one", Run: "hf"})
			if err := res.Err(); err != nil {
				t.Fatal(err)
			}
			if _, ok := f.Blocklisted(theirs); ok {
				t.Fatalf("the shareable image's recorded client %s was fenced", theirs)
			}
			if _, ok := f.Blocklisted(mine); !ok {
				t.Fatalf("the recorded instance %s was not fenced", mine)
			}
		}},
		{"an open migration window is closed", func(t *testing.T, f *enginetest.Fake, e *engine.Engine) {
			im := img("one-8")
			f.CreateImage(im)
			inst := hostVM(t, f, e, 14, 2, "hostA", "10.0.0.1", im)
			w := engine.Who{VM: 14, Seq: 2, Host: "hostA", Source: engine.SourceFrontend, Run: "pre", Pool: "one"}
			if _, err := e.OpenWindow(ctx, w, "hostA", "hostB", 3600e9); err != nil {
				t.Fatal(err)
			}
			res := e.FenceHost(ctx, engine.HostFence{Host: "hostA", HostIPs: ipsOf("10.0.0.1"), VMs: []engine.HostVM{{VM: 14, Seq: 2, Images: []engine.Image{im}}}, Pool: "one", Run: "hf"})
			if res.Err() != nil || res.VMs[0].Claim.Window != nil {
				t.Fatalf("%v %+v", res.Err(), res.VMs[0].Claim)
			}
			if _, ok := f.Blocklisted(inst[0]); !ok {
				t.Fatal("not fenced")
			}
			// A start on hostB now fences (no handover).
			r, err := e.Start(ctx, engine.Who{VM: 14, Seq: -1, Host: "hostB", Source: engine.SourceHook, Run: "h", Pool: "one"}, []engine.Image{im}, false)
			if err == nil && r.Handover {
				t.Fatal("the window survived the host fence")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := enginetest.NewFake()
			tc.run(t, f, engine.New(f, engine.Options{}))
		})
	}
}
