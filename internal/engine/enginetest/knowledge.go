package enginetest

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// recordedAddrs is every address a claim records: the instance's, earlier
// instances' not fenced yet, and an open window's destination copy.
func recordedAddrs(c *engine.Claim) []engine.Addr {
	if c == nil {
		return nil
	}
	var out []engine.Addr
	add := func(as []engine.Addr) {
		for _, a := range as {
			if !containsAddr(out, a) {
				out = append(out, a)
			}
		}
	}
	add(c.Addrs)
	for _, as := range c.Images {
		add(as)
	}
	add(c.Earlier)
	if c.Window != nil {
		add(c.Window.DstAddrs)
	}
	return out
}

// lifecycleKnowledge are the rules of issue 18 that the claim keeps
// (fence only on positive knowledge; no rewrite forgets what it did not
// fence), each written as the scenario that broke it.
func lifecycleKnowledge(t *testing.T, h Harness) {
	sc := newScene(t, h)
	ctx, e, who := sc.ctx, sc.e, sc.who
	srcIPs, dstIPs := ip("192.0.2.1"), ip("192.0.2.2")

	// migrated runs deploy #5 on src, recorded, and its live migration to
	// dst (deploy #6) up to the destination's `started`: the handover is
	// recorded in the window, and no postmigrate comes (oned died after
	// libvirt moved the VM; the admin ran `onevm recover --success`: oned
	// says deploy #6 runs on dst).
	migrated := func(t *testing.T, vm int, img engine.Image) (srcC, dstC engine.Addr) {
		t.Helper()
		if _, err := e.Start(ctx, who(vm, "src", 5, engine.SourceFrontend, srcIPs), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		srcC = h.Zombie(t, img, true)
		if _, err := e.Record(ctx, who(vm, "src", -1, engine.SourceHook, srcIPs), []engine.Image{img}, engine.Scope{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.OpenWindow(ctx, who(vm, "src", 6, engine.SourceFrontend, srcIPs), "src", "dst", 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		hk := who(vm, "dst", -1, engine.SourceHook, dstIPs)
		win, err := e.AcceptIncoming(ctx, hk)
		if err != nil {
			t.Fatal(err)
		}
		hk.Incoming = win
		if _, err := e.Start(ctx, hk, []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		dstC = h.Zombie(t, img, false)
		if _, err := e.Record(ctx, hk, []engine.Image{img}, engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{dstC.IP}}); err != nil {
			t.Fatal(err)
		}
		return srcC, dstC
	}

	// Item 7: after a missed postmigrate and recover --success, a disk is
	// hot-attached on dst (deploy #6): the attach's record covers the
	// attached disk only. It must keep the destination instance's root-disk
	// client (recorded in the window only), or a later recreate elsewhere
	// cannot fence it once dst is cut off from Ceph.
	t.Run("AttachRecordKeepsUnfencedAddresses", func(t *testing.T) {
		vm, root, data := newVM(), h.NewImage(t), h.NewImage(t)
		srcC, dstC := migrated(t, vm, root)
		fe := who(vm, "dst", 6, engine.SourceFrontend, dstIPs)
		if _, err := e.Attach(ctx, fe, []engine.Image{data}); err != nil {
			t.Fatalf("attach on dst after recover --success: %v", err)
		}
		dataC := h.Zombie(t, data, false) // the VM's client of the attached disk
		rec, err := e.Record(ctx, fe, []engine.Image{data}, engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{dataC.IP}})
		if err != nil {
			t.Fatal(err)
		}
		got := recordedAddrs(&rec.Claim)
		for _, a := range []engine.Addr{srcC, dstC, dataC} {
			if !containsAddr(got, a) {
				t.Fatalf("the attach's record dropped %s, which nothing fenced: claim %+v", a, rec.Claim)
			}
		}
		if h.CutOff != nil {
			h.CutOff(t, dstC) // dst loses Ceph: its client is invisible
		}
		res, err := e.Start(ctx, who(vm, "third", 7, engine.SourceFrontend, ip("192.0.2.9")), []engine.Image{root, data}, false)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []engine.Addr{srcC, dstC, dataC} {
			if !fenced(res.Report, a) {
				t.Fatalf("the recreate on a third host must fence %s: %+v", a, res.Report)
			}
		}
	})

	// Item 7: the front-end's background record after the deploy lands
	// after premigrate opened the window: a record of the claim's own
	// deploy keeps the open window (or the destination's hook refuses the
	// migration the front-end is driving).
	t.Run("RecordKeepsOpenWindow", func(t *testing.T) {
		vm, img := newVM(), h.NewImage(t)
		if _, err := e.Start(ctx, who(vm, "src", 5, engine.SourceFrontend, srcIPs), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		srcC := h.Zombie(t, img, true)
		if _, err := e.Record(ctx, who(vm, "src", -1, engine.SourceHook, srcIPs), []engine.Image{img}, engine.Scope{}); err != nil {
			t.Fatal(err)
		}
		opened, err := e.OpenWindow(ctx, who(vm, "src", 6, engine.SourceFrontend, srcIPs), "src", "dst", 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		rec, err := e.Record(ctx, who(vm, "src", 5, engine.SourceFrontend, srcIPs), []engine.Image{img}, engine.Scope{})
		if err != nil {
			t.Fatal(err)
		}
		if !opened.Claim.Window.Same(rec.Claim.Window) || !containsAddr(rec.Claim.Addrs, srcC) {
			t.Fatalf("the late record of deploy #5 dropped the open window %+v: %+v", opened.Claim.Window, rec.Claim)
		}
		if _, err := e.AcceptIncoming(ctx, who(vm, "dst", -1, engine.SourceHook, dstIPs)); err != nil {
			t.Fatalf("the migration the front-end opened is refused on dst after the record: %v", err)
		}
	})

	// Item 8: the next live migration after a missed postmigrate and
	// recover --success (the VM runs deploy #6 on dst; the claim still
	// holds deploy #5 on src and the window): oned migrates it dst -> h3
	// (deploy #7). It must be admitted, and afterwards the claim knows
	// where the VM runs: a recreate elsewhere fences that instance.
	t.Run("NextMigrationAfterMissedClose", func(t *testing.T) {
		vm, img := newVM(), h.NewImage(t)
		srcC, dstC := migrated(t, vm, img)
		if _, err := e.OpenWindow(ctx, who(vm, "dst", 7, engine.SourceFrontend, dstIPs), "dst", "h3", 10*time.Minute); err != nil {
			t.Fatalf("premigrate dst -> h3: %v", err)
		}
		hk := who(vm, "h3", -1, engine.SourceHook, ip("192.0.2.3"))
		win, err := e.AcceptIncoming(ctx, hk)
		if err != nil {
			t.Fatalf("migrate begin on h3 of the migration the front-end opened from dst: %v", err)
		}
		hk.Incoming = win
		res, err := e.Start(ctx, hk, []engine.Image{img}, false)
		if err != nil || !res.Handover {
			t.Fatalf("prepare on h3 must be the handover: %v %+v", err, res)
		}
		if fenced(res.Report, dstC) || fenced(res.Report, srcC) {
			t.Fatal("the handover fenced something")
		}
		cl, err := e.ReadClaim(ctx, h.Pool, vm)
		if err != nil {
			t.Fatal(err)
		}
		if cl.Host != "dst" || cl.Seq != 6 || !containsAddr(cl.Addrs, dstC) || !containsAddr(recordedAddrs(cl), srcC) {
			t.Fatalf("the claim must say deploy #6 runs on dst (its client %s) and keep src's %s: %+v", dstC, srcC, cl)
		}
		// That migration fails; the VM stays on dst (failmigrate on h3).
		if _, err := e.CloseWindow(ctx, noJobOnSource(who(vm, "h3", 7, engine.SourceFrontend, ip("192.0.2.3"))), []engine.Image{img}, "dst", "h3", ip("192.0.2.3"), engine.Failed); err != nil {
			t.Fatal(err)
		}
		if h.CutOff != nil {
			h.CutOff(t, dstC)
		}
		res, err = e.Start(ctx, who(vm, "h4", 9, engine.SourceFrontend, ip("192.0.2.4")), []engine.Image{img}, false)
		if err != nil {
			t.Fatal(err)
		}
		if !fenced(res.Report, dstC) || !fenced(res.Report, srcC) {
			t.Fatalf("a recreate on h4 must fence the instance on dst %s and src's %s: %+v", dstC, srcC, res.Report)
		}
	})

	// Item 5: the claim was written by the hook alone (the VM started while
	// only the hooks were installed, or after claim reset): a `virsh
	// create` of a stale one-<ID> on h2 must be refused while the claim
	// says the VM runs on h1, whoever wrote it; the instance on h1 is not
	// fenced. After fence-host marked the claim fenced, a start elsewhere
	// (the reschedule) is admitted.
	t.Run("HookAloneRefusesStaleStartElsewhere", func(t *testing.T) {
		vm, img := newVM(), h.NewImage(t)
		h1, h2 := ip("192.0.2.11"), ip("192.0.2.12")
		if _, err := e.Start(ctx, who(vm, "h1", -1, engine.SourceHook, h1), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		inst := h.Zombie(t, img, true)
		if _, err := e.Record(ctx, who(vm, "h1", -1, engine.SourceHook, h1), []engine.Image{img}, engine.Scope{}); err != nil {
			t.Fatal(err)
		}
		res, err := e.Start(ctx, who(vm, "h2", -1, engine.SourceHook, h2), []engine.Image{img}, false)
		var el *engine.ClaimedElsewhereError
		if !errors.As(err, &el) {
			t.Fatalf("a stale start on h2 while the hook's claim says h1 runs the VM must be refused: %v %+v", err, res)
		}
		if res != nil && fenced(res.Report, inst) {
			t.Fatal("the refused start fenced the running instance")
		}
		// The same host's own restart is admitted (libvirt starts it, so
		// the domain does not run there).
		if _, err := e.Start(ctx, who(vm, "h1", -1, engine.SourceHook, h1), []engine.Image{img}, false); err != nil {
			t.Fatalf("a start on the claim's own host: %v", err)
		}
	})

	// Issue 31 item 2: VM 42 runs deploy #8 on h2 under a claim an older
	// rbdfence wrote (no STIME); oned's database is restored from a backup
	// of deploy #5 on h1, and its resume deploys #6 on h1. Nothing shows
	// the claim to be the VM's (not h1's, not its instance, not in oned's
	// history) or another's: the start refuses, fences nothing and names
	// the way out; after `claim reset --legacy` (the operator found no copy
	// running) the start fences the old instance.
	t.Run("LegacyClaimOfUnknownBelongingRefused", func(t *testing.T) {
		vm, img := newVM(), h.NewImage(t)
		h1, h2 := ip("192.0.2.21"), ip("192.0.2.22")
		if _, err := e.Start(ctx, who(vm, "h2", 8, engine.SourceFrontend, h2), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		inst := h.Zombie(t, img, true)
		if _, err := e.Record(ctx, who(vm, "h2", -1, engine.SourceHook, h2), []engine.Image{img}, engine.Scope{}); err != nil {
			t.Fatal(err)
		}
		fe := who(vm, "h1", 6, engine.SourceFrontend, h1)
		fe.Stime = time.Now().Add(-time.Hour).Unix() // the VM existed before the claim was written
		fe.History = []engine.Placement{{Seq: 5, Host: "h1"}, {Seq: 6, Host: "h1"}}
		fe.Domain = engine.Domain{Seen: engine.DomainAbsent, Said: "has no such domain"}
		res, err := e.Start(ctx, fe, []engine.Image{img}, false)
		var unknown *engine.UnknownClaimError
		if !errors.As(err, &unknown) || !strings.Contains(err.Error(), "claim reset --vm") || !strings.HasPrefix(err.Error(), "refused, nothing fenced: ") {
			t.Fatalf("a start on a claim nothing shows to be the VM's must be refused, naming claim reset: %v %+v", err, res)
		}
		if res != nil && fenced(res.Report, inst) {
			t.Fatal("the refused start fenced the instance the claim records")
		}
		if _, _, err := e.ClaimOf(ctx, fe); !errors.As(err, &unknown) || unknown.Recorded.Seq != 8 || unknown.Recorded.Host != "h2" {
			t.Fatalf("the claim is not what the refusal says: %v", err)
		}
		legacy := who(vm, "cli", -1, engine.SourceCLI, nil) // claim reset --legacy: no STIME
		if prev, err := e.ResetClaim(ctx, legacy); err != nil || prev == nil || prev.Seq != 8 {
			t.Fatalf("claim reset --legacy: %v %+v", err, prev)
		}
		res, err = e.Start(ctx, fe, []engine.Image{img}, false)
		if err != nil || !fenced(res.Report, inst) {
			t.Fatalf("the start after claim reset must fence the old instance %s: %v %+v", inst, err, res)
		}
	})

	// Issue 31 item 3: VM 42 runs deploy #8 on h2 (a claim of this
	// version), and oned's database is restored from a backup of deploy #5
	// on h1. Its resume (#6 on h1) is older than the claim's deploy; each
	// recover --recreate raises the SEQ, and #9 is past the claim's #8: the
	// claim's deploy is in neither's history, so both are refused and
	// nothing is fenced. After the operator's claim reset (no copy runs on
	// h2) the start fences the old instance.
	t.Run("RestoredDatabaseRefusedPastTheClaimsSeq", func(t *testing.T) {
		vm, img := newVM(), h.NewImage(t)
		h1, h2 := ip("192.0.2.31"), ip("192.0.2.32")
		stime := time.Now().Add(-time.Hour).Unix()
		at := func(host string, seq int, hostIPs []netip.Addr, hist ...engine.Placement) engine.Who {
			w := who(vm, host, seq, engine.SourceFrontend, hostIPs)
			w.Stime, w.History = stime, hist
			w.Domain = engine.Domain{Seen: engine.DomainAbsent, Said: "has no such domain"}
			return w
		}
		if _, err := e.Start(ctx, at("h2", 8, h2, engine.Placement{Seq: 7, Host: "h1"}, engine.Placement{Seq: 8, Host: "h2"}), []engine.Image{img}, false); err != nil {
			t.Fatal(err)
		}
		inst := h.Zombie(t, img, true)
		if _, err := e.Record(ctx, at("h2", -1, h2), []engine.Image{img}, engine.Scope{}); err != nil {
			t.Fatal(err)
		}
		restored := []engine.Placement{{Seq: 5, Host: "h1"}}
		for _, seq := range []int{6, 9} {
			hist := slices.Clone(restored)
			for s := 6; s <= seq; s++ {
				hist = append(hist, engine.Placement{Seq: s, Host: "h1"})
			}
			res, err := e.Start(ctx, at("h1", seq, h1, hist...), []engine.Image{img}, false)
			var lost *engine.UnknownDeployError
			if !errors.As(err, &lost) || !strings.HasPrefix(err.Error(), "refused, nothing fenced: ") || !strings.Contains(err.Error(), "'rbdfence claim reset --vm") {
				t.Fatalf("deploy #%d after the restore: want an UnknownDeployError naming claim reset, got %v %+v", seq, err, res)
			}
			if res != nil && fenced(res.Report, inst) {
				t.Fatalf("the refused deploy #%d fenced the instance of #8", seq)
			}
		}
		if _, err := e.ResetClaim(ctx, at("cli", -1, nil)); err != nil {
			t.Fatal(err)
		}
		res, err := e.Start(ctx, at("h1", 10, h1, engine.Placement{Seq: 10, Host: "h1"}), []engine.Image{img}, false)
		if err != nil || !fenced(res.Report, inst) {
			t.Fatalf("the deploy after claim reset must fence the old instance %s: %v %+v", inst, err, res)
		}
	})
}
