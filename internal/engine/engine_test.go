package engine_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/engine/enginetest"
)

var ctx = context.Background()

func img(name string) engine.Image { return engine.Image{Pool: "one", Name: name} }

func TestParseAddr(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		exact    bool
		bad      bool
	}{
		{in: "127.0.0.1:0/3021474917", want: "127.0.0.1:0/3021474917", exact: true},
		{in: "v1:10.1.2.3:6800/42", want: "10.1.2.3:6800/42", exact: true},
		{in: "any:10.1.2.3:0/42", want: "10.1.2.3:0/42", exact: true},
		{in: "[::1]:0/7", want: "[::1]:0/7", exact: true},
		{in: "10.1.2.3:0/0", want: "10.1.2.3:0/0", exact: false},
		{in: "10.1.2.3:0", bad: true},
		{in: "10.1.2.3/24", bad: true},
		{in: "host:0/1", bad: true},
		{in: "10.1.2.3:0/-1", bad: true},
		{in: "", bad: true},
	} {
		a, err := engine.ParseAddr(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: want error, got %v", tc.in, a)
			}
			continue
		}
		if err != nil || a.String() != tc.want || a.Exact() != tc.exact {
			t.Errorf("%q: got %v exact=%v err=%v, want %s exact=%v", tc.in, a, a.Exact(), err, tc.want, tc.exact)
		}
	}
}

func TestFenceDecisions(t *testing.T) {
	allow := netip.MustParsePrefix("10.9.0.0/16")
	for _, tc := range []struct {
		name      string
		shareable bool
		readonly  bool
		ip        string
		lock      bool
		scope     engine.Scope
		decision  engine.Decision
		action    engine.Action
		listed    bool
	}{
		{name: "locker", ip: "10.0.0.5", lock: true, decision: engine.DecideFence, action: engine.ActUnlocked, listed: true},
		{name: "idle watcher", ip: "10.0.0.5", decision: engine.DecideFence, action: engine.ActBlocklisted, listed: true},
		{name: "allowlisted", ip: "10.9.1.1", lock: true, decision: engine.DecideAllowlisted, action: engine.ActNone},
		{name: "shareable", shareable: true, ip: "10.0.0.5", lock: true, decision: engine.DecideShareable, action: engine.ActNone},
		{name: "readonly disk: writer reported", readonly: true, ip: "10.0.0.5", lock: true, decision: engine.DecideReadOnly, action: engine.ActNone},
		{name: "on host in scope", ip: "10.0.0.5", scope: engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}},
			decision: engine.DecideFence, action: engine.ActBlocklisted, listed: true},
		{name: "on host out of scope", ip: "10.0.0.6", scope: engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}},
			decision: engine.DecideOutOfScope, action: engine.ActNone},
		{name: "off host lockers only skips watcher", ip: "10.0.0.6", scope: engine.Scope{Kind: engine.ScopeOffHost, LockersOnly: true, HostIPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}},
			decision: engine.DecideOutOfScope, action: engine.ActNone},
		{name: "off host locker", ip: "10.0.0.6", lock: true, scope: engine.Scope{Kind: engine.ScopeOffHost, LockersOnly: true, HostIPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}},
			decision: engine.DecideFence, action: engine.ActUnlocked, listed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := enginetest.NewFake()
			im := img("a")
			im.Shareable, im.ReadOnly = tc.shareable, tc.readonly
			f.CreateImage(im)
			a := f.Open(im, tc.ip, tc.lock)
			e := engine.New(f, engine.Options{Allow: []netip.Prefix{allow}, Expire: time.Hour})
			r := e.Fence(ctx, []engine.Image{im}, tc.scope, nil)
			if err := r.Err(); err != nil {
				t.Fatal(err)
			}
			c := r.Images[0].Clients[0]
			if c.Decision != tc.decision || c.Action != tc.action {
				t.Fatalf("got %s/%s, want %s/%s", c.Decision, c.Action, tc.decision, tc.action)
			}
			d, listed := f.Blocklisted(a)
			if listed != tc.listed || (listed && d != time.Hour) {
				t.Fatalf("blocklisted=%v (%s), want %v (1h)", listed, d, tc.listed)
			}
			if listed && (c.Expire.IsZero() || r.Fenced != 1) {
				t.Fatalf("fenced client must carry its expiry and count: %+v fenced=%d", c, r.Fenced)
			}
			if !listed && f.Calls["blocklist"]+f.Calls["wait"] != 0 {
				t.Fatalf("nothing to fence, but blocklist/wait called: %v", f.Calls)
			}
		})
	}
}

func TestFenceIdempotentAndClean(t *testing.T) {
	f := enginetest.NewFake()
	a, b := img("a"), img("b")
	f.CreateImage(a)
	f.CreateImage(b)
	z := f.Open(a, "10.0.0.5", true)
	f.Attach(b, z, false) // the same zombie has both images open
	e := engine.New(f, engine.Options{})
	r := e.Fence(ctx, []engine.Image{a, b}, engine.Scope{}, nil)
	if r.Err() != nil || r.Fenced != 2 || f.Calls["blocklist"] != 1 || f.Calls["wait"] != 1 {
		t.Fatalf("one zombie on two images: fenced=%d calls=%v err=%v", r.Fenced, f.Calls, r.Err())
	}
	if d, _ := f.Blocklisted(z); d != engine.DefaultExpire {
		t.Fatalf("default expiry: got %s", d)
	}
	r = e.Fence(ctx, []engine.Image{a, b}, engine.Scope{}, nil)
	if r.Err() != nil || r.Fenced != 0 || len(r.Images[0].Clients)+len(r.Images[1].Clients) != 0 {
		t.Fatalf("second run must find nothing: %+v", r)
	}
}

func TestFenceFailuresReported(t *testing.T) {
	for _, step := range []string{"blocklist", "wait", "break", "inspect"} {
		t.Run(step, func(t *testing.T) {
			f := enginetest.NewFake()
			im := img("a")
			f.CreateImage(im)
			f.Open(im, "10.0.0.5", true)
			f.Fail[step] = errors.New("injected " + step)
			r := engine.New(f, engine.Options{}).Fence(ctx, []engine.Image{im}, engine.Scope{}, nil)
			err := r.Err()
			if err == nil || !strings.Contains(err.Error(), "injected "+step) || r.Errors == 0 {
				t.Fatalf("want the injected error reported, got %v (errors=%d)", err, r.Errors)
			}
			if step == "blocklist" && f.Calls["break"] != 0 {
				t.Fatal("a lock must never be broken before its owner is blocklisted")
			}
			if step == "wait" && f.Calls["break"] != 0 {
				t.Fatal("a lock must not be broken before the OSD map with the blocklist is in force")
			}
		})
	}
}

func TestMissingImage(t *testing.T) {
	f := enginetest.NewFake()
	r := engine.New(f, engine.Options{}).Check(ctx, []engine.Image{img("nope")}, engine.Scope{})
	if err := r.Err(); err == nil || !strings.Contains(err.Error(), "one/nope") {
		t.Fatalf("missing image must be named: %v", err)
	}
	// A check is not a fence: its error must not say one was attempted.
	for _, tc := range []struct {
		dry  bool
		want string
	}{{true, "check incomplete (1 problem(s)): "}, {false, "fence incomplete (1 problem(s)): "}} {
		e := engine.New(f, engine.Options{})
		var rr *engine.Report
		if tc.dry {
			rr = e.Check(ctx, []engine.Image{img("nope")}, engine.Scope{})
		} else {
			rr = e.Fence(ctx, []engine.Image{img("nope")}, engine.Scope{}, nil)
		}
		if err := rr.Err(); err == nil || !strings.HasPrefix(err.Error(), tc.want) || (tc.dry && strings.Contains(err.Error(), "fence")) {
			t.Errorf("dry run %v: %v, want it to start %q", tc.dry, err, tc.want)
		}
	}
	r = engine.New(f, engine.Options{MissingOK: true}).Check(ctx, []engine.Image{img("nope")}, engine.Scope{})
	if r.Err() != nil || !r.Images[0].Missing {
		t.Fatalf("MissingOK: %+v", r.Images[0])
	}
}

func TestCheckChangesNothing(t *testing.T) {
	f := enginetest.NewFake()
	im := img("a")
	f.CreateImage(im)
	z := f.Open(im, "10.0.0.5", true)
	r := engine.New(f, engine.Options{}).Check(ctx, []engine.Image{im}, engine.Scope{})
	if _, ok := f.Blocklisted(z); ok || f.Calls["break"] != 0 || r.Images[0].Clients[0].Action != engine.ActWouldFence {
		t.Fatalf("check must not fence: %+v %v", r.Images[0].Clients, f.Calls)
	}
}

func who(host string, seq int, source string) engine.Who {
	return engine.Who{VM: 42, Seq: seq, Host: host, Source: source, Run: host + "-run", Pool: "one"}
}

func TestClaimStart(t *testing.T) {
	f := enginetest.NewFake()
	im := img("one-7-42-0")
	f.CreateImage(im)
	e := engine.New(f, engine.Options{})

	res, err := e.Start(ctx, who("hostA", 3, engine.SourceFrontend), []engine.Image{im}, false)
	if err != nil || res.Claim.Host != "hostA" || res.Claim.Seq != 3 {
		t.Fatalf("first start: %+v %v", res, err)
	}
	// The instance starts on hostA and is recorded.
	inst := f.Open(im, "10.0.0.1", true)
	if _, err := e.Record(ctx, who("hostA", -1, engine.SourceHook), []engine.Image{im}, engine.Scope{}); err != nil {
		t.Fatal(err)
	}
	cl, _ := e.ReadClaim(ctx, "one", 42)
	if len(cl.Addrs) != 1 || cl.Addrs[0] != inst || cl.Seq != 3 || cl.Source != engine.SourceFrontend || cl.State != engine.StateRunning {
		t.Fatalf("recorded claim: %+v", cl)
	}

	// An older deploy is refused, and so is the same deploy on another host.
	_, err = e.Start(ctx, who("hostB", 2, engine.SourceFrontend), []engine.Image{im}, false)
	var nd *engine.NewerDeployError
	if !errors.As(err, &nd) || !strings.Contains(err.Error(), "hostA") {
		t.Fatalf("older deploy: want NewerDeployError naming hostA, got %v", err)
	}
	_, err = e.Start(ctx, who("hostB", 3, engine.SourceFrontend), []engine.Image{im}, false)
	var el *engine.ClaimedElsewhereError
	if !errors.As(err, &el) || !strings.Contains(err.Error(), "hostA") {
		t.Fatalf("same deploy elsewhere: want ClaimedElsewhereError naming hostA, got %v", err)
	}
	// A hook start on a host the front-end did not pick is refused.
	if _, err = e.Start(ctx, who("hostB", -1, engine.SourceHook), []engine.Image{im}, false); !errors.As(err, &el) {
		t.Fatalf("hook on the wrong host: got %v", err)
	}
	if _, ok := f.Blocklisted(inst); ok {
		t.Fatal("a refused start must not fence")
	}

	// Host A is cut off: its instance is invisible now. Deploy 4 on hostB
	// blocklists the recorded address anyway.
	f.Hide(inst)
	res, err = e.Start(ctx, who("hostB", 4, engine.SourceFrontend), []engine.Image{im}, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Blocklisted(inst); !ok || len(res.Report.Recorded) != 1 || res.Report.Recorded[0].Action != engine.ActBlocklisted {
		t.Fatalf("the recorded address of the previous instance must be blocklisted: %+v", res.Report.Recorded)
	}
	if res.Claim.Host != "hostB" || res.Claim.Seq != 4 || len(res.Claim.Addrs) != 0 {
		t.Fatalf("new claim: %+v", res.Claim)
	}
	// The hook on hostB continues deploy 4.
	if _, err := e.Start(ctx, who("hostB", -1, engine.SourceHook), []engine.Image{im}, false); err != nil {
		t.Fatalf("hook on the chosen host: %v", err)
	}
}

func TestClaimHeld(t *testing.T) {
	f := enginetest.NewFake()
	im := img("a")
	f.CreateImage(im)
	e := engine.New(f, engine.Options{})
	if err := f.AcquireLease(ctx, "one", engine.ClaimObject(42), "host=hostA run=x seq=1", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := e.Start(ctx, who("hostB", 1, engine.SourceFrontend), []engine.Image{im}, false)
	var held *engine.ClaimHeldError
	if !errors.As(err, &held) || !strings.Contains(err.Error(), "host=hostA") {
		t.Fatalf("want ClaimHeldError naming hostA, got %v", err)
	}
}

func TestMigration(t *testing.T) {
	f := enginetest.NewFake()
	im := img("a")
	f.CreateImage(im)
	e := engine.New(f, engine.Options{})
	if _, err := e.Start(ctx, who("src", 1, engine.SourceFrontend), []engine.Image{im}, false); err != nil {
		t.Fatal(err)
	}
	srcC := f.Open(im, "10.0.0.1", true)
	if _, err := e.OpenWindow(ctx, who("src", 2, engine.SourceFrontend), "src", "dst", time.Minute); err != nil {
		t.Fatal(err)
	}
	// The destination's hook accepts the incoming migration (migrate begin)
	// and prepares it: nothing is fenced.
	hk := who("dst", -1, engine.SourceHook)
	win, err := e.AcceptIncoming(ctx, hk)
	if err != nil || win.Src != "src" || win.Dst != "dst" || win.Seq != 2 || win.From != 1 {
		t.Fatalf("migrate begin on dst: %+v %v", win, err)
	}
	if _, err := e.AcceptIncoming(ctx, who("other", -1, engine.SourceHook)); err == nil {
		t.Fatal("an incoming migration on a host the window is not for must be refused")
	}
	hk.Incoming = win
	res, err := e.Start(ctx, hk, []engine.Image{im}, false)
	if err != nil || !res.Handover || res.Claim.Host != "src" || res.Claim.Seq != 1 {
		t.Fatalf("start on dst in window: %+v %v", res, err)
	}
	if _, ok := f.Blocklisted(srcC); ok {
		t.Fatal("the running source must not be fenced during the handover")
	}
	dstC := f.Open(im, "10.0.0.2", false)
	dstIPs := []netip.Addr{netip.MustParseAddr("10.0.0.2")}

	t.Run("failmigrate fences dst keeps src", func(t *testing.T) {
		res, err := e.CloseWindow(ctx, who("src", 1, engine.SourceFrontend), []engine.Image{im}, "src", "dst", dstIPs, engine.Failed)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := f.Blocklisted(dstC); !ok {
			t.Fatal("the destination's copy must be fenced")
		}
		if _, ok := f.Blocklisted(srcC); ok {
			t.Fatal("the source must be kept")
		}
		if res.Claim.Host != "src" || res.Claim.Window != nil {
			t.Fatalf("claim after failmigrate: %+v", res.Claim)
		}
	})
	t.Run("failmigrate from the source when dst is unreachable", func(t *testing.T) {
		dst3 := f.Open(im, "10.0.0.2", true)
		srcIPs := []netip.Addr{netip.MustParseAddr("10.0.0.1")}
		res, err := e.CloseWindow(ctx, who("src", 1, engine.SourceFrontend), []engine.Image{im}, "src", "dst", srcIPs, engine.FailedFromSource)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := f.Blocklisted(dst3); !ok {
			t.Fatal("the copy off the source must be fenced")
		}
		if _, ok := f.Blocklisted(srcC); ok {
			t.Fatal("the source must be kept")
		}
		if res.Claim.Host != "src" {
			t.Fatalf("claim: %+v", res.Claim)
		}
	})
	t.Run("postmigrate fences a lock owner off dst", func(t *testing.T) {
		dst2 := f.Open(im, "10.0.0.2", false)
		res, err := e.CloseWindow(ctx, who("dst", 2, engine.SourceFrontend), []engine.Image{im}, "src", "dst", dstIPs, engine.Migrated)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := f.Blocklisted(srcC); !ok {
			t.Fatal("the old lock owner off the destination must be fenced")
		}
		if _, ok := f.Blocklisted(dst2); ok {
			t.Fatal("the destination must be kept")
		}
		if res.Claim.Host != "dst" || len(res.Claim.Addrs) != 1 || res.Claim.Addrs[0] != dst2 {
			t.Fatalf("claim after postmigrate: %+v", res.Claim)
		}
	})
}

// TestLateCloseWindowRefused: a postmigrate or failmigrate of deploy #2
// arriving after deploy #5 was claimed elsewhere fences nothing.
func TestLateCloseWindowRefused(t *testing.T) {
	f := enginetest.NewFake()
	im := img("a")
	f.CreateImage(im)
	e := engine.New(f, engine.Options{})
	if _, err := e.Start(ctx, who("h5", 5, engine.SourceFrontend), []engine.Image{im}, false); err != nil {
		t.Fatal(err)
	}
	inst := f.Open(im, "10.0.0.5", true)
	dstIPs := []netip.Addr{netip.MustParseAddr("10.0.0.2")}
	for _, o := range []engine.MigrationOutcome{engine.Migrated, engine.Failed, engine.FailedFromSource} {
		_, err := e.CloseWindow(ctx, who("dst", 2, engine.SourceFrontend), []engine.Image{im}, "src", "dst", dstIPs, o)
		var nd *engine.NewerDeployError
		if !errors.As(err, &nd) {
			t.Fatalf("outcome %d of deploy #2 after #5: want NewerDeployError, got %v", o, err)
		}
	}
	if _, ok := f.Blocklisted(inst); ok {
		t.Fatal("a late migration step fenced the newer instance")
	}
}

func TestOnBlocklistedBeforeLockBreak(t *testing.T) {
	f := enginetest.NewFake()
	im := img("a")
	f.CreateImage(im)
	z := f.Open(im, "10.0.0.5", true)
	var seen []string
	e := engine.New(f, engine.Options{OnBlocklisted: func(image string, c engine.ClientReport) {
		if f.Calls["break"] != 0 {
			t.Error("OnBlocklisted must run before the lock break")
		}
		seen = append(seen, image+" "+c.Address+" "+string(c.Action))
	}})
	if r := e.Fence(ctx, []engine.Image{im}, engine.Scope{}, nil); r.Err() != nil {
		t.Fatal(r.Err())
	}
	if len(seen) != 1 || seen[0] != "one/a "+z.String()+" blocklisted" {
		t.Fatalf("seen %v", seen)
	}
}

func TestCheckRunning(t *testing.T) {
	f := enginetest.NewFake()
	im := img("a")
	f.CreateImage(im)
	e := engine.New(f, engine.Options{})
	if _, err := e.Start(ctx, who("hostA", 1, engine.SourceFrontend), []engine.Image{im}, false); err != nil {
		t.Fatal(err)
	}
	inst := f.Open(im, "10.0.0.1", true)
	if _, err := e.Record(ctx, who("hostA", 1, engine.SourceHook), []engine.Image{im}, engine.Scope{}); err != nil {
		t.Fatal(err)
	}
	zombie := f.Open(im, "10.0.0.2", false)
	res, err := e.CheckRunning(ctx, "one", 42, []engine.Image{im})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]engine.Decision{}
	for _, c := range res.Report.Images[0].Clients {
		got[c.Address] = c.Decision
	}
	if got[inst.String()] != engine.DecideInstance || got[zombie.String()] != engine.DecideFence {
		t.Fatalf("decisions %v", got)
	}
	if _, ok := f.Blocklisted(zombie); ok {
		t.Fatal("a check must not fence")
	}
}

func TestCheckStartTakesNoLease(t *testing.T) {
	f := enginetest.NewFake()
	im := img("a")
	f.CreateImage(im)
	e := engine.New(f, engine.Options{})
	if _, err := e.Start(ctx, who("hostA", 1, engine.SourceFrontend), []engine.Image{im}, false); err != nil {
		t.Fatal(err)
	}
	inst := f.Open(im, "10.0.0.1", false)
	if _, err := e.Record(ctx, who("hostA", 1, engine.SourceHook), []engine.Image{im}, engine.Scope{}); err != nil {
		t.Fatal(err)
	}
	f.Hide(inst)
	// Another run holds the lease: a check still answers and takes nothing.
	if err := f.AcquireLease(ctx, "one", engine.ClaimObject(42), "host=x run=busy seq=2", time.Minute); err != nil {
		t.Fatal(err)
	}
	res, err := e.Start(ctx, who("hostB", 2, engine.SourceFrontend), []engine.Image{im}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Report.Recorded) != 1 || res.Report.Recorded[0].Action != engine.ActWouldFence || res.Claim.Host != "" {
		t.Fatalf("dry run: %+v", res)
	}
	if _, ok := f.Blocklisted(inst); ok {
		t.Fatal("a dry run fenced")
	}
	if _, err := e.Start(ctx, who("hostB", 0, engine.SourceFrontend), []engine.Image{im}, true); err == nil {
		t.Fatal("a dry run must report that an older deploy would be refused")
	}
}

func TestHookRecognisesItsHost(t *testing.T) {
	ip := func(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }
	for _, tc := range []struct {
		name     string
		fe       engine.Who // the front-end's claim
		hook     engine.Who
		admitted bool
	}{
		{"registered by IP, step ran on the host", engine.Who{Host: "10.0.0.5", HostIPs: ip("10.0.0.5")}, engine.Who{Host: "node1", HostIPs: ip("10.0.0.5")}, true},
		{"FQDN vs short name, step ran on the host", engine.Who{Host: "node1.example.com", HostIPs: ip("10.0.0.5")}, engine.Who{Host: "node1", HostIPs: ip("10.0.0.5")}, true},
		{"a first label is no identity", engine.Who{Host: "node1.example.com"}, engine.Who{Host: "node1", HostIPs: ip("10.0.0.5")}, false},
		{"same first label, other domain", engine.Who{Host: "kvm1.dc1.example", HostIPs: ip("10.0.0.5")}, engine.Who{Host: "kvm1.dc2.example", HostIPs: ip("10.0.1.5")}, false},
		{"registered by IP, step ran on the front-end", engine.Who{Host: "10.0.0.5"}, engine.Who{Host: "node1", HostIPs: ip("10.0.0.5")}, true},
		{"case", engine.Who{Host: "Node1"}, engine.Who{Host: "node1"}, true},
		{"another host", engine.Who{Host: "10.0.0.5", HostIPs: ip("10.0.0.5")}, engine.Who{Host: "node2", HostIPs: ip("10.0.0.6")}, false},
		{"loopback is no identity", engine.Who{Host: "a", HostIPs: ip("127.0.0.1")}, engine.Who{Host: "b", HostIPs: ip("127.0.0.1")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := enginetest.NewFake()
			im := img("a")
			f.CreateImage(im)
			e := engine.New(f, engine.Options{})
			fe := tc.fe
			fe.VM, fe.Seq, fe.Source, fe.Run, fe.Pool = 42, 3, engine.SourceFrontend, "fe", "one"
			if _, err := e.Start(ctx, fe, []engine.Image{im}, false); err != nil {
				t.Fatal(err)
			}
			hk := tc.hook
			hk.VM, hk.Seq, hk.Source, hk.Run, hk.Pool = 42, -1, engine.SourceHook, "hk", "one"
			res, err := e.Start(ctx, hk, []engine.Image{im}, false)
			if tc.admitted {
				if err != nil {
					t.Fatalf("the hook on the front-end's host must be admitted: %v", err)
				}
				if res.Claim.Host != fe.Host || res.Claim.Seq != 3 || res.Claim.Source != engine.SourceFrontend {
					t.Fatalf("the hook must continue the front-end's deploy under its name: %+v", res.Claim)
				}
				return
			}
			var el *engine.ClaimedElsewhereError
			if !errors.As(err, &el) {
				t.Fatalf("want ClaimedElsewhereError, got %v", err)
			}
		})
	}
}
