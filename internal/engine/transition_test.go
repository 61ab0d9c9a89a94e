package engine_test

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

var tNow = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func tAddr(s string) engine.Addr {
	a, err := engine.ParseAddr(s)
	if err != nil {
		panic(err)
	}
	return a
}

// running is deploy 3 of VM 42 on h1 (10.0.0.1), its instance recorded.
func running() *engine.Claim {
	a := tAddr("10.0.0.1:0/11")
	return &engine.Claim{VM: 42, Seq: 3, Host: "h1", HostAddrs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, Source: engine.SourceFrontend,
		State: engine.StateRunning, Addrs: []engine.Addr{a}, Images: map[string][]engine.Addr{"one/a": {a}}, Instance: 1000}
}

func tWho(host string, seq int, source string, ip string) engine.Who {
	w := engine.Who{VM: 42, Seq: seq, Host: host, Source: source, Run: "r", Pool: "one"}
	if ip != "" {
		w.HostIPs = []netip.Addr{netip.MustParseAddr(ip)}
	}
	return w
}

// A start of the claim's own deploy on the claim's own host fences the
// recorded instance only after libvirt said the domain is absent (issue
// 18 item 1); a restore of a guest asleep there only wakes it (item 10).
func TestTransitionStartAsksLibvirt(t *testing.T) {
	absent := engine.Domain{Seen: engine.DomainAbsent, Said: "shut off"}
	for _, tc := range []struct {
		name    string
		seq     int
		domain  engine.Domain
		restore bool
		refusal any // pointer to the wanted error type; nil: admitted
		fence   bool
		wake    bool
	}{
		{"absent: the recorded instance is fenced", 3, absent, false, nil, true, false},
		{"no answer: refused, nothing fenced", 3, engine.Domain{Seen: engine.DomainNoAnswer, Said: "did not answer (virsh domstate one-42: no answer within 10s)"}, false, new(*engine.DomainUnknownError), false, false},
		{"remote local: refused", 3, engine.Domain{Seen: engine.DomainNoAnswer, Said: "was not asked: opennebula.remote is local"}, false, new(*engine.DomainUnknownError), false, false},
		{"nobody asked: refused", 3, engine.Domain{}, false, new(*engine.DomainUnknownError), false, false},
		{"running: refused", 3, engine.Domain{Seen: engine.DomainActive, Said: "running"}, false, new(*engine.AlreadyRunningError), false, false},
		{"asleep, a deploy: refused", 3, engine.Domain{Seen: engine.DomainAsleep, Said: "pmsuspended"}, false, new(*engine.AlreadyRunningError), false, false},
		{"asleep, the restore: woken, nothing fenced", 3, engine.Domain{Seen: engine.DomainAsleep, Said: "pmsuspended"}, true, nil, false, true},
		// oned gives the running instance a newer record when a live
		// migration fails: a newer deploy on its host is no knowledge.
		{"a newer deploy on the same host: refused too", 4, engine.Domain{Seen: engine.DomainNoAnswer, Said: "did not answer"}, false, new(*engine.DomainUnknownError), false, false},
		{"a newer deploy on the same host, libvirt says absent", 4, absent, false, nil, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tWho("h1", tc.seq, engine.SourceFrontend, "10.0.0.1")
			w.Domain, w.Restore = tc.domain, tc.restore
			rd := engine.Transition(running(), engine.Event{Op: engine.OpStart, Who: w, Now: tNow})
			switch {
			case tc.refusal != nil:
				if rd.Refusal == nil || !errors.As(rd.Refusal, tc.refusal) || rd.Fence != nil || rd.Next != nil {
					t.Fatalf("want a %T refusal that fences and writes nothing, got %+v", tc.refusal, rd)
				}
			case rd.Refusal != nil:
				t.Fatalf("refused: %v", rd.Refusal)
			case tc.wake:
				if !rd.Wake || rd.Fence != nil || rd.Next != nil {
					t.Fatalf("the restore of a sleeping guest must only wake it: %+v", rd)
				}
			case tc.fence:
				if rd.Fence == nil || !slices.Contains(rd.Fence.Recorded, tAddr("10.0.0.1:0/11")) {
					t.Fatalf("the recorded instance must be fenced: %+v", rd.Fence)
				}
			}
		})
	}
	// The hook's own start: libvirt starts the domain, so it does not run.
	// (On a claim the hook wrote: on the front-end's running claim that
	// start is a copy started by hand, TestTransitionStartedAgain.)
	hooks := running()
	hooks.Source, hooks.Seq = engine.SourceHook, -1
	rd := engine.Transition(hooks, engine.Event{Op: engine.OpStart, Who: tWho("h1", -1, engine.SourceHook, "10.0.0.1"), Now: tNow})
	if rd.Refusal != nil || rd.Fence == nil {
		t.Fatalf("the hook's start on the claim's host: %+v", rd)
	}
	var du *engine.DomainUnknownError
	w := tWho("h1", 3, engine.SourceFrontend, "10.0.0.1")
	w.Domain = engine.Domain{Seen: engine.DomainNoAnswer, Said: "did not answer (failed to connect to the hypervisor)"}
	if rd := engine.Transition(running(), engine.Event{Op: engine.OpStart, Who: w, Now: tNow}); !errors.As(rd.Refusal, &du) ||
		du.Error() != "VM 42: cannot tell whether one-42 still runs on h1: libvirt did not answer (failed to connect to the hypervisor); not fencing its recorded instance and not starting another copy: retry once libvirt answers on h1 ('virsh -r domstate one-42')" {
		t.Fatalf("the refusal's line: %v", rd.Refusal)
	}
}

// The carry rule: whatever a change writes, every address the previous
// claim records is recorded in the next one or fenced by the change
// (issue 18 item 7).
func TestTransitionCarries(t *testing.T) {
	src, dst, old, other := tAddr("10.0.0.1:0/11"), tAddr("10.0.0.2:0/21"), tAddr("10.0.0.1:0/5"), tAddr("10.0.0.3:0/31")
	withWindow := func() *engine.Claim {
		c := running()
		c.Earlier = []engine.Addr{old}
		c.Window = &engine.Window{Src: "h1", Dst: "h2", Seq: 4, From: 3, Instance: 1000, Opened: tNow, Expires: tNow.Add(time.Hour), DstAddrs: []engine.Addr{dst}}
		return c
	}
	here := func(ip string, as ...engine.Addr) []engine.Seen {
		return []engine.Seen{{Image: "one/b", Exclusive: true, Watchers: as, Clients: as}}
	}
	for _, tc := range []struct {
		name string
		prev *engine.Claim
		ev   engine.Event
	}{
		{"record of another disk on the destination after recover --success", withWindow(),
			engine.Event{Op: engine.OpRecord, Who: tWho("h2", 4, engine.SourceFrontend, "10.0.0.2"), Seen: here("10.0.0.2", other)}},
		{"the front-end's late record of the claim's deploy", withWindow(),
			engine.Event{Op: engine.OpRecord, Who: tWho("h1", 3, engine.SourceFrontend, "10.0.0.1"), Seen: []engine.Seen{{Image: "one/a", Exclusive: true}}}},
		{"premigrate over an old window", withWindow(),
			engine.Event{Op: engine.OpOpenWindow, Who: tWho("h1", 5, engine.SourceFrontend, "10.0.0.1"), Src: "h1", Dst: "h3", TTL: time.Hour}},
		{"premigrate from the old window's destination", withWindow(),
			engine.Event{Op: engine.OpOpenWindow, Who: tWho("h2", 5, engine.SourceFrontend, "10.0.0.2"), Src: "h2", Dst: "h3", TTL: time.Hour}},
		{"postmigrate that does not see the source", withWindow(),
			engine.Event{Op: engine.OpCloseWindow, Who: tWho("h2", 4, engine.SourceFrontend, "10.0.0.2"), Src: "h1", Dst: "h2", Outcome: engine.Migrated,
				Here: []netip.Addr{netip.MustParseAddr("10.0.0.2")}, Seen: []engine.Seen{{Image: "one/a", Exclusive: true}}}},
		{"failmigrate", withWindow(), func() engine.Event {
			w := tWho("h2", 4, engine.SourceFrontend, "10.0.0.2")
			w.Domain = engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobNone, JobSaid: "Job type: None"}
			return engine.Event{Op: engine.OpCloseWindow, Who: w, Src: "h1", Dst: "h2", Outcome: engine.Failed,
				Here: []netip.Addr{netip.MustParseAddr("10.0.0.2")}}
		}()},
		{"a start", withWindow(), engine.Event{Op: engine.OpStart, Who: tWho("h3", 6, engine.SourceFrontend, "10.0.0.3")}},
		{"the handover's record", withWindow(), func() engine.Event {
			w := tWho("h2", -1, engine.SourceHook, "10.0.0.2")
			w.Incoming, w.Instance = withWindow().Window, 1000
			return engine.Event{Op: engine.OpRecord, Who: w, Seen: here("10.0.0.2", other)}
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ev.Now = tNow
			rd := engine.Transition(tc.prev, tc.ev)
			if rd.Refusal != nil {
				t.Fatalf("refused: %v", rd.Refusal)
			}
			if rd.Next == nil {
				t.Fatal("nothing written")
			}
			kept := rd.Next.Recorded()
			if rd.Fence != nil {
				kept = append(kept, rd.Fence.Recorded...)
			}
			for _, a := range []engine.Addr{src, dst, old} {
				if !slices.Contains(kept, a) {
					t.Fatalf("%s was neither recorded nor fenced: next %+v fence %+v", a, rd.Next, rd.Fence)
				}
			}
		})
	}
	// A missed close settles at the next migration: the claim then says
	// where the VM runs (item 8).
	rd := engine.Transition(withWindow(), engine.Event{Op: engine.OpOpenWindow, Who: tWho("h2", 5, engine.SourceFrontend, "10.0.0.2"), Src: "h2", Dst: "h3", TTL: time.Hour, Now: tNow})
	if rd.Next.Host != "h2" || rd.Next.Seq != 4 || !slices.Equal(rd.Next.Addrs, []engine.Addr{dst}) || rd.Next.Window.Src != "h2" || rd.Next.Window.From != 4 {
		t.Fatalf("premigrate from the old window's destination: %+v window %+v", rd.Next, rd.Next.Window)
	}
}

// A front-end start of a window's deploy on its destination (a resume of
// the migrated VM after a missed postmigrate) is a start on the host where
// the claim's instance may run: it needs libvirt's answer there. A start of
// a deploy older than the window's is stale. (Both found by the model.)
func TestTransitionStartAfterWindow(t *testing.T) {
	dst := tAddr("10.0.0.2:0/21")
	withWindow := func() *engine.Claim {
		c := running()
		c.State = engine.StateMigrating
		c.Window = &engine.Window{Src: "h1", Dst: "h2", Seq: 4, From: 3, Instance: 1000, Opened: tNow, Expires: tNow.Add(time.Hour), DstAddrs: []engine.Addr{dst}}
		return c
	}
	w := tWho("h2", 4, engine.SourceFrontend, "10.0.0.2")
	w.Domain = engine.Domain{Seen: engine.DomainNoAnswer, Said: "did not answer"}
	var du *engine.DomainUnknownError
	if rd := engine.Transition(withWindow(), engine.Event{Op: engine.OpStart, Who: w, Now: tNow}); !errors.As(rd.Refusal, &du) {
		t.Fatalf("deploy #4 on the window's destination, libvirt silent: %+v", rd)
	}
	w.Domain = engine.Domain{Seen: engine.DomainAbsent, Said: "shut off"}
	rd := engine.Transition(withWindow(), engine.Event{Op: engine.OpStart, Who: w, Now: tNow})
	if rd.Refusal != nil || rd.Fence == nil || !slices.Contains(rd.Fence.Recorded, dst) || !slices.Contains(rd.Fence.Recorded, tAddr("10.0.0.1:0/11")) {
		t.Fatalf("deploy #4 on the destination, libvirt says absent: fence both copies: %+v", rd)
	}
	var nd *engine.NewerDeployError
	old := tWho("h1", 3, engine.SourceFrontend, "10.0.0.1")
	old.Domain = engine.Domain{Seen: engine.DomainAbsent, Said: "shut off"}
	if rd := engine.Transition(withWindow(), engine.Event{Op: engine.OpStart, Who: old, Now: tNow}); !errors.As(rd.Refusal, &nd) {
		t.Fatalf("a start of deploy #3 while the window of #4 is open: %+v", rd)
	}
}

// The close of a live migration's window tells the two hosts' clients
// apart by address (issue 31 item 1): a failmigrate on a host behind NAT
// toward Ceph, or any close where both hosts show Ceph one address, is
// refused and fences nothing; a postmigrate behind NAT goes on, its scope
// holding the address Ceph sees for the migrated QEMU.
func TestTransitionCloseWindowTellsHostsApart(t *testing.T) {
	nat := netip.MustParseAddr("10.78.0.1")
	migrating := func() *engine.Claim {
		c := running()
		c.Window = &engine.Window{Src: "h1", Dst: "h2", Seq: 4, From: 3, Instance: 1000, Opened: tNow, Expires: tNow.Add(time.Minute)}
		return c
	}
	onSrc := engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobNone}
	for _, tc := range []struct {
		name    string
		claim   func() *engine.Claim
		host    string
		outcome engine.MigrationOutcome
		here    []netip.Addr
		behind  []netip.Addr
		refusal any // nil: decided, with a fence
	}{
		{"postmigrate, direct", migrating, "h2", engine.Migrated, []netip.Addr{netip.MustParseAddr("10.0.0.2")}, nil, nil},
		{"postmigrate behind NAT", migrating, "h2", engine.Migrated, []netip.Addr{netip.MustParseAddr("10.0.0.2"), nat}, []netip.Addr{nat}, nil},
		{"failmigrate on dst, direct", migrating, "h2", engine.Failed, []netip.Addr{netip.MustParseAddr("10.0.0.2")}, nil, nil},
		{"failmigrate on dst behind NAT", migrating, "h2", engine.Failed, []netip.Addr{netip.MustParseAddr("10.0.0.2"), nat}, []netip.Addr{nat}, new(*engine.BehindNATError)},
		{"failmigrate on src behind NAT", migrating, "h1", engine.FailedFromSource, []netip.Addr{netip.MustParseAddr("10.0.0.1"), nat}, []netip.Addr{nat}, new(*engine.BehindNATError)},
		{"postmigrate, dst shows the source's address", migrating, "h2", engine.Migrated, []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil, new(*engine.SharedAddressError)},
		{"failmigrate on dst, dst shows the source's address", migrating, "h2", engine.Failed, []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil, new(*engine.SharedAddressError)},
		{"failmigrate on src, the destination's clients show its address", func() *engine.Claim {
			c := migrating()
			c.Window.DstAddrs = []engine.Addr{tAddr("10.0.0.1:0/77")}
			return c
		}, "h1", engine.FailedFromSource, []netip.Addr{netip.MustParseAddr("10.0.0.1")}, nil, new(*engine.SharedAddressError)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tWho(tc.host, 4, engine.SourceFrontend, "")
			w.Behind, w.Domain = tc.behind, onSrc
			rd := engine.Transition(tc.claim(), engine.Event{Op: engine.OpCloseWindow, Who: w, Now: tNow, Src: "h1", Dst: "h2", Here: tc.here, Outcome: tc.outcome})
			if tc.refusal != nil {
				if rd.Refusal == nil || !errors.As(rd.Refusal, tc.refusal) || rd.Fence != nil || rd.Next != nil {
					t.Fatalf("want a %T refusal that fences and writes nothing, got %+v", tc.refusal, rd)
				}
				if msg := rd.Refusal.Error(); !strings.HasPrefix(msg, "refused, nothing fenced: ") || !strings.Contains(msg, "README: Hosts behind NAT") {
					t.Fatalf("the refusal does not say what happened first and where to read on: %s", msg)
				}
				return
			}
			if rd.Refusal != nil || rd.Fence == nil || rd.Next == nil {
				t.Fatalf("want a fence and a claim, got %+v", rd)
			}
			if !slices.Equal(rd.Fence.Scope.HostIPs, tc.here) {
				t.Fatalf("the fence's scope is %v, want the host's scope %v", rd.Fence.Scope.HostIPs, tc.here)
			}
		})
	}
}

// A front-end start decides on the claim's deploy only when oned's history
// accounts for it (issue 31 item 3): its SEQ on its host, or a failed live
// migration's SEQ kept by the source that oned gave a later record; a
// deploy oned lost (its database restored) refuses every start, a SEQ past
// the claim's included.
func TestTransitionStartDeployOnedLost(t *testing.T) {
	h := func(ps ...any) []engine.Placement {
		var out []engine.Placement
		for i := 0; i < len(ps); i += 2 {
			out = append(out, engine.Placement{Seq: ps[i].(int), Host: ps[i+1].(string)})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		seq     int
		history []engine.Placement
		lost    bool
	}{
		{"the claim's deploy on its host", 4, h(3, "h1", 4, "h2"), false},
		{"a failed migration's SEQ kept by the source", 5, h(2, "h1", 3, "h2", 4, "h1", 5, "h2"), false},
		{"no history known (a version 1 host)", 4, nil, false},
		{"restored: the resume is older", 2, h(1, "h2", 2, "h2"), true},
		{"restored: recreates past the claim's SEQ", 5, h(1, "h2", 2, "h2", 3, "h2", 4, "h2", 5, "h2"), true},
		{"restored: the claim's record made again", 4, []engine.Placement{{Seq: 3, Host: "h1", Stime: 9000}, {Seq: 4, Host: "h2", Stime: 9100}}, true},
		{"the claim's record, same STIME", 4, []engine.Placement{{Seq: 3, Host: "h1", Stime: 3000}, {Seq: 4, Host: "h2", Stime: 9100}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tWho("h2", tc.seq, engine.SourceFrontend, "10.0.0.2")
			w.History, w.Domain = tc.history, engine.Domain{Seen: engine.DomainAbsent, Said: "shut off"}
			c := running() // deploy #3 on h1, its record started at 3000
			c.SeqStime = 3000
			if tc.name == "a failed migration's SEQ kept by the source" {
				c.Seq = 3 // the migration's #3 (h2's record), kept by h1
			}
			rd := engine.Transition(c, engine.Event{Op: engine.OpStart, Who: w, Now: tNow})
			var lost *engine.UnknownDeployError
			if got := errors.As(rd.Refusal, &lost); got != tc.lost || (tc.lost && (rd.Fence != nil || rd.Next != nil)) {
				t.Fatalf("lost deploy refusal %v, want %v: %+v", got, tc.lost, rd)
			}
		})
	}
}

// The hook's start, on the claim's host, of the deploy the front-end
// claimed and whose instance already runs there (recorded) is a copy started
// by hand: refused, nothing fenced. Found by the soak (seed 29, step 33):
// the domain XML of VM 4, terminated on rbdo-a, started there again by
// hand was admitted by VM 4's claim and blocklisted the new VM 7's QEMU on
// the same images. The continuation of the front-end's own deploy (the
// claim starting), a start elsewhere, the front-end's start and a claim the
// hook wrote (no front-end) are not touched by the rule.
func TestTransitionStartedAgain(t *testing.T) {
	starting := func() *engine.Claim {
		c := running()
		c.State, c.Addrs, c.Images = engine.StateStarting, nil, nil
		return c
	}
	hookOnly := func() *engine.Claim {
		c := running()
		c.Source, c.Seq = engine.SourceHook, -1
		return c
	}
	window := func() *engine.Claim {
		c := running()
		c.State, c.Window = engine.StateMigrating, &engine.Window{Src: "h1", Dst: "h2", Seq: 4, Expires: tNow.Add(time.Minute)}
		return c
	}
	for _, tc := range []struct {
		name  string
		prev  *engine.Claim
		who   engine.Who
		again bool
	}{
		{"by hand, the XML's deploy: refused", running(), tWho("h1", 3, engine.SourceHook, "10.0.0.1"), true},
		{"by hand, deploy unknown to the hook: refused", running(), tWho("h1", -1, engine.SourceHook, "10.0.0.1"), true},
		{"the front-end's deploy continued (starting): admitted", starting(), tWho("h1", 3, engine.SourceHook, "10.0.0.1"), false},
		{"a newer deploy: not this rule", running(), tWho("h1", 4, engine.SourceHook, "10.0.0.1"), false},
		{"another host: not this rule", running(), tWho("h2", 3, engine.SourceHook, "10.0.0.2"), false},
		{"the front-end's start: not this rule", running(), func() engine.Who {
			w := tWho("h1", 3, engine.SourceFrontend, "10.0.0.1")
			w.Domain = engine.Domain{Seen: engine.DomainAbsent, Said: "shut off"}
			return w
		}(), false},
		{"a claim the hook wrote (no front-end): not this rule", hookOnly(), tWho("h1", -1, engine.SourceHook, "10.0.0.1"), false},
		{"a migration open: not this rule", window(), tWho("h1", 3, engine.SourceHook, "10.0.0.1"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := engine.Transition(tc.prev, engine.Event{Op: engine.OpStart, Who: tc.who, Now: tNow})
			var again *engine.StartedAgainError
			got := errors.As(rd.Refusal, &again)
			if got != tc.again {
				t.Fatalf("StartedAgainError: got %v (refusal %v), want %v", got, rd.Refusal, tc.again)
			}
			if got && (rd.Fence != nil || rd.Next != nil) {
				t.Fatalf("the refusal must fence and write nothing: %+v", rd)
			}
			if got && !strings.Contains(again.Error(), "deploy #3 already started on h1") {
				t.Fatalf("message: %v", again)
			}
		})
	}
}
