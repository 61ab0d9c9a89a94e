package enginetest

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// lifecycleVM numbers the VMs of the lifecycle scenarios: unique per process
// and per run, so that claims left in a real pool by an earlier run do not
// meet this one.
var lifecycleVM atomic.Int64

func init() { lifecycleVM.Store(time.Now().UnixNano() % 1_000_000_000) }

// lifecycle are the claim's lifecycle rules (issue 11), each written as the
// scenario that would break it. They run on the fake and on the real
// cluster (zombies are then separate librbd processes).
// scene is what the lifecycle scenarios share: a context, an engine over
// the harness's cluster, and how they name VMs, hosts and steps.
type scene struct {
	ctx context.Context
	e   *engine.Engine
	h   Harness
}

// newScene returns the scene of one group of scenarios (its context ends
// with the test).
func newScene(t *testing.T, h Harness) *scene {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &scene{ctx: ctx, e: engine.New(h.Cluster, engine.Options{Expire: time.Hour}), h: h}
}

// who is the party of a step of VM vm on host.
func (s *scene) who(vm int, host string, seq int, source string, ips []netip.Addr) engine.Who {
	return engine.Who{VM: vm, Seq: seq, Host: host, Source: source, Run: host + "-" + source, Pool: s.h.Pool, HostIPs: ips}
}

// ip is one host address.
func ip(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }

// newVM numbers a scenario's VM.
func newVM() int { return int(lifecycleVM.Add(1)) }

// fenced reports whether r blocklisted a (visible or recorded).
func fenced(r *engine.Report, a engine.Addr) bool {
	if r == nil {
		return false
	}
	for _, im := range r.Images {
		for _, c := range im.Clients {
			if c.Address == a.String() && c.Fenced() {
				return true
			}
		}
	}
	for _, c := range r.Recorded {
		if c.Address == a.String() && c.Fenced() {
			return true
		}
	}
	return false
}

func lifecycle(t *testing.T, h Harness) {
	sc := newScene(t, h)
	ctx, e, who := sc.ctx, sc.e, sc.who
	srcIPs, dstIPs := ip("192.0.2.1"), ip("192.0.2.2")
	// A front-end start on a host where the claim may have its instance
	// runs after the host step asked libvirt (engine.Who.Domain).
	absent := engine.Domain{Seen: engine.DomainAbsent, Said: "has no such domain"}

	// Issue 11 item 2: a migration window for deploy #6 (src -> dst) is
	// open and never closed (oned restarted mid-migration). Deploy #7 is
	// then started on the destination by the front-end: it is a new
	// instance, not the migration's, and must fence the source's copy.
	t.Run("NewerDeployOnDestinationFencesSource", func(t *testing.T) {
		vm, img := newVM(), h.NewImage(t)
		if _, err := e.Start(ctx, who(vm, "src", 5, engine.SourceFrontend, srcIPs), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		src := h.Zombie(t, img, true)
		if _, err := e.Record(ctx, who(vm, "src", -1, engine.SourceHook, srcIPs), []engine.Image{img}, engine.Scope{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.OpenWindow(ctx, who(vm, "src", 6, engine.SourceFrontend, srcIPs), "src", "dst", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		fe := who(vm, "dst", 7, engine.SourceFrontend, dstIPs)
		fe.Domain = absent // the host step asked libvirt: no one-<ID> on dst
		res, err := e.Start(ctx, fe, []engine.Image{img}, false)
		if err != nil {
			t.Fatalf("deploy #7 on the destination: %v", err)
		}
		if res.Handover || !fenced(res.Report, src) {
			t.Fatalf("deploy #7 on dst inside the window of #6 must fence the source %s: handover=%v report=%+v", src, res.Handover, res.Report)
		}
		if res.Claim.Seq != 7 || res.Claim.Host != "dst" || res.Claim.Window != nil {
			t.Fatalf("claim after deploy #7: %+v", res.Claim)
		}
	})

	// Issue 11 item 2: inside an open window a start on the destination that
	// is not the incoming migration (the hook's prepare without the mark of
	// that migration: a `virsh create` by hand) is a second copy: refused,
	// and the running source is not fenced.
	t.Run("WindowAdmitsNoPlainStartOnDestination", func(t *testing.T) {
		vm, img := newVM(), h.NewImage(t)
		if _, err := e.Start(ctx, who(vm, "src", 5, engine.SourceFrontend, srcIPs), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		src := h.Zombie(t, img, true)
		if _, err := e.OpenWindow(ctx, who(vm, "src", 6, engine.SourceFrontend, srcIPs), "src", "dst", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		res, err := e.Start(ctx, who(vm, "dst", -1, engine.SourceHook, dstIPs), []engine.Image{img}, false)
		var el *engine.ClaimedElsewhereError
		if !errors.As(err, &el) {
			t.Fatalf("a plain start on the destination during the window must be refused, got %v (%+v)", err, res)
		}
		if res != nil && fenced(res.Report, src) {
			t.Fatalf("the refused start fenced the source %s", src)
		}
		cl, err := e.ReadClaim(ctx, h.Pool, vm)
		if err != nil || cl == nil || cl.Window == nil || cl.Host != "src" {
			t.Fatalf("the refused start changed the claim: %+v %v", cl, err)
		}
	})

	// Issue 11 item 6: the migration src -> dst (deploy #6) succeeded but
	// postmigrate never completed. The VM is powered off on dst and resumed
	// there (deploy #6 again, oned adds no HISTORY for a resume): both
	// guards must admit it; the claim must not hold dst's deploy under src.
	t.Run("MissedPostmigrateDoesNotBlockDestination", func(t *testing.T) {
		vm, img := newVM(), h.NewImage(t)
		if _, err := e.Start(ctx, who(vm, "src", 5, engine.SourceFrontend, srcIPs), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		res, err := e.OpenWindow(ctx, who(vm, "src", 6, engine.SourceFrontend, srcIPs), "src", "dst", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if res.Claim.Host == "src" && res.Claim.Seq == 6 {
			t.Fatalf("premigrate wrote the destination's deploy #6 under the source: %+v", res.Claim)
		}
		time.Sleep(1500 * time.Millisecond) // the window expires: no postmigrate came
		fe := who(vm, "dst", 6, engine.SourceFrontend, dstIPs)
		fe.Domain = absent // the host step asked libvirt: the VM was powered off
		res, err = e.Start(ctx, fe, []engine.Image{img}, false)
		if err != nil {
			t.Fatalf("resume of deploy #6 on dst after a missed postmigrate: %v", err)
		}
		if _, err := e.Start(ctx, who(vm, "dst", -1, engine.SourceHook, dstIPs), []engine.Image{img}, false); err != nil {
			t.Fatalf("the hook on dst after the front-end admitted deploy #6 there: %v", err)
		}
		if _, err := e.Record(ctx, who(vm, "dst", -1, engine.SourceHook, dstIPs), []engine.Image{img}, engine.Scope{}); err != nil {
			t.Fatalf("the hook's record on dst: %v", err)
		}
	})

	// Issue 11 item 5: kvm1.dc1.example and kvm1.dc2.example are two hosts.
	t.Run("HostsMatchedExactly", func(t *testing.T) {
		vm, img := newVM(), h.NewImage(t)
		if _, err := e.Start(ctx, who(vm, "kvm1.dc1.example", 3, engine.SourceFrontend, ip("192.0.2.11")), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		inst := h.Zombie(t, img, true)
		res, err := e.Start(ctx, who(vm, "kvm1.dc2.example", -1, engine.SourceHook, ip("198.51.100.11")), []engine.Image{img}, false)
		var el *engine.ClaimedElsewhereError
		if !errors.As(err, &el) {
			t.Fatalf("kvm1.dc2.example must not continue the deploy claimed by kvm1.dc1.example: %v", err)
		}
		if res != nil && fenced(res.Report, inst) {
			t.Fatal("the refused start fenced the instance")
		}
		if _, err := e.Start(ctx, who(vm, "kvm1", -1, engine.SourceHook, nil), []engine.Image{img}, false); !errors.As(err, &el) {
			t.Fatalf("a first label is no identity: %v", err)
		}
	})

	// Issue 11 item 7: opennebula.remote: local, host registered by its IP:
	// the front-end's step runs on the front-end (no host addresses); the
	// hook on that host, whose Ceph address is the IP, is the same host.
	t.Run("HostRegisteredByIPWithLocalRemote", func(t *testing.T) {
		vm, img := newVM(), h.NewImage(t)
		if _, err := e.Start(ctx, who(vm, "192.0.2.21", 3, engine.SourceFrontend, nil), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		res, err := e.Start(ctx, who(vm, "node21", -1, engine.SourceHook, ip("192.0.2.21")), []engine.Image{img}, false)
		if err != nil {
			t.Fatalf("the hook on 192.0.2.21 must continue the deploy the front-end admitted there: %v", err)
		}
		if res.Claim.Host != "192.0.2.21" || res.Claim.Seq != 3 {
			t.Fatalf("claim: %+v", res.Claim)
		}
		if _, err := e.Start(ctx, who(vm, "node22", -1, engine.SourceHook, ip("192.0.2.22")), []engine.Image{img}, false); err == nil {
			t.Fatal("another host must still be refused")
		}
	})

	// Issue 11 item 8: the hook continues the front-end's claim under the
	// front-end's name and must keep the host addresses the front-end's
	// step recorded, or its own record (started) is refused afterwards.
	t.Run("HookKeepsFrontendHostAddresses", func(t *testing.T) {
		vm, img := newVM(), h.NewImage(t)
		if _, err := e.Start(ctx, who(vm, "kvm31.example", 3, engine.SourceFrontend, ip("192.0.2.31")), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		res, err := e.Start(ctx, who(vm, "node31", -1, engine.SourceHook, ip("192.0.2.31")), []engine.Image{img}, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Claim.HostAddrs) == 0 {
			t.Fatalf("the hook's start dropped the host addresses: %+v", res.Claim)
		}
		inst := h.Zombie(t, img, false)
		rec, err := e.Record(ctx, who(vm, "node31", -1, engine.SourceHook, ip("192.0.2.31")), []engine.Image{img}, engine.Scope{})
		if err != nil {
			t.Fatalf("the hook's record after its own start: %v", err)
		}
		if len(rec.Claim.Addrs) != 1 || rec.Claim.Addrs[0] != inst || rec.Claim.Host != "kvm31.example" || rec.Claim.Seq != 3 {
			t.Fatalf("recorded claim: %+v", rec.Claim)
		}
	})
}

// lifecycleMigration are the rules of the handover (issue 11 items 1-3).
func lifecycleMigration(t *testing.T, h Harness) {
	sc := newScene(t, h)
	ctx, e, who := sc.ctx, sc.e, sc.who
	srcIPs, dstIPs := ip("192.0.2.1"), ip("192.0.2.2")
	fencedAny := func(r *engine.Report) int {
		if r == nil {
			return 0
		}
		return r.Fenced
	}

	// Item 1: `migrate begin` of a stale domain (deploy #5's, blocklisted)
	// on h2 while the claim holds deploy #9 on h3 and no migration is open.
	t.Run("IncomingWithoutWindowRefused", func(t *testing.T) {
		vm, img := int(lifecycleVM.Add(1)), h.NewImage(t)
		if _, err := e.Start(ctx, who(vm, "h3", 9, engine.SourceFrontend, ip("192.0.2.3")), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		var nh *engine.NoHandoverError
		if _, err := e.AcceptIncoming(ctx, who(vm, "h2", -1, engine.SourceHook, dstIPs)); !errors.As(err, &nh) {
			t.Fatalf("migrate begin on h2 without a window: want NoHandoverError, got %v", err)
		}
		// A window h3 -> h4 does not admit a migration to h2.
		if _, err := e.OpenWindow(ctx, who(vm, "h3", 10, engine.SourceFrontend, ip("192.0.2.3")), "h3", "h4", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, err := e.AcceptIncoming(ctx, who(vm, "h2", -1, engine.SourceHook, dstIPs)); !errors.As(err, &nh) {
			t.Fatalf("migrate begin on h2 with a window to h4: want NoHandoverError, got %v", err)
		}
		// Nor does a window of an older deploy (a premigrate of #8 after
		// #9 was claimed) open at all.
		var nd *engine.NewerDeployError
		if _, err := e.OpenWindow(ctx, who(vm, "h1", 8, engine.SourceFrontend, ip("192.0.2.1")), "h1", "h2", 10*time.Minute); !errors.As(err, &nd) {
			t.Fatalf("premigrate of an older deploy: want NewerDeployError, got %v", err)
		}
	})

	// Items 1 and 3: the accepted migration is a handover (nothing fenced),
	// its started instance is recorded in the window; a mark of an earlier,
	// aborted migration to the same host is no handover: the prepare that
	// carries it is judged as a start.
	t.Run("HandoverBoundToItsWindow", func(t *testing.T) {
		vm, img := int(lifecycleVM.Add(1)), h.NewImage(t)
		if _, err := e.Start(ctx, who(vm, "src", 5, engine.SourceFrontend, srcIPs), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		srcC := h.Zombie(t, img, true)
		if _, err := e.Record(ctx, who(vm, "src", -1, engine.SourceHook, srcIPs), []engine.Image{img}, engine.Scope{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.OpenWindow(ctx, who(vm, "src", 6, engine.SourceFrontend, srcIPs), "src", "dst", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		hk := who(vm, "dst", -1, engine.SourceHook, dstIPs)
		old, err := e.AcceptIncoming(ctx, hk)
		if err != nil {
			t.Fatal(err)
		}
		// That migration is aborted; failmigrate closes its window. The
		// front-end opens a second one.
		if _, err := e.CloseWindow(ctx, noJobOnSource(who(vm, "dst", 6, engine.SourceFrontend, dstIPs)), []engine.Image{img}, "src", "dst", dstIPs, engine.Failed); err != nil {
			t.Fatal(err)
		}
		if _, err := e.OpenWindow(ctx, who(vm, "src", 7, engine.SourceFrontend, srcIPs), "src", "dst", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		stale := hk
		stale.Incoming = old
		res, err := e.Start(ctx, stale, []engine.Image{img}, false)
		var el *engine.ClaimedElsewhereError
		if !errors.As(err, &el) || (res != nil && (res.Handover || fencedAny(res.Report) != 0)) {
			t.Fatalf("a prepare with the mark of the aborted migration must be judged as a start (refused here): %v %+v", err, res)
		}
		cur, err := e.AcceptIncoming(ctx, hk)
		if err != nil {
			t.Fatal(err)
		}
		hk.Incoming = cur
		res, err = e.Start(ctx, hk, []engine.Image{img}, false)
		if err != nil || !res.Handover || fencedAny(res.Report) != 0 {
			t.Fatalf("the accepted migration must be a handover that fences nothing: %v %+v", err, res)
		}
		dstC := h.Zombie(t, img, false)
		rec, err := e.Record(ctx, hk, []engine.Image{img}, engine.Scope{})
		if err != nil {
			t.Fatal(err)
		}
		if rec.Claim.Host != "src" || rec.Claim.Window == nil || !containsAddr(rec.Claim.Window.DstAddrs, dstC) || !containsAddr(rec.Claim.Addrs, srcC) {
			t.Fatalf("started on dst must record dst's instance in the window and keep src's: %+v", rec.Claim)
		}
		// Neither postmigrate nor failmigrate comes. A newer deploy on a
		// third host fences both copies, recorded or visible.
		res, err = e.Start(ctx, who(vm, "third", 8, engine.SourceFrontend, ip("192.0.2.9")), []engine.Image{img}, false)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, im := range res.Report.Images {
			for _, c := range im.Clients {
				if c.Fenced() {
					got[c.Address] = true
				}
			}
		}
		if !got[srcC.String()] || !got[dstC.String()] {
			t.Fatalf("deploy #8 must fence both copies of the unfinished migration: %+v", res.Report)
		}
	})
}

func containsAddr(as []engine.Addr, a engine.Addr) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

// noJobOnSource is w as the front-end sends a failmigrate after the
// source's libvirt said one-N runs there with no job: the only answer on
// which a failmigrate fences (engine.MigrationUnknownError otherwise).
func noJobOnSource(w engine.Who) engine.Who {
	w.Domain = engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobNone, JobSaid: "Job type: None"}
	return w
}
