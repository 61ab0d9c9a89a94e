package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
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
		{in: "v1:[::1]:0/7", want: "[::1]:0/7", exact: true},
		{in: "v2:[2001:db8::5]:6800/7", want: "[2001:db8::5]:6800/7", exact: true},
		{in: "any:[::1]:0/7", want: "[::1]:0/7", exact: true},
		{in: "[v2:10.1.2.3:0/42,v1:10.1.2.3:0/42]", want: "10.1.2.3:0/42", exact: true},
		{in: "[v1:10.1.2.3:0/42]", want: "10.1.2.3:0/42", exact: true},
		{in: "[v2:[::1]:0/9,v1:[::1]:0/9]", want: "[::1]:0/9", exact: true},
		// An IPv4-mapped client keeps its form: the blocklist entry is this.
		{in: "[::ffff:10.1.2.3]:0/42", want: "[::ffff:10.1.2.3]:0/42", exact: true},
		{in: "v1:[::ffff:10.1.2.3]:0/42", want: "[::ffff:10.1.2.3]:0/42", exact: true},
		{in: "[fe80::1%eth0]:0/42", bad: true},
		{in: "v1:v2:10.1.2.3:0/42", bad: true},
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
		// An IPv4-mapped client is the same IP as its IPv4 form for scope
		// and allowlist; its blocklist entry keeps the mapped form.
		{name: "mapped client on host in scope", ip: "::ffff:10.0.0.5", scope: engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}},
			decision: engine.DecideFence, action: engine.ActBlocklisted, listed: true},
		{name: "mapped client off host out of scope", ip: "::ffff:10.0.0.5", scope: engine.Scope{Kind: engine.ScopeOffHost, HostIPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}},
			decision: engine.DecideOutOfScope, action: engine.ActNone},
		{name: "mapped client allowlisted", ip: "::ffff:10.9.1.1", lock: true, decision: engine.DecideAllowlisted, action: engine.ActNone},
		{name: "IPv6 on host in scope", ip: "2001:db8::5", lock: true, scope: engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{netip.MustParseAddr("2001:db8::5")}},
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
		// On the destination too only the source's libvirt saying one-42
		// runs there with no job (relayed by the front-end) is knowledge
		// that no migration job may still complete onto dst (model-C).
		wantSourceRefusals(t, e, f, im, dstIPs, engine.Failed, dstC)
		w := who("src", 1, engine.SourceFrontend)
		w.Domain = engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobNone, JobSaid: "Job type: None"}
		res, err := e.CloseWindow(ctx, w, []engine.Image{im}, "src", "dst", dstIPs, engine.Failed)
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
		// Only the source's libvirt saying one-42 runs there with no job
		// is knowledge that the migration ended (issue 18 item 2, model-C):
		// every other answer refuses, fences nothing, keeps the claim.
		wantSourceRefusals(t, e, f, im, srcIPs, engine.FailedFromSource, dst3)
		w := who("src", 1, engine.SourceFrontend)
		w.Domain = engine.Domain{Seen: engine.DomainActive, Said: "paused", Job: engine.JobNone, JobSaid: "Job type: None"}
		res, err := e.CloseWindow(ctx, w, []engine.Image{im}, "src", "dst", srcIPs, engine.FailedFromSource)
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
	res, err := e.CheckRunning(ctx, who("h", -1, engine.SourceCLI), []engine.Image{im})
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

// batchFake is the fake with the ImagesLister extension: it lists by calling
// ImageClients per image and counts its own calls.
type batchFake struct {
	*enginetest.Fake
	calls, images, concurrency int
}

func (b *batchFake) ImagesClients(ctx context.Context, imgs []engine.Image, concurrency int) ([]engine.Clients, []error) {
	b.calls++
	b.images += len(imgs)
	b.concurrency = concurrency
	cls, errs := make([]engine.Clients, len(imgs)), make([]error, len(imgs))
	for i, im := range imgs {
		cls[i], errs[i] = b.Fake.ImageClients(ctx, im)
	}
	return cls, errs
}

// TestInspectUsesImagesLister: a cluster that lists many images at once is
// asked once for all of them, with the configured concurrency, and the report
// is the one the image-by-image path gives.
func TestInspectUsesImagesLister(t *testing.T) {
	f := enginetest.NewFake()
	a, b, c := img("a"), img("b"), img("c")
	f.CreateImage(a)
	f.CreateImage(b)
	f.Open(b, "10.0.0.5", true)
	imgs := []engine.Image{a, b, c} // c does not exist
	want := engine.New(f, engine.Options{Concurrency: 3}).Check(ctx, imgs, engine.Scope{})
	bf := &batchFake{Fake: f}
	got := engine.New(bf, engine.Options{Concurrency: 3}).Check(ctx, imgs, engine.Scope{})
	if bf.calls != 1 || bf.images != 3 || bf.concurrency != 3 {
		t.Fatalf("ImagesClients: %d calls, %d images, concurrency %d; want 1, 3, 3", bf.calls, bf.images, bf.concurrency)
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Fatalf("batch report differs:\n got %s\nwant %s", gj, wj)
	}
	if got.Errors != 1 || !got.Images[2].Missing || len(got.Images[1].Clients) != 1 {
		t.Fatalf("report: %+v", got)
	}
}

// Record keeps per image only the writers of images the VM writes
// exclusively, keeps the entries of images it is not given (a detached disk,
// another access's disks), and stores each image's writer with the image.
func TestRecordPerImage(t *testing.T) {
	f := enginetest.NewFake()
	a, b, iso, sh := img("a"), img("b"), img("iso"), img("sh")
	iso.ReadOnly, sh.Shareable = true, true
	for _, im := range []engine.Image{a, b, iso, sh} {
		f.CreateImage(im)
	}
	e := engine.New(f, engine.Options{})
	here := engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
	ca, cb := f.Open(a, "10.0.0.1", true), f.Open(b, "10.0.0.1", true)
	f.Open(iso, "10.0.0.1", false)
	f.Open(sh, "10.0.0.1", true)
	f.Open(a, "10.0.0.2", false) // not on this host
	w := who("hostA", 3, engine.SourceFrontend)
	if _, err := e.Record(ctx, w, []engine.Image{a, b, iso, sh}, here); err != nil {
		t.Fatal(err)
	}
	// b is detached: a record of the remaining disks keeps b's writer.
	res, err := e.Record(ctx, w, []engine.Image{a, iso}, here)
	if err != nil {
		t.Fatal(err)
	}
	cl := res.Claim
	want := map[string][]engine.Addr{"one/a": {ca}, "one/b": {cb}}
	if len(cl.Images) != len(want) || len(cl.Images["one/a"]) != 1 || cl.Images["one/a"][0] != ca || len(cl.Images["one/b"]) != 1 || cl.Images["one/b"][0] != cb {
		t.Fatalf("per image: %v, want %v", cl.Images, want)
	}
	if len(cl.Addrs) != 2 || !slices.Contains(cl.Addrs, ca) || !slices.Contains(cl.Addrs, cb) {
		t.Fatalf("addrs: %v, want %v and %v", cl.Addrs, ca, cb)
	}
	for _, tc := range []struct {
		im   engine.Image
		want []engine.Addr
	}{{a, []engine.Addr{ca}}, {b, []engine.Addr{cb}}, {iso, nil}, {sh, nil}} {
		rec, err := e.ReadImageRecord(ctx, tc.im)
		if err != nil {
			t.Fatal(err)
		}
		if (rec == nil) != (tc.want == nil) || (rec != nil && (rec.VM != 42 || !slices.Equal(rec.Addrs, tc.want))) {
			t.Fatalf("%s: image record %+v, want %v", tc.im, rec, tc.want)
		}
	}
}

// MoveClaim moves the newest legacy claim (the first disk's pool of an
// older version) to the claim pool once, empties the legacy copies, and
// leaves a claim already in place alone.
func TestMoveClaim(t *testing.T) {
	put := func(f *enginetest.Fake, pool string, c engine.Claim) {
		w := who("old", c.Seq, engine.SourceFrontend)
		w.Pool = pool
		if err := engine.New(f, engine.Options{}).WriteClaim(ctx, w, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name     string
		legacy   map[string]int // pool -> seq of a legacy claim
		inPlace  int            // seq of a claim already in pool one (0: none)
		wantFrom string
		wantSeq  int
	}{
		{name: "nothing anywhere", wantSeq: -1},
		{name: "one legacy claim", legacy: map[string]int{"ssd": 4}, wantFrom: "ssd", wantSeq: 4},
		{name: "the newest of two", legacy: map[string]int{"ssd": 4, "hdd": 6}, wantFrom: "hdd", wantSeq: 6},
		{name: "already in place", legacy: map[string]int{"ssd": 9}, inPlace: 5, wantSeq: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := enginetest.NewFake()
			for p, seq := range tc.legacy {
				put(f, p, engine.Claim{Seq: seq, Host: "h-" + p, State: engine.StateRunning})
			}
			if tc.inPlace > 0 {
				put(f, "one", engine.Claim{Seq: tc.inPlace, Host: "here", State: engine.StateRunning})
			}
			e := engine.New(f, engine.Options{})
			from, err := e.MoveClaim(ctx, who("h", 1, engine.SourceFrontend), []string{"ssd", "hdd", "one"})
			if err != nil || from != tc.wantFrom {
				t.Fatalf("moved from %q (%v), want %q", from, err, tc.wantFrom)
			}
			cl, _ := e.ReadClaim(ctx, "one", 42)
			if (cl == nil && tc.wantSeq >= 0) || (cl != nil && cl.Seq != tc.wantSeq) {
				t.Fatalf("claim in pool one: %+v, want seq %d", cl, tc.wantSeq)
			}
			if tc.wantFrom != "" {
				for p := range tc.legacy {
					if old, _ := e.ReadClaim(ctx, p, 42); old != nil {
						t.Fatalf("legacy copy in %s not emptied: %+v", p, old)
					}
				}
			}
		})
	}
}

// A claim of an older version (addresses, no images): a record of some disks
// keeps the old addresses it does not see now (a hot-attach after an
// upgrade must not drop the running instance's other clients) and drops
// those it sees (re-recorded per image, or another VM's shared client).
func TestRecordKeepsLegacyAddrs(t *testing.T) {
	f := enginetest.NewFake()
	a, iso := img("a"), img("iso")
	iso.ReadOnly = true
	f.CreateImage(a)
	f.CreateImage(iso)
	e := engine.New(f, engine.Options{})
	here := engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}
	other := f.Open(iso, "10.0.0.1", false) // another VM's CD-ROM client
	gone, _ := engine.ParseAddr("10.0.0.1:0/777")
	w := who("hostA", 3, engine.SourceFrontend)
	if err := e.WriteClaim(ctx, w, engine.Claim{Seq: 3, Host: "hostA", State: engine.StateRunning, Addrs: []engine.Addr{gone, other}}); err != nil {
		t.Fatal(err)
	}
	mine := f.Open(a, "10.0.0.1", true)
	res, err := e.Record(ctx, w, []engine.Image{a, iso}, here)
	if err != nil {
		t.Fatal(err)
	}
	cl := res.Claim
	if !slices.Equal(cl.Images[engine.LegacyImage], []engine.Addr{gone}) || !slices.Equal(cl.Images["one/a"], []engine.Addr{mine}) || len(cl.Addrs) != 2 || slices.Contains(cl.Addrs, other) {
		t.Fatalf("claim after record: images %v addrs %v; want legacy [%v], one/a [%v], not %v", cl.Images, cl.Addrs, gone, mine, other)
	}
}

// wantSourceRefusals closes the window of VM 42 (src -> dst) with outcome
// once per answer of sourceRefusals: each must be a MigrationUnknownError
// saying why and "nothing was fenced", leave copy unfenced and the claim
// as it was (same Seq, Host, Updated; its window neither opened nor
// closed).
func wantSourceRefusals(t *testing.T, e *engine.Engine, f *enginetest.Fake, im engine.Image, here []netip.Addr, outcome engine.MigrationOutcome, copy engine.Addr) {
	t.Helper()
	before, _, err := e.ClaimOf(ctx, who("src", 1, engine.SourceFrontend))
	if err != nil || before == nil {
		t.Fatalf("claim before failmigrate: %+v %v", before, err)
	}
	for _, tc := range sourceRefusals {
		w := who("src", 1, engine.SourceFrontend)
		w.Domain = tc.d
		_, err := e.CloseWindow(ctx, w, []engine.Image{im}, "src", "dst", here, outcome)
		var mu *engine.MigrationUnknownError
		if !errors.As(err, &mu) || !strings.Contains(err.Error(), tc.said) || !strings.Contains(err.Error(), "nothing was fenced") {
			t.Fatalf("%s: want a MigrationUnknownError saying %q, got %v", tc.name, tc.said, err)
		}
		if _, ok := f.Blocklisted(copy); ok {
			t.Fatalf("%s: the destination's copy was fenced", tc.name)
		}
		after, _, _ := e.ClaimOf(ctx, w)
		if after == nil || after.Seq != before.Seq || after.Host != before.Host || !after.Updated.Equal(before.Updated) || (after.Window == nil) != (before.Window == nil) {
			t.Fatalf("%s: the claim changed: %+v, was %+v", tc.name, after, before)
		}
	}
}

// sourceRefusals are the answers of the source's libvirt on which a
// failmigrate, on either host, fences nothing (MigrationUnknownError).
var sourceRefusals = []struct {
	name string
	d    engine.Domain
	said string
}{
	{"not asked", engine.Domain{}, "libvirt on src was not asked"},
	{"no answer", engine.Domain{Seen: engine.DomainNoAnswer, Said: "did not answer (virsh domstate one-42: no answer within 10s)"}, "libvirt on src did not answer (virsh domstate"},
	{"domain gone", engine.Domain{Seen: engine.DomainAbsent, Said: "has no such domain"}, "the migration may have completed"},
	{"shut off", engine.Domain{Seen: engine.DomainAbsent, Said: "shut off"}, "not running there (shut off)"},
	{"job runs", engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobRunning, JobSaid: "Job type: Unbounded, Operation: Outgoing migration"}, "a job of the domain runs (Job type: Unbounded"},
	{"job not answered", engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobNoAnswer, JobSaid: "virsh domjobinfo: exit status 1"}, "did not answer about the domain's job"},
	{"job not asked", engine.Domain{Seen: engine.DomainActive, Said: "running"}, "was not asked about the domain's job"},
}
