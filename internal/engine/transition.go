package engine

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file is the claim's state machine: every change of a VM's claim is
// one call of Transition, a pure function of the claim as read and the
// event, that returns the claim to write, what to fence first and the
// refusal. It does no I/O: the engine (apply.go) takes the lease, reads
// the claim, looks at Ceph where the event needs it, carries out what
// Transition returns (fence, compare-and-swap write) and retries from the
// read when the claim changed. The model-based test explores this same
// function through the engine.

// Op is what a step asks of the VM's claim.
type Op int

// Ops.
const (
	// OpStart: a start of the VM (the front-end's prestart, the hook's
	// `prepare begin`): admit it and fence the previous instance, or
	// refuse. The incoming migration of an open window is a handover.
	OpStart Op = iota + 1
	// OpRecord: the clients of the instance that now runs (the hook's
	// `started begin`, the front-end's record after a deploy or attach).
	OpRecord
	// OpAttach: disks are hot-attached to the running VM: fence every
	// foreign client of them. The claim does not change.
	OpAttach
	// OpOpenWindow: premigrate: open the live-migration handover.
	OpOpenWindow
	// OpCloseWindow: postmigrate or failmigrate: close it, fence the loser.
	OpCloseWindow
	// OpIncoming: the hook's `migrate begin` on the destination: accept
	// the incoming migration of the open window, or refuse it. Changes
	// nothing.
	OpIncoming
	// OpReset: the operator empties the claim (claim reset, claim gc).
	OpReset
	// OpAdopt: a claim found where an older version kept it becomes the
	// VM's claim, unless the VM has one already (MoveClaim).
	OpAdopt
	// OpReplace: write Event.Claim as it is (admin and tests).
	OpReplace
	// OpHostFenced: fence-host fenced the VM's clients on a failed host
	// (Event.Failed): the claim of an instance there is marked fenced with
	// what was fenced (Event.Seen) recorded; a claim of another host is
	// left alone.
	OpHostFenced
)

var opNames = [...]string{OpStart: "start", OpRecord: "record", OpAttach: "attach", OpOpenWindow: "open-window",
	OpCloseWindow: "close-window", OpIncoming: "incoming", OpReset: "reset", OpAdopt: "adopt", OpReplace: "replace", OpHostFenced: "host-fenced"}

func (o Op) String() string {
	if o > 0 && int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", int(o))
}

// Event is one change asked of a VM's claim, with what the step knows.
type Event struct {
	Op  Op
	Who Who
	// Now is the step's clock (windows expire against it).
	Now time.Time
	// Seen is what Ceph shows on the step's images, in the step's scope
	// (OpRecord; OpCloseWindow with Migrated: the destination's clients;
	// OpHostFenced: the clients fenced on the VM's exclusive images).
	Seen []Seen
	// Failed is the failed host (OpHostFenced): its name and addresses.
	Failed Who
	// Src, Dst and TTL: the migration (OpOpenWindow, OpCloseWindow).
	Src, Dst string
	TTL      time.Duration
	// Outcome: how the migration ended (OpCloseWindow).
	Outcome MigrationOutcome
	// Here are the addresses of the host the step runs on (OpCloseWindow).
	Here []netip.Addr
	// Claim is the claim to write (OpAdopt, OpReplace).
	Claim *Claim
	// Allow are the addresses the engine never fences (fence.allow): a
	// recorded address among them is carried, not fenced.
	Allow []netip.Prefix
}

// Seen is what Ceph showed on one of the step's images.
type Seen struct {
	Image string
	// Exclusive: the VM writes the image alone (not shareable, not
	// read-only): only such an image's clients are the VM's own.
	Exclusive bool
	// Watchers are the exact addresses of the image's watchers in the
	// step's scope (on the step's host): the instance's clients.
	Watchers []Addr
	// Clients are the addresses of every client of the image, in scope or
	// not (a claim of an older version is told apart by them).
	Clients []Addr
}

// Ready is what Transition decided: either a refusal, or what to fence and
// the claim to write once the fence completed.
type Ready struct {
	// Refusal, when set, is the claim's refusal: nothing is fenced and
	// nothing written.
	Refusal error
	// Fence is what to fence before the claim is written (nil: nothing).
	Fence *Fence
	// Handover: the start is the incoming migration of the open window:
	// its images' clients are reported, none fenced.
	Handover bool
	// Next is the claim to write (nil: leave the claim as it is).
	Next *Claim
	// Clear empties the claim (OpReset).
	Clear bool
	// ImageRecords: after Next is written, store its per-image addresses
	// with the images (ImageRecordObject).
	ImageRecords bool
	// Window is the accepted handover (OpIncoming).
	Window *Window
	// Wake: the start is the restore of a guest asleep on its host
	// (pmsuspended): it is only woken up; nothing is fenced or written.
	Wake bool
	// Elsewhere (OpHostFenced): the claim names this other host; left
	// alone.
	Elsewhere string

	// disowned are recorded addresses the change showed are not the VM's
	// (a claim of an older version recorded other VMs' clients of shared
	// images): the carry rule drops them.
	disowned []Addr
}

// Fence is what a change fences before its claim is written.
type Fence struct {
	// Scope says which visible clients of the step's images are fenced.
	Scope Scope
	// Recorded are addresses fenced even when they are not visible (an
	// earlier instance cut off from Ceph).
	Recorded []Addr
	// Writers: the last recorded writers of the images the VM writes
	// exclusively (their image records) are fenced too.
	Writers bool
}

// Transition decides one change of a VM's claim: prev is the claim as read
// (nil when there is none), ev the change asked. It is pure: the same
// arguments always give the same Ready, and nothing outside is touched.
func Transition(prev *Claim, ev Event) Ready {
	if prev != nil && ev.Op != OpReplace {
		// The engine reads only w's VM's claim (locate); this is the
		// rule it locates by, kept here so that no change ever decides
		// on another VM's claim, nor on one that may be another's.
		switch prev.Belonging(ev.Who) {
		case ClaimOthers:
			return Ready{Refusal: &OtherVMError{VM: ev.Who.VM, Stime: ev.Who.Stime, Recorded: *prev}}
		case ClaimUnknown:
			return Ready{Refusal: &UnknownClaimError{VM: ev.Who.VM, Recorded: *prev}}
		}
	}
	var rd Ready
	switch ev.Op {
	case OpStart:
		rd = start(prev, ev)
	case OpRecord:
		rd = record(prev, ev)
	case OpAttach:
		rd = attach(prev, ev)
	case OpOpenWindow:
		rd = openWindow(prev, ev)
	case OpCloseWindow:
		rd = closeWindow(prev, ev)
	case OpIncoming:
		rd = incoming(prev, ev)
	case OpHostFenced:
		rd = hostFenced(prev, ev)
	case OpReset:
		rd = Ready{Clear: prev != nil}
	case OpAdopt:
		if prev == nil && ev.Claim != nil {
			c := *ev.Claim
			c.VM, c.Run, c.Updated = ev.Who.VM, ev.Who.Run, ev.Now.UTC()
			rd = Ready{Next: &c}
		}
		return rd
	case OpReplace:
		c := *ev.Claim
		c.VM, c.Run, c.Updated = ev.Who.VM, ev.Who.Run, ev.Now.UTC()
		return Ready{Next: &c}
	default:
		return Ready{Refusal: fmt.Errorf("VM %d: unknown claim change %v", ev.Who.VM, ev.Op)}
	}
	if rd.Next != nil {
		carry(prev, &rd, ev.Allow)
		if ev.Who.Stime != 0 {
			rd.Next.Stime = ev.Who.Stime
		} else if prev != nil {
			rd.Next.Stime = prev.Stime
		}
		rd.Next.VM, rd.Next.Run, rd.Next.Updated = ev.Who.VM, ev.Who.Run, ev.Now.UTC()
		rd.Next.SeqStime = seqStime(prev, rd.Next, ev.Who)
		ev.Who.mark(rd.Next)
	}
	return rd
}

// Belonging says whose a claim is, as far as a step can know.
type Belonging int

// Whose a claim is.
const (
	// ClaimOurs: the claim is the step's VM's.
	ClaimOurs Belonging = iota
	// ClaimOthers: provably another VM's of the same id (another STIME;
	// written, or its instance deployed, before the VM existed).
	ClaimOthers
	// ClaimUnknown: written by an older version (no STIME), and nothing
	// shows it to be the VM's or another's: nothing is decided on it.
	ClaimUnknown
)

// Belonging says whose claim c, read from VM w.VM's object, is. A claim
// records the VM's identity (Claim.Stime); a step that does not know it
// (w.Stime 0: a domain XML without OpenNebula's metadata, the CLI's
// --legacy) takes the claim as its VM's (the admission rules still refuse
// a start elsewhere while the claim says the VM runs there). A claim an
// older version wrote (no Stime) may be another installation's, sharing
// the claim pool, or the VM's from before a restore of oned's database:
//   - it is another VM's when it was written, or its instance deployed,
//     before the VM existed (an earlier VM of the same id);
//   - it is this VM's on evidence that another installation cannot have:
//     the step runs on the claim's host by address (a host belongs to one
//     oned), or the claim's instance is the step's domain (its
//     deployment_time), or the claim's window is to this host, or oned's
//     history of the VM holds the claim's deploy on the claim's host;
//   - else it is unknown: not read as no claim (a start would fence every
//     client of the disks, the live VM's on another host among them), not
//     fenced from, not reset; the step refuses (UnknownClaimError).
func (c *Claim) Belonging(w Who) Belonging {
	switch {
	case w.Stime == 0 || c.Stime == w.Stime:
		return ClaimOurs
	case c.Stime != 0:
		return ClaimOthers
	case !c.Updated.IsZero() && c.Updated.Unix() < w.Stime, c.Instance != 0 && c.Instance < w.Stime:
		return ClaimOthers
	case isHost(c.Host, c.HostAddrs, Who{HostIPs: w.HostIPs}):
		return ClaimOurs
	case c.Instance != 0 && c.Instance == w.Instance:
		return ClaimOurs
	case c.Window != nil && isHost(c.Window.Dst, nil, Who{HostIPs: w.HostIPs}):
		return ClaimOurs
	}
	for _, p := range w.History {
		if p.Seq == c.Seq && p.Host != "" && strings.EqualFold(p.Host, c.Host) {
			return ClaimOurs
		}
	}
	return ClaimUnknown
}

// BelongsTo reports whether c is, on evidence, the claim of w's VM (see
// Belonging): fence-host and claim gc act only on such claims.
func (c *Claim) BelongsTo(w Who) bool { return c.Belonging(w) == ClaimOurs }

// carry is the one rule every rewrite of a claim keeps: an address prev
// records that the change neither records in next nor fences goes into
// next.Earlier, so that the next start still fences it. Nothing is
// forgotten because a step did not know about it (a record of some disks,
// a window that replaced another, a postmigrate that did not see the
// source's client); only a fence, or proof that an address is not the
// VM's, removes one.
func carry(prev *Claim, rd *Ready, allow []netip.Prefix) {
	if prev == nil {
		return
	}
	next := rd.Next
	keep := map[Addr]bool{}
	for _, a := range next.Recorded() {
		keep[a] = true
	}
	if rd.Fence != nil {
		for _, a := range rd.Fence.Recorded {
			if fenceable(a, allow) {
				keep[a] = true
			}
		}
	}
	for _, a := range rd.disowned {
		keep[a] = true
	}
	for _, a := range prev.Recorded() {
		if !keep[a] {
			next.Earlier = append(next.Earlier, a)
			keep[a] = true
		}
	}
	sortAddrs(next.Earlier)
}

// fenceable reports whether a fence of the recorded address a happens: an
// exact address outside fence.allow.
func fenceable(a Addr, allow []netip.Prefix) bool {
	if !a.Exact() {
		return false
	}
	for _, p := range allow {
		if p.Contains(a.IP) || p.Contains(a.IP.Unmap()) {
			return false
		}
	}
	return true
}

// start: the incoming migration of the open window is a handover (the
// source stays the claim's instance until postmigrate or failmigrate says
// which copy won); anything else, a stale incoming-migration mark included,
// is admitted or refused by the claim, and fences every foreign client plus
// the addresses recorded for the previous instance.
func start(prev *Claim, ev Event) Ready {
	w := ev.Who
	if handover(w, prev, ev.Now) == nil {
		next := *prev
		next.State = StateMigrating
		return Ready{Handover: true, Next: &next}
	}
	if w.Source == SourceFrontend {
		switch w.Domain.Seen {
		case DomainActive:
			// A resume of a VM in UNKNOWN that in fact runs, a recover
			// --retry of a deploy that did start: the deploy would fail
			// ("domain already exists"); fencing first would make the
			// running VM I/O-dead.
			return Ready{Refusal: &AlreadyRunningError{VM: w.VM, Host: w.Host, Domain: domainName(w.VM), State: w.Domain.Said}}
		case DomainAsleep:
			if !w.Restore {
				return Ready{Refusal: &AlreadyRunningError{VM: w.VM, Host: w.Host, Domain: domainName(w.VM), State: w.Domain.Said}}
			}
		}
	}
	if unknownDeploy(prev, w) {
		return Ready{Refusal: &UnknownDeployError{VM: w.VM, Ours: w.Seq, Recorded: *prev}}
	}
	if startedAgain(prev, w) {
		return Ready{Refusal: &StartedAgainError{VM: w.VM, Host: w.Host, Recorded: *prev}}
	}
	if err := admit(w, prev, ev.Now); err != nil {
		return Ready{Refusal: err}
	}
	if prev != nil && w.Seq >= 0 && prev.Window != nil && prev.Window.Seq > w.Seq {
		// The claim knows of a migration's newer deploy: a start of an
		// older one is stale (a process that paused and resumed).
		return Ready{Refusal: &NewerDeployError{VM: w.VM, Ours: w.Seq, Recorded: *prev}}
	}
	if s := settle(prev, w.Seq, w); s != nil {
		// oned starts the window's deploy (or a newer one) on its
		// destination: the migration ended there; the instance the claim
		// knows of on this host is the destination's copy.
		prev = s
	}
	if w.Source == SourceFrontend && w.Domain.Seen == DomainAsleep {
		// The restore of a guest that suspended itself to RAM: OpenNebula
		// only wakes the domain (release-7.4.0 vmm_mad/remotes/kvm/restore:
		// 61-71). Its instance is the claim's and keeps running: nothing is
		// fenced, the claim stays.
		return Ready{Wake: true}
	}
	if w.Source == SourceFrontend && prev != nil && live(prev) && sameHost(prev, w) && w.Domain.Seen != DomainAbsent {
		// A start on the host where the claim's instance runs: it is
		// fenced only once libvirt said the domain is absent or shut off
		// there. Whatever the deploy: oned itself gives a running
		// instance a newer HISTORY record when a live migration fails
		// (cp_previous_history, LifeCycleStates.cc:141), and `onevm
		// resume` of it in UNKNOWN then deploys that record on its host.
		said := w.Domain.Said
		if w.Domain.Seen == DomainUnasked || said == "" {
			said = "was not asked"
		}
		return Ready{Refusal: &DomainUnknownError{VM: w.VM, Host: w.Host, Domain: domainName(w.VM), Said: said}}
	}
	seq := w.Seq
	if seq < 0 && sameHost(prev, w) {
		seq = prev.Seq // the hook continues the deploy the front-end claimed
	}
	next := &Claim{Seq: seq, Host: w.Host, Source: w.Source, State: StateStarting}
	continueDeploy(next, prev, w)
	next.Instance = instanceOf(next, prev, w)
	return Ready{Fence: &Fence{Recorded: prev.Recorded(), Writers: true}, Next: next}
}

// record stores the clients of the instance that now runs on w.Host,
// marking the claim running: per image, the watchers in scope of each image
// the VM writes exclusively. For the destination of the incoming migration
// the claim's window is for, it records them in the window instead: the
// source stays the claim's instance until postmigrate or failmigrate.
func record(prev *Claim, ev Event) Ready {
	w := ev.Who
	if handover(w, prev, ev.Now) == nil {
		next := *prev
		win := *prev.Window
		var dst Claim
		recordImages(&dst, nil, ev.Seen)
		win.DstAddrs = dst.Addrs
		next.Window = &win
		return Ready{Next: &next}
	}
	if err := admit(w, prev, ev.Now); err != nil {
		return Ready{Refusal: err}
	}
	if s := settle(prev, w.Seq, w); s != nil {
		// The front-end records the window's deploy on its destination
		// (after an attach there): the migration ended there.
		prev = s
	}
	next := &Claim{Seq: w.Seq, Host: w.Host, Source: w.Source, State: StateRunning}
	disowned := recordImages(next, prev, ev.Seen)
	if prev != nil {
		if next.Seq < 0 {
			next.Seq = prev.Seq
		}
		if sameHost(prev, w) {
			next.HostAddrs = slices.Clone(prev.HostAddrs)
			if next.Seq == prev.Seq && prev.Window != nil {
				// A record of the claim's own deploy (the front-end's
				// background record landing after premigrate) keeps the
				// open handover.
				win := *prev.Window
				next.Window, next.State = &win, prev.State
			}
		}
		continueDeploy(next, prev, w)
	}
	next.Instance = instanceOf(next, prev, w)
	return Ready{Next: next, ImageRecords: true, disowned: disowned}
}

// settle returns prev as the close of its window on the destination would
// have left it, when a step of deploy seq on host on (oned's knowledge)
// shows that the window's migration ended there: the window's
// destination, for its deploy or a newer one, while the claim still holds
// the source's. That happens when postmigrate never completed (oned died
// after libvirt moved the VM; the admin ran `onevm recover --success`).
// Nothing is fenced: the source's addresses stay recorded (carry). nil
// when prev holds no such window.
func settle(prev *Claim, seq int, on Who) *Claim {
	if prev == nil || prev.Window == nil || seq < 0 || seq < prev.Window.Seq || prev.Window.From != prev.Seq || !isHost(prev.Window.Dst, nil, on) {
		return nil
	}
	win := prev.Window
	s := &Claim{Seq: win.Seq, Host: win.Dst, Source: prev.Source, State: StateRunning, Instance: prev.Instance, Earlier: slices.Clone(prev.Earlier)}
	if win.Instance != 0 {
		s.Instance = win.Instance
	}
	if len(win.DstAddrs) > 0 {
		s.Images = map[string][]Addr{LegacyImage: slices.Clone(win.DstAddrs)}
		s.Addrs = slices.Clone(win.DstAddrs)
	}
	for _, a := range prev.Recorded() {
		if !slices.Contains(s.Addrs, a) && !slices.Contains(s.Earlier, a) {
			s.Earlier = append(s.Earlier, a)
		}
	}
	sortAddrs(s.Earlier)
	return s
}

// attach: the disks being hot-attached are not open by the VM yet, so every
// client of them is foreign (shareable and read-only images: reported,
// never fenced), and so are their images' recorded last writers. The claim
// does not change: the record after the attach adds the VM's new clients.
// It refuses as a start does when the claim says another deploy or host
// runs the VM.
func attach(prev *Claim, ev Event) Ready {
	if err := admit(ev.Who, prev, ev.Now); err != nil {
		return Ready{Refusal: err}
	}
	return Ready{Fence: &Fence{Writers: true}}
}

// openWindow opens the live-migration handover of deploy w.Seq (the
// destination's HISTORY SEQ) from Src to Dst for TTL. It fences nothing,
// and the claim keeps the deploy that runs on Src: the destination's deploy
// is only the claim's when postmigrate says so. A migration of an older
// deploy than the claim's is refused. The window hands over the claim's
// instance (Window.Instance); a claim that does not know its instance's
// identity takes w.Instance, the source domain's as the step, running on
// the claim's host, read it from libvirt.
func openWindow(prev *Claim, ev Event) Ready {
	w, src := ev.Who, ev.Src
	if prev != nil && w.Seq >= 0 && (prev.Seq > w.Seq || (prev.Window != nil && prev.Window.Seq > w.Seq)) {
		return Ready{Refusal: &NewerDeployError{VM: w.VM, Ours: w.Seq, Recorded: *prev}}
	}
	if s := settle(prev, w.Seq-1, Who{Host: src, HostIPs: hostIPsIf(isHost(src, nil, w), w)}); s != nil && prev.Window.Seq < w.Seq {
		// oned migrates the VM from the previous window's destination: that
		// migration ended there and its close step never came.
		prev = s
	}
	var next *Claim
	if prev != nil {
		c := *prev
		c.Earlier = slices.Clone(prev.Earlier)
		next = &c
	} else {
		// No claim yet (the VM started before rbdfence): the source runs
		// the deploy before the migration's, whose HISTORY record oned
		// added before running the migrate driver.
		from := -1
		if w.Seq > 0 {
			from = w.Seq - 1
		}
		next = &Claim{Seq: from, Host: src, Source: w.Source}
	}
	// The window hands over the claim's instance: the incoming migration
	// must carry its identity (handover). A claim that does not know it
	// learns it from the source's domain when the step runs on the claim's
	// host (w.Instance, read from libvirt there).
	if next.Instance == 0 && (prev == nil || sameHost(prev, w)) {
		next.Instance = w.Instance
	}
	next.State = StateMigrating
	if prev != nil && isHost(src, nil, w) && sameHost(prev, w) {
		src = prev.Host // the claim's name for the source (the step runs there)
	}
	now := ev.Now.UTC()
	next.Window = &Window{Src: src, Dst: ev.Dst, Seq: w.Seq, From: next.Seq, Instance: next.Instance, Run: w.Run, Opened: now, Expires: now.Add(ev.TTL)}
	return Ready{Next: next}
}

// closeWindow closes the handover window and fences the loser of a
// migration. It runs on one of the two hosts, ev.Here being that host's
// own addresses: Migrated (on dst) fences every lock owner that is not on
// dst and records dst's clients (ev.Seen) as the running instance; Failed
// (on dst) fences every client on dst (a copy that "failed" but runs) and
// keeps src as the claim's host; FailedFromSource (on src, when dst cannot
// be reached) fences every client that is not on src and keeps src.
func closeWindow(prev *Claim, ev Event) Ready {
	w, src, dst := ev.Who, ev.Src, ev.Dst
	if prev != nil && w.Seq >= 0 && prev.Seq > w.Seq {
		// A late postmigrate or failmigrate of an older deploy: the
		// claim's instance is newer and must not be fenced.
		return Ready{Refusal: &NewerDeployError{VM: w.VM, Ours: w.Seq, Recorded: *prev}}
	}
	if ev.Outcome != Migrated && !(w.Domain.Seen == DomainActive && w.Domain.Job == JobNone) {
		// Fencing the destination's copy (Failed, on the destination) or
		// every client that is not on the source (FailedFromSource) is
		// right only when the source's libvirt says the VM runs there and
		// no migration job of it does: a failmigrate of a retried
		// migration (onevm recover --retry of a migration whose action
		// was abandoned, LifeCycleActions.cc:1796-1797 of release-7.4.0)
		// runs while the first attempt's virsh migrate may still complete
		// onto the destination (model-C). w.Domain is the source's answer
		// in both: asked by the step itself on the source, relayed by the
		// front-end to the destination (hoststep.Request.SrcDomain).
		return Ready{Refusal: &MigrationUnknownError{VM: w.VM, Src: src, Dst: dst, Domain: domainName(w.VM), Said: jobSaid(w.Domain)}}
	}
	if err := tellApart(prev, ev); err != nil {
		return Ready{Refusal: err}
	}
	scope := Scope{HostIPs: ev.Here}
	next := &Claim{Seq: w.Seq, Source: w.Source, State: StateRunning}
	if prev != nil && (next.Seq < 0 || prev.Seq > next.Seq) {
		next.Seq = prev.Seq
	}
	if ev.Outcome == Migrated && prev != nil && prev.Window != nil && prev.Window.Seq > next.Seq {
		next.Seq = prev.Window.Seq // the destination's deploy is now the claim's
	}
	switch ev.Outcome {
	case Migrated:
		scope.Kind, scope.LockersOnly = ScopeOffHost, true
		next.Host = dst
	case FailedFromSource:
		scope.Kind = ScopeOffHost
		next.Host = src
	default:
		scope.Kind = ScopeOnHost
		next.Host = src
	}
	if prev != nil {
		// A live migration keeps the domain XML, so the instance's
		// identity, whichever copy won.
		next.Instance = prev.Instance
		if ev.Outcome == Migrated && prev.Window != nil && prev.Window.Instance != 0 {
			next.Instance = prev.Window.Instance
		}
	}
	rd := Ready{Fence: &Fence{Scope: scope}, Next: next}
	if ev.Outcome != Migrated && prev != nil {
		next.Addrs, next.Images, next.Earlier = prev.Addrs, prev.Images, slices.Clone(prev.Earlier)
		if strings.EqualFold(prev.Host, src) {
			next.HostAddrs = prev.HostAddrs
		}
		if prev.Window != nil {
			// The destination's copy loses: fenced even where it is not
			// visible (its client cut off from Ceph).
			rd.Fence.Recorded = slices.Clone(prev.Window.DstAddrs)
		}
	}
	if ev.Outcome == Migrated {
		var kept *Claim
		if prev != nil {
			// another access's disks of this VM keep their entries
			kept = &Claim{Images: prev.Images}
		}
		recordImages(next, kept, ev.Seen)
		if prev != nil && prev.Window != nil {
			// The destination's addresses the hook recorded at started
			// and that are not visible now (its host cut off) stay
			// recorded, image unknown.
			for _, a := range prev.Window.DstAddrs {
				if !slices.Contains(next.Addrs, a) {
					if next.Images == nil {
						next.Images = map[string][]Addr{}
					}
					next.Images[LegacyImage] = appendUnique(next.Images[LegacyImage], a)
					next.Addrs = appendUnique(next.Addrs, a)
				}
			}
			sortAddrs(next.Addrs)
		}
		rd.ImageRecords = true
	}
	return rd
}

// hostFenced marks the claim of the VM's instance on the failed host fenced:
// the instance and its recorded addresses stay (the deploy, the host and
// its addresses, the identity, every entry it did not fence), the clients
// fenced on its exclusive images are added, so that the reschedule
// elsewhere is admitted (StateFenced) and fences them again. An open window
// is closed: its destination copy's addresses stay recorded (carry). A
// claim that names another host (a start elsewhere won the race) is left
// alone.
func hostFenced(prev *Claim, ev Event) Ready {
	w := ev.Who
	if prev != nil && !sameHost(prev, ev.Failed) {
		return Ready{Elsewhere: prev.Host}
	}
	next := &Claim{Seq: w.Seq, Host: ev.Failed.Host, Source: SourceHostFence}
	if prev != nil {
		next.Seq, next.Host, next.HostAddrs, next.Instance = max(prev.Seq, w.Seq), prev.Host, prev.HostAddrs, prev.Instance
		next.Addrs = slices.Clone(prev.Addrs)
		next.Earlier = slices.Clone(prev.Earlier)
		if prev.Images != nil {
			next.Images = map[string][]Addr{}
			for k, as := range prev.Images {
				next.Images[k] = slices.Clone(as)
			}
		}
	}
	next.State = StateFenced
	for _, s := range ev.Seen {
		for _, a := range s.Watchers {
			if next.Images == nil {
				next.Images = map[string][]Addr{}
			}
			if !slices.Contains(next.Images[s.Image], a) {
				next.Images[s.Image] = append(next.Images[s.Image], a)
				sortAddrs(next.Images[s.Image])
			}
			next.Addrs = appendUnique(next.Addrs, a)
		}
	}
	sortAddrs(next.Addrs)
	return Ready{Next: next}
}

// incoming accepts the incoming migration of the window the claim holds:
// one the front-end opened for the VM's current deploy, from the claim's
// host to w's host, of the instance w.Instance identifies (see
// wrongInstance). It changes nothing.
func incoming(prev *Claim, ev Event) Ready {
	w := ev.Who
	if prev != nil && prev.Window != nil {
		w.Incoming = prev.Window
	} else {
		w.Incoming = &Window{}
	}
	if err := handover(w, prev, ev.Now); err != nil {
		return Ready{Refusal: err}
	}
	if !isHost(prev.Window.Src, prev.HostAddrs, Who{Host: prev.Host}) {
		return Ready{Refusal: &NoHandoverError{VM: w.VM, Host: w.Host, Recorded: prev,
			Why: fmt.Sprintf("the window is from %s, the claim's instance runs on %s", prev.Window.Src, prev.Host)}}
	}
	win := *prev.Window
	return Ready{Window: &win}
}

// admit decides whether w may start the VM given the recorded claim. A
// migration window admits nothing here: only handover (the hook's start of
// the very migration the window is for) skips these checks.
func admit(w Who, prev *Claim, now time.Time) error {
	if prev == nil {
		return nil
	}
	switch {
	case w.Seq >= 0 && prev.Seq > w.Seq:
		return &NewerDeployError{VM: w.VM, Ours: w.Seq, Recorded: *prev}
	case w.Seq >= 0 && prev.Seq == w.Seq && !sameHost(prev, w):
		return &ClaimedElsewhereError{VM: w.VM, Host: w.Host, Recorded: *prev}
	case w.Seq < 0 && prev.Seq >= 0 && prev.Source == SourceFrontend && !sameHost(prev, w):
		// The front-end assigned this deploy to another host: a start here is stale.
		return &ClaimedElsewhereError{VM: w.VM, Host: w.Host, Recorded: *prev}
	case w.Seq < 0 && prev.Window != nil:
		// A live migration is open (or was never settled) in the claim:
		// the hook cannot tell which copy runs the VM. Only the
		// migration's own handover is admitted (handover, before admit).
		return &MigrationOpenError{VM: w.VM, Host: w.Host, Recorded: *prev}
	case w.Seq < 0 && live(prev) && !sameHost(prev, w):
		// The hook does not know the deploy: while the claim says the VM
		// runs (or is starting) on another host, whoever wrote it, a start
		// here may be a stale copy. A reschedule goes through the front-end
		// (which knows the deploy) or follows fence-host (StateFenced).
		return &ClaimedElsewhereError{VM: w.VM, Host: w.Host, Recorded: *prev}
	}
	return nil
}

// startedAgain reports whether w is the hook's start, on the claim's host,
// of the deploy the front-end claimed, whose instance already started
// there: the claim records it running, with no migration open. OpenNebula's
// starts all pass the front-end first, which writes the claim starting
// (start, below); kvm/deploy runs `virsh create` once (release-7.4.0
// src/vmm_mad/remotes/kvm/deploy:110). So the start is a copy started by
// hand (StartedAgainError), e.g. the domain of a VM terminated on this
// host, whose images the claim's recorded instance no longer holds.
func startedAgain(prev *Claim, w Who) bool {
	return !startedAgainOff && w.Source == SourceHook && prev != nil && prev.Source == SourceFrontend &&
		prev.State == StateRunning && prev.Window == nil && sameHost(prev, w) && (w.Seq < 0 || w.Seq == prev.Seq)
}

// startedAgainOff turns startedAgain off: false in every binary, set only
// by the model's mutant ignore-started-refusal (SetStartedAgainOffForModel).
var startedAgainOff = false

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// domainName is OpenNebula's libvirt name of VM vm.
func domainName(vm int) string { return "one-" + strconv.Itoa(vm) }

// live reports whether the claim says an instance runs or is starting.
func live(c *Claim) bool {
	switch c.State {
	case StateStarting, StateRunning, StateMigrating:
		return true
	}
	return false
}

// hostIPsIf is w's addresses when cond (the step runs on the host in
// question), none otherwise.
func hostIPsIf(cond bool, w Who) []netip.Addr {
	if cond {
		return w.HostIPs
	}
	return nil
}

// continueDeploy keeps, when the hook continues the deploy the front-end
// claimed for this host, OpenNebula's name for the host, the front-end's
// authority over the deploy, and the host addresses recorded so far.
func continueDeploy(next, prev *Claim, w Who) {
	if prev != nil && prev.Source == SourceFrontend && w.Source == SourceHook && sameHost(prev, w) {
		next.Host = prev.Host
		next.Source = SourceFrontend
		next.HostAddrs = slices.Clone(prev.HostAddrs)
	}
}

// handover returns nil when w is the incoming migration of the window the
// claim holds: w carries that window (from the hook's mark), the claim
// still holds the same one, it is open, and w runs on its destination.
func handover(w Who, prev *Claim, now time.Time) error {
	why := ""
	switch {
	case w.Incoming == nil:
		why = "this start is not an incoming migration"
	case prev == nil:
		why = "the VM has no claim"
	case prev.Window == nil:
		why = "no migration window is open"
	case !now.Before(prev.Window.Expires):
		why = "the migration window expired at " + prev.Window.Expires.UTC().Format(time.RFC3339)
	case !isHost(prev.Window.Dst, nil, w):
		why = fmt.Sprintf("the open window is for a migration %s -> %s", prev.Window.Src, prev.Window.Dst)
	case !prev.Window.Same(w.Incoming):
		why = fmt.Sprintf("the open window (%s -> %s, deploy #%d, opened %s by run %s) is not the one this migration was accepted in (opened %s by run %s)",
			prev.Window.Src, prev.Window.Dst, prev.Window.Seq, prev.Window.Opened.UTC().Format(time.RFC3339), orDash(prev.Window.Run),
			w.Incoming.Opened.UTC().Format(time.RFC3339), orDash(w.Incoming.Run))
	case prev.Window.From != prev.Seq:
		why = fmt.Sprintf("the window was opened for deploy #%d, the claim holds deploy #%d", prev.Window.From, prev.Seq)
	default:
		why = wrongInstance(prev.Window.Instance, w.Instance)
		if why == "" {
			return nil
		}
	}
	return &NoHandoverError{VM: w.VM, Host: w.Host, Why: why, Recorded: prev}
}

// wrongInstance returns why an incoming migration whose domain carries
// identity got (its `<one:deployment_time>`, 0 when absent) is not the
// instance a window handing over identity want hands over, or "" when it
// may be. The destination's hook cannot see where a migration comes from
// (libvirt gives it the domain XML only); the identity is what tells the
// copy the front-end migrates (whose XML is the claim's instance's) from a
// stale copy of an older deploy that somebody migrates with virsh into the
// open window.
//
//   - want known, got the same: the claim's instance (or a copy made from
//     the same deployment file, see the README's residuals).
//   - want known, got another value: a copy of another deploy: refused.
//   - want known, got 0: refused. Every deployment file of OpenNebula 5.x
//     to 7.x carries the metadata, and the instance the window hands over
//     had it; a domain without it is not that instance.
//   - want 0 (the claim never learnt its instance's identity: the
//     instance started before this version, or its hook record failed
//     open, and premigrate could not read it from libvirt on the source
//     either): nothing to compare, the window, host and deploy checks
//     alone decide, as before. The next start of the VM records it.
func wrongInstance(want, got int64) string {
	switch {
	case want == 0 || got == want:
		return ""
	case got == 0:
		return fmt.Sprintf("the incoming domain carries no <one:deployment_time>, the window hands over the instance deployed at %s (deployment_time %d): "+
			"it is not that instance; destroy the stray copy on its host", deployTime(want), want)
	}
	return fmt.Sprintf("the incoming domain was deployed at %s (deployment_time %d), the window hands over the instance deployed at %s (deployment_time %d): "+
		"it is a stale copy of another deploy; destroy it on its host (virsh destroy)", deployTime(got), got, deployTime(want), want)
}

func deployTime(t int64) string { return time.Unix(t, 0).UTC().Format(time.RFC3339) }

// instanceOf is the identity to record for the instance of next, which w
// admits or records after prev: w's when w knows it, else prev's when next
// continues prev's deploy on the same host (the front-end's record after
// the hook's, a restore whose front-end step has no deployment file), else
// unknown.
func instanceOf(next, prev *Claim, w Who) int64 {
	switch {
	case w.Instance != 0:
		return w.Instance
	case prev != nil && prev.Seq == next.Seq && sameHost(prev, w):
		return prev.Instance
	}
	return 0
}

// jobSaid puts what the source's libvirt said about the VM's domain and
// its job in words, for a MigrationUnknownError.
func jobSaid(d Domain) string {
	switch {
	case d.Seen == DomainUnasked:
		return "was not asked"
	case d.Seen == DomainNoAnswer:
		return d.Said
	case d.Seen == DomainAbsent:
		return "says the domain is not running there (" + d.Said + "): the migration may have completed"
	case d.Seen != DomainActive:
		return "says the domain is " + d.Said + " there"
	case d.Job == JobRunning:
		return "says a job of the domain runs (" + d.JobSaid + ")"
	case d.Job == JobNoAnswer:
		return "did not answer about the domain's job (" + d.JobSaid + ")"
	}
	return "was not asked about the domain's job"
}

// tellApart refuses the close of a migration's window when the fence it
// decides, which tells the two hosts' clients apart by address, cannot:
//   - a failmigrate (Failed, FailedFromSource) on a host whose clients show
//     Ceph an address that is not the host's own (w.Behind: NAT toward
//     Ceph). The other host may show Ceph the same address, and fencing
//     "every client here" (Failed) would fence the running source, "every
//     client not here" (FailedFromSource) would miss the destination's copy.
//     A postmigrate goes on: it fences only lock owners outside this host's
//     scope, which holds the address Ceph sees for the migrated QEMU, so the
//     live copy is never among them;
//   - any close on a host whose scope holds an address the claim records for
//     the other host (the source's host addresses, the destination's
//     clients): the two hosts show Ceph one address.
func tellApart(prev *Claim, ev Event) error {
	w := ev.Who
	if len(w.Behind) > 0 && ev.Outcome != Migrated {
		return &BehindNATError{VM: w.VM, Host: w.Host, Seen: w.Behind, Src: ev.Src, Dst: ev.Dst}
	}
	other, addrs := otherHost(prev, ev)
	for _, a := range addrs {
		if a.IsGlobalUnicast() && slices.Contains(ev.Here, a) {
			return &SharedAddressError{VM: w.VM, Hosts: [2]string{w.Host, other}, Addr: a}
		}
	}
	return nil
}

// otherHost is the other host of the migration a close runs for, and the
// addresses the claim records for it: for a close on the destination, the
// source (its name when it is an IP, the claim's host addresses while the
// claim's host is the source); for FailedFromSource, on the source, the
// destination (its name when it is an IP, the window's destination clients).
func otherHost(prev *Claim, ev Event) (string, []netip.Addr) {
	name := ev.Src
	if ev.Outcome == FailedFromSource {
		name = ev.Dst
	}
	var out []netip.Addr
	if ip, err := netip.ParseAddr(name); err == nil {
		out = append(out, ip.Unmap())
	}
	if prev == nil {
		return name, out
	}
	switch {
	case ev.Outcome == FailedFromSource && prev.Window != nil:
		for _, a := range prev.Window.DstAddrs {
			out = append(out, a.IP.Unmap())
		}
	case ev.Outcome != FailedFromSource && strings.EqualFold(prev.Host, ev.Src):
		out = append(out, prev.HostAddrs...)
	}
	return name, out
}

// seqStime is the STIME of next's deploy: oned's, when the step knows the
// record of next.Seq (a front-end step); else prev's, when next keeps its
// deploy; else unknown (0).
func seqStime(prev, next *Claim, w Who) int64 {
	for _, p := range w.History {
		if p.Seq == next.Seq && p.Stime != 0 {
			return p.Stime
		}
	}
	if prev != nil && prev.Seq == next.Seq {
		return prev.SeqStime
	}
	return 0
}

// unknownDeploy reports whether a front-end start meets a claim that says
// the VM runs (or starts) as a deploy the front-end wrote and that oned's
// history of the VM does not account for. oned's history holds every
// HISTORY record (one.vm.info renders them all: to_xml_extended with
// n_history 2, src/vm/VirtualMachine.cc:2610-2627 of release-7.4.0), and a
// claim's deploy is one of them: the record of its SEQ, the one it was
// written for (same STIME, when both are known), with a record on the
// claim's host from that SEQ on (its own, or after a failed live migration,
// which keeps the migration's SEQ on the source, the later record oned
// gives the source: cp_previous_history, src/lcm/LifeCycleStates.cc:141).
// A claim's deploy oned has no such record of is one it lost: its database
// restored from an older backup. A SEQ above the claim's (each refused
// deploy and each recover --recreate raises it) is then no knowledge that
// the claim's instance is gone, and neither is a record oned makes again
// with the claim's SEQ (another STIME).
func unknownDeploy(prev *Claim, w Who) bool {
	if prev == nil || w.Source != SourceFrontend || len(w.History) == 0 || !live(prev) || prev.Source != SourceFrontend || prev.Seq < 0 {
		return false
	}
	seq, onHost := false, false
	for _, p := range w.History {
		seq = seq || (p.Seq == prev.Seq && (p.Stime == 0 || prev.SeqStime == 0 || p.Stime == prev.SeqStime))
		onHost = onHost || (p.Seq >= prev.Seq && strings.EqualFold(p.Host, prev.Host))
	}
	return !(seq && onHost)
}
