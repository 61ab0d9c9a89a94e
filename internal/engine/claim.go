package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ClaimObject is the RADOS object that holds VM vm's claim.
func ClaimObject(vm int) string { return "rbdfence.vm." + strconv.Itoa(vm) }

// Claim is the per-VM record kept in the claim object: which deploy of the VM
// may run, where, and the client addresses of the instance that runs.
type Claim struct {
	VM int `json:"vm"`
	// Seq is OpenNebula's HISTORY SEQ of the deploy; -1 when unknown (hook only).
	Seq int `json:"seq"`
	// Host is where the admitted instance runs (or is starting).
	Host string `json:"host"`
	// HostAddrs are Host's own addresses, recorded when the step ran on Host:
	// the libvirt hook recognises its host by them even when OpenNebula
	// names the host differently (an IP, an FQDN) from its host_name.
	HostAddrs []netip.Addr `json:"host_addrs,omitempty"`
	// Source is who wrote the claim: "frontend", "hook" or "cli".
	Source string `json:"source"`
	// State is "starting", "running" or "migrating".
	State string `json:"state"`
	// Addrs are the client addresses of the admitted instance, recorded after it
	// started; the next start elsewhere blocklists them even if not visible.
	Addrs []Addr `json:"addrs,omitempty"`
	// Images are the recorded addresses per image ("pool/name"), for the
	// images the instance writes exclusively (not shareable, not
	// read-only); Addrs is their union. A disk's entry stays when it is
	// detached or recorded through another Ceph access.
	Images map[string][]Addr `json:"images,omitempty"`
	// Instance identifies the admitted instance by the deployment file it
	// runs: the `<one:deployment_time>` OpenNebula writes into every
	// deployment file (time(0) when oned generates it: release-7.4.0
	// src/vmm/LibVirtDriverKVM.cc:2831-2833, release-6.10.5 :2318-2320).
	// Every new deploy, resume from POWEROFF or UNKNOWN, recover --retry
	// or --recreate and reschedule generates a new file, so a new value; a
	// live migration carries the source domain's XML unchanged (`virsh
	// migrate --live` without --xml: release-7.4.0
	// src/vmm_mad/remotes/lib/kvm/opennebula_vm.rb:302-303, called from
	// src/vmm_mad/remotes/kvm/migrate:306) and a restore reuses the
	// checkpoint's embedded XML (src/vmm_mad/remotes/kvm/restore:79,105
	// of both releases), so both keep it. 0 when unknown: the instance
	// started before rbdfence recorded it, the hook's record failed
	// open, or its XML has no OpenNebula metadata. Older rbdfence
	// versions ignore the field (and drop it when they rewrite the claim).
	Instance int64     `json:"instance,omitempty"`
	Window   *Window   `json:"window,omitempty"`
	Run      string    `json:"run"`
	Updated  time.Time `json:"updated"`
}

// Window is an open live-migration handover of the claim's deploy from Src
// to Dst. Only the incoming migration it was opened for is admitted on Dst
// without a fence: the hook's `migrate begin` checks the window and keeps
// it in its mark, and the `prepare` that follows is a handover only while
// the claim still holds that very window (Same). Any other start on Dst is
// judged as a start: a newer deploy fences the source, anything else is
// refused.
type Window struct {
	Src string `json:"src"`
	Dst string `json:"dst"`
	// Seq is the migration's deploy: the destination's HISTORY SEQ, which
	// oned adds before the migrate driver runs (-1 when unknown).
	Seq int `json:"seq"`
	// From is the deploy that runs on Src (the claim's Seq when opened).
	From int `json:"from"`
	// Instance is the identity (Claim.Instance) of the instance the window
	// hands over: the claim's when the window was opened, 0 when unknown.
	// The incoming migration must carry it (see handover).
	Instance int64     `json:"instance,omitempty"`
	Opened   time.Time `json:"opened"`
	Expires  time.Time `json:"expires"`
	// DstAddrs are the client addresses of the instance started on Dst by
	// the migration, recorded by the hook at `started`: until postmigrate
	// says which copy won, a start elsewhere fences both.
	DstAddrs []Addr `json:"dst_addrs,omitempty"`
}

// Same reports whether w and o are the same handover (one premigrate).
func (w *Window) Same(o *Window) bool {
	return w != nil && o != nil && w.Src == o.Src && w.Dst == o.Dst && w.Seq == o.Seq && w.From == o.From && w.Opened.Equal(o.Opened)
}

// Claim states.
const (
	StateStarting  = "starting"
	StateRunning   = "running"
	StateMigrating = "migrating"
)

// Claim sources.
const (
	SourceFrontend = "frontend"
	SourceHook     = "hook"
	SourceCLI      = "cli"
)

// Who identifies the party acting on a claim.
type Who struct {
	VM     int
	Seq    int // -1 when unknown
	Host   string
	Source string
	Run    string // unique id of this run
	Pool   string // pool that holds the claim object
	// HostIPs are the addresses Ceph sees for clients of the machine running
	// this step when it is Host itself (empty when the step runs elsewhere,
	// e.g. on the front-end). Only global unicast addresses identify a host.
	HostIPs []netip.Addr
	// Incoming is the handover this start or record belongs to: the window
	// the hook's `migrate begin` accepted, kept in its incoming-migration
	// mark. nil for every other start (the front-end's always).
	Incoming *Window
	// Instance is the identity (Claim.Instance, the deployment_time) of the
	// domain this step is about: the hook's domain XML, the front-end's
	// deployment file; 0 when unknown.
	Instance int64
}

// sameHost reports whether the claim's host is the host w runs on.
func sameHost(c *Claim, w Who) bool {
	return c != nil && isHost(c.Host, c.HostAddrs, w)
}

// isHost reports whether the host called name, with recorded addresses
// addrs, is the host w runs on: exactly the same name (case-insensitive; a
// first label is no identity: kvm1.dc1 and kvm1.dc2 are two hosts), a name
// that is an IP address Ceph sees for w's clients, or a shared recorded
// address. Only global unicast addresses identify a host.
func isHost(name string, addrs []netip.Addr, w Who) bool {
	if name != "" && strings.EqualFold(name, w.Host) {
		return true
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		addrs = append([]netip.Addr{ip.Unmap()}, addrs...)
	}
	for _, a := range addrs {
		for _, b := range w.HostIPs {
			if a == b && a.IsGlobalUnicast() {
				return true
			}
		}
	}
	return false
}

// mark records w's addresses in c when c's host is w's own, keeping those
// recorded before (the front-end's step on the host, the hook's).
func (w Who) mark(c *Claim) {
	if len(w.HostIPs) == 0 || !isHost(c.Host, c.HostAddrs, w) {
		return
	}
	for _, a := range w.HostIPs {
		if !slices.Contains(c.HostAddrs, a) {
			c.HostAddrs = append(c.HostAddrs, a)
		}
	}
}

func (w Who) cookie() string {
	return fmt.Sprintf("host=%s source=%s run=%s seq=%d", w.Host, w.Source, w.Run, w.Seq)
}

// ClaimHeldError: another run holds the VM's claim lease right now.
type ClaimHeldError struct {
	VM     int
	Holder string
}

func (e *ClaimHeldError) Error() string {
	return fmt.Sprintf("VM %d is being started or migrated by another run (%s); not starting a second copy: retry when it has finished", e.VM, e.Holder)
}

// NewerDeployError: the claim records a newer deploy than ours.
type NewerDeployError struct {
	VM       int
	Ours     int
	Recorded Claim
}

func (e *NewerDeployError) Error() string {
	return fmt.Sprintf("VM %d: deploy #%d is older than deploy #%d claimed by host %s at %s; refusing to fence a newer instance",
		e.VM, e.Ours, e.Recorded.Seq, e.Recorded.Host, e.Recorded.Updated.Format(time.RFC3339))
}

// ClaimedElsewhereError: the same deploy is claimed by another host, or the
// front-end assigned the VM to another host.
type ClaimedElsewhereError struct {
	VM       int
	Host     string
	Recorded Claim
}

func (e *ClaimedElsewhereError) Error() string {
	return fmt.Sprintf("VM %d: deploy #%d was claimed by host %s (%s) at %s, not by %s; refusing a second copy",
		e.VM, e.Recorded.Seq, e.Recorded.Host, e.Recorded.Source, e.Recorded.Updated.Format(time.RFC3339), e.Host)
}

// NoHandoverError: an incoming live migration (or the start or record that
// follows it) that the claim does not show as the handover the front-end
// opened for the VM's current deploy, from its host to this one.
type NoHandoverError struct {
	VM       int
	Host     string
	Why      string
	Recorded *Claim
}

func (e *NoHandoverError) Error() string {
	cl := "no claim"
	if c := e.Recorded; c != nil {
		cl = fmt.Sprintf("the claim holds deploy #%d on host %s (%s, %s)", c.Seq, c.Host, c.Source, c.Updated.Format(time.RFC3339))
	}
	return fmt.Sprintf("VM %d: no live migration to %s was opened by the front-end for the current deploy: %s; %s. "+
		"Migrate the VM with onevm migrate --live, not with virsh", e.VM, e.Host, e.Why, cl)
}

// AlreadyRunningError: the VM's domain already runs on the host the start is
// for (a resume of a VM in UNKNOWN that in fact runs, a recover --retry of a
// deploy that did start). The start would fail ("domain already exists");
// fencing first would make the running VM I/O-dead, so nothing is fenced.
type AlreadyRunningError struct {
	VM     int
	Host   string
	Domain string
	State  string
}

func (e *AlreadyRunningError) Error() string {
	return fmt.Sprintf("VM %d: domain %s is already %s on host %s; not fencing it and not starting a second copy. "+
		"If oned shows the VM in UNKNOWN or failed, it is running: use 'onevm recover --success' instead of a new start",
		e.VM, e.Domain, e.State, e.Host)
}

// ClaimResult is the outcome of a claim operation.
type ClaimResult struct {
	Claim    Claim   `json:"claim"`
	Previous *Claim  `json:"previous,omitempty"`
	Report   *Report `json:"report"`
	// Handover is true when an open migration window for this host meant nothing was fenced.
	Handover bool `json:"handover,omitempty"`
}

// txn runs fn under the VM's claim lease with a compare-and-swap write of the
// claim fn returns, retrying from the read when the write lost. fn receives
// nil when there is no claim yet; returning a nil claim writes nothing.
// errClaimChanged: the claim changed since fn read it (txn reads it again).
var errClaimChanged = errors.New("the claim changed while this run decided")

// stillOurs, given to a txn's fn, returns nil when this run still holds the
// claim's lease and the claim is still what fn was given. fn calls it right
// before it fences: a run that paused (or was slow) past its lease must not
// fence from a stale read of the claim while another run has moved it on
// (a newer deploy's instance may be running by then). It returns a
// *ClaimHeldError when another run holds the lease now, and errClaimChanged
// (txn then starts over from a fresh read) when the claim changed.
type stillOurs func() error

// takeLease takes (or, with our cookie, keeps) the VM's claim lease: a
// *ClaimHeldError names the run that holds it. release gives it up (the
// lease also expires on its own when a holder dies).
func (e *Engine) takeLease(ctx context.Context, w Who) (release func(), err error) {
	oid := ClaimObject(w.VM)
	err = e.c.AcquireLease(ctx, w.Pool, oid, w.cookie(), e.o.Lease)
	var held *LeaseHeldError
	if errors.As(err, &held) {
		return nil, &ClaimHeldError{VM: w.VM, Holder: held.Holder}
	}
	if err != nil {
		return nil, fmt.Errorf("VM %d: cannot take the claim lease %s/%s: %w", w.VM, w.Pool, oid, err)
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = e.c.ReleaseLease(rctx, w.Pool, oid, w.cookie())
	}, nil
}

func (e *Engine) txn(ctx context.Context, w Who, fn func(prev *Claim, fresh stillOurs) (*Claim, error)) (*Claim, error) {
	oid := ClaimObject(w.VM)
	release, err := e.takeLease(ctx, w)
	if err != nil {
		return nil, err
	}
	defer release()
	for attempt := 0; attempt < 5; attempt++ {
		data, ver, err := e.c.ReadObject(ctx, w.Pool, oid)
		if err != nil && !errors.Is(err, ErrObjectNotFound) {
			return nil, fmt.Errorf("VM %d: cannot read claim %s/%s: %w", w.VM, w.Pool, oid, err)
		}
		var prev *Claim
		if len(data) > 0 {
			prev = &Claim{}
			if err := json.Unmarshal(data, prev); err != nil {
				return nil, fmt.Errorf("VM %d: claim %s/%s is corrupt (%v): inspect it with 'rados -p %s get %s -' and remove it if it is garbage", w.VM, w.Pool, oid, err, w.Pool, oid)
			}
		}
		fresh := func() error {
			if _, err := e.takeLease(ctx, w); err != nil {
				return err
			}
			now, nowVer, err := e.c.ReadObject(ctx, w.Pool, oid)
			if err != nil && !errors.Is(err, ErrObjectNotFound) {
				return fmt.Errorf("VM %d: cannot read claim %s/%s: %w", w.VM, w.Pool, oid, err)
			}
			if !bytes.Equal(now, data) {
				return errClaimChanged
			}
			// Same claim: the version moved only with our lease (taking a
			// lock writes the object's lock attribute), so the write that
			// follows compares against the version as it is now.
			ver = nowVer
			return nil
		}
		next, err := fn(prev, fresh)
		if errors.Is(err, errClaimChanged) {
			continue
		}
		if err != nil || next == nil {
			return nil, err
		}
		next.VM, next.Run, next.Updated = w.VM, w.Run, e.now().UTC()
		out, err := json.Marshal(next)
		if err != nil {
			return nil, err
		}
		err = e.c.WriteObject(ctx, w.Pool, oid, out, ver)
		if errors.Is(err, ErrStale) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("VM %d: cannot write claim %s/%s: %w", w.VM, w.Pool, oid, err)
		}
		w.mark(next)
		return next, nil
	}
	return nil, fmt.Errorf("VM %d: claim %s/%s kept changing under us; retry", w.VM, w.Pool, oid)
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
	}
	return nil
}

// Start claims the VM for w and fences every foreign client of its images plus
// the addresses recorded for the previous instance. It refuses (typed error)
// when another run holds the claim, a newer deploy is recorded, or the same
// deploy is claimed by another host. With dryRun it decides and reports but
// changes nothing (no fence, no claim written).
func (e *Engine) Start(ctx context.Context, w Who, imgs []Image, dryRun bool) (*ClaimResult, error) {
	if dryRun {
		return e.checkStart(ctx, w, imgs)
	}
	res := &ClaimResult{}
	written, err := e.txn(ctx, w, func(prev *Claim, fresh stillOurs) (*Claim, error) {
		res.Previous = prev
		if handover(w, prev, e.now()) == nil {
			// The incoming migration the window was opened for: the
			// source runs the VM and stays the claim's instance until
			// postmigrate or failmigrate says which copy won.
			res.Handover = true
			res.Report = e.handover(ctx, imgs)
			next := *prev
			next.State = StateMigrating
			return &next, nil
		}
		// Anything else, a stale incoming-migration mark included, is a
		// start: admitted or refused by the claim, and it fences.
		if err := admit(w, prev, e.now()); err != nil {
			return nil, err
		}
		seq := w.Seq
		if seq < 0 && sameHost(prev, w) {
			seq = prev.Seq // the hook continues the deploy the front-end claimed
		}
		next := &Claim{Seq: seq, Host: w.Host, Source: w.Source, State: StateStarting}
		extra, err := e.recordedFor(ctx, prev, imgs)
		if err != nil {
			return nil, err
		}
		if err := fresh(); err != nil {
			return nil, err
		}
		res.Report = e.Fence(ctx, imgs, Scope{}, extra)
		if err := res.Report.Err(); err != nil {
			return nil, err // claim not written: the next try fences again
		}
		continueDeploy(next, prev, w)
		next.Instance = instanceOf(next, prev, w)
		w.mark(next)
		return next, nil
	})
	if written != nil {
		res.Claim = *written
	}
	return res, err
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

// previousAddrs are the recorded addresses a new start fences besides the
// visible clients: the previous instance's, and those of a copy started by
// a migration whose outcome the claim never learnt.
func previousAddrs(prev *Claim) []Addr {
	if prev == nil {
		return nil
	}
	out := slices.Clone(prev.Addrs)
	if prev.Window != nil {
		for _, a := range prev.Window.DstAddrs {
			out = appendUnique(out, a)
		}
	}
	return out
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
		why = fmt.Sprintf("the open window (%s -> %s, deploy #%d, opened %s) is not the one this migration was accepted in (opened %s)",
			prev.Window.Src, prev.Window.Dst, prev.Window.Seq, prev.Window.Opened.UTC().Format(time.RFC3339), w.Incoming.Opened.UTC().Format(time.RFC3339))
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

// AcceptIncoming is the check of the hook's `migrate begin` on the
// destination: it returns the window when the claim shows an open handover
// the front-end opened for the VM's current deploy, from the claim's host to
// w's host, of the instance w.Instance identifies (the incoming domain's
// deployment_time: a stale copy of an older deploy migrated with virsh
// carries another; see wrongInstance for unknown values), and a
// *NoHandoverError otherwise. It reads the claim without the lease and
// changes nothing.
func (e *Engine) AcceptIncoming(ctx context.Context, w Who) (*Window, error) {
	prev, err := e.ReadClaim(ctx, w.Pool, w.VM)
	if err != nil {
		return nil, err
	}
	if prev != nil && prev.Window != nil {
		w.Incoming = prev.Window
	} else {
		w.Incoming = &Window{}
	}
	if err := handover(w, prev, e.now()); err != nil {
		return nil, err
	}
	if !isHost(prev.Window.Src, prev.HostAddrs, Who{Host: prev.Host}) {
		return nil, &NoHandoverError{VM: w.VM, Host: w.Host, Recorded: prev,
			Why: fmt.Sprintf("the window is from %s, the claim's instance runs on %s", prev.Window.Src, prev.Host)}
	}
	win := *prev.Window
	return &win, nil
}

// checkStart is Start's dry run: it reads the claim without taking the lease
// (a check must never block a real start) and reports what Start would do.
func (e *Engine) checkStart(ctx context.Context, w Who, imgs []Image) (*ClaimResult, error) {
	prev, err := e.ReadClaim(ctx, w.Pool, w.VM)
	if err != nil {
		return nil, err
	}
	res := &ClaimResult{Previous: prev}
	if handover(w, prev, e.now()) == nil {
		res.Handover = true
		res.Report = e.handover(ctx, imgs)
		return res, nil
	}
	if err := admit(w, prev, e.now()); err != nil {
		return res, err
	}
	res.Report = e.Check(ctx, imgs, Scope{})
	extra, err := e.recordedFor(ctx, prev, imgs)
	if err != nil {
		return res, err
	}
	if len(extra) > 0 {
		visible := map[string]bool{}
		for _, im := range res.Report.Images {
			for _, c := range im.Clients {
				visible[c.Address] = true
			}
		}
		for _, a := range extra {
			if !visible[a.String()] && a.Exact() && !e.allowed(a) {
				res.Report.Recorded = append(res.Report.Recorded, ClientReport{Address: a.String(), addr: a, Decision: DecideRecorded, Action: ActWouldFence})
			}
		}
	}
	return res, nil
}

// Record stores the client addresses of the instance that now runs on w.Host,
// marking the claim running: per image, the watchers in scope of each image
// the VM writes exclusively (never a shareable or read-only image's, which
// may be other VMs' clients), in the claim and with the image itself.
// For the destination of the incoming migration the claim's window is for
// (w.Incoming, see handover) it records them in the window instead: the source stays the claim's instance until
// postmigrate or failmigrate.
func (e *Engine) Record(ctx context.Context, w Who, imgs []Image, scope Scope) (*ClaimResult, error) {
	res := &ClaimResult{}
	incoming := false
	written, err := e.txn(ctx, w, func(prev *Claim, fresh stillOurs) (*Claim, error) {
		res.Previous = prev
		incoming = handover(w, prev, e.now()) == nil
		if !incoming {
			if err := admit(w, prev, e.now()); err != nil {
				return nil, err
			}
		}
		r := e.inspect(ctx, imgs, scope, false)
		r.count()
		res.Report = r
		if err := r.Err(); err != nil {
			return nil, err
		}
		if incoming {
			// Only the images the VM writes exclusively, as for the claim's
			// own record: a shared image's clients may be other VMs'.
			var dst Claim
			recordImages(&dst, nil, r, scope)
			next := *prev
			win := *prev.Window
			win.DstAddrs = dst.Addrs
			next.Window = &win
			return &next, nil
		}
		next := &Claim{Seq: w.Seq, Host: w.Host, Source: w.Source, State: StateRunning}
		recordImages(next, prev, r, scope)
		if prev != nil {
			if next.Seq < 0 {
				next.Seq = prev.Seq
			}
			if sameHost(prev, w) {
				next.HostAddrs = slices.Clone(prev.HostAddrs)
			}
			continueDeploy(next, prev, w)
		}
		next.Instance = instanceOf(next, prev, w)
		w.mark(next)
		return next, nil
	})
	if written != nil {
		res.Claim = *written
		if err == nil && !incoming {
			err = e.writeImageRecords(ctx, w, written, imgs)
		}
	}
	return res, err
}

// OpenWindow opens the live-migration handover of deploy w.Seq (the
// destination's HISTORY SEQ) from src to dst for ttl: the incoming migration
// the destination's hook accepts in this window fences nothing. It fences
// nothing itself, and the claim keeps the deploy that runs on src: the
// destination's deploy is only the claim's when postmigrate says so. A
// migration of an older deploy than the claim's is refused. The window
// hands over the claim's instance (Window.Instance); a claim that does not
// know its instance's identity takes w.Instance, the source domain's as
// the step, running on the claim's host, read it from libvirt.
func (e *Engine) OpenWindow(ctx context.Context, w Who, src, dst string, ttl time.Duration) (*ClaimResult, error) {
	res := &ClaimResult{}
	written, err := e.txn(ctx, w, func(prev *Claim, fresh stillOurs) (*Claim, error) {
		res.Previous = prev
		if prev != nil && w.Seq >= 0 && (prev.Seq > w.Seq || (prev.Window != nil && prev.Window.Seq > w.Seq)) {
			return nil, &NewerDeployError{VM: w.VM, Ours: w.Seq, Recorded: *prev}
		}
		var next *Claim
		if prev != nil {
			c := *prev
			next = &c
		} else {
			// No claim yet (the VM started before rbdfence): the source
			// runs the deploy before the migration's, whose HISTORY record
			// oned added before running the migrate driver.
			from := -1
			if w.Seq > 0 {
				from = w.Seq - 1
			}
			next = &Claim{Seq: from, Host: src, Source: w.Source}
		}
		// The window hands over the claim's instance: the incoming
		// migration must carry its identity (handover). A claim that does
		// not know it learns it from the source's domain when the step
		// runs on the claim's host (w.Instance, read from libvirt there).
		if next.Instance == 0 && (prev == nil || sameHost(prev, w)) {
			next.Instance = w.Instance
		}
		next.State = StateMigrating
		if prev != nil && isHost(src, nil, w) && sameHost(prev, w) {
			src = prev.Host // the claim's name for the source (the step runs there)
		}
		now := e.now().UTC()
		next.Window = &Window{Src: src, Dst: dst, Seq: w.Seq, From: next.Seq, Instance: next.Instance, Opened: now, Expires: now.Add(ttl)}
		w.mark(next)
		return next, nil
	})
	if written != nil {
		res.Claim = *written
	}
	return res, err
}

// MigrationOutcome says how a live migration ended.
type MigrationOutcome int

// Outcomes.
const (
	Migrated MigrationOutcome = iota // postmigrate (on dst): the VM runs on dst
	Failed                           // failmigrate (on dst): the VM keeps running on src
	// FailedFromSource is failmigrate run on src because dst cannot be
	// reached: every client not on src is fenced (the copy on dst with it).
	FailedFromSource
)

// CloseWindow closes the handover window and fences the loser of a migration.
// It runs on one of the two hosts, hereIPs being that host's own addresses:
// Migrated (on dst) fences every lock owner that is not on dst and records
// dst's clients as the running instance; Failed (on dst) fences every client
// on dst (a copy that "failed" but runs) and keeps src as the claim's host;
// FailedFromSource (on src, when dst cannot be reached) fences every client
// that is not on src and keeps src.
func (e *Engine) CloseWindow(ctx context.Context, w Who, imgs []Image, src, dst string, hereIPs []netip.Addr, outcome MigrationOutcome) (*ClaimResult, error) {
	scope := Scope{HostIPs: hereIPs}
	res := &ClaimResult{}
	written, err := e.txn(ctx, w, func(prev *Claim, fresh stillOurs) (*Claim, error) {
		res.Previous = prev
		if prev != nil && w.Seq >= 0 && prev.Seq > w.Seq {
			// A late postmigrate or failmigrate of an older deploy: the
			// claim's instance is newer and must not be fenced.
			return nil, &NewerDeployError{VM: w.VM, Ours: w.Seq, Recorded: *prev}
		}
		next := &Claim{Seq: w.Seq, Source: w.Source, State: StateRunning}
		if prev != nil && (next.Seq < 0 || prev.Seq > next.Seq) {
			next.Seq = prev.Seq
		}
		if outcome == Migrated && prev != nil && prev.Window != nil && prev.Window.Seq > next.Seq {
			next.Seq = prev.Window.Seq // the destination's deploy is now the claim's
		}
		switch outcome {
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
			if outcome == Migrated && prev.Window != nil && prev.Window.Instance != 0 {
				next.Instance = prev.Window.Instance
			}
		}
		if outcome != Migrated && prev != nil {
			next.Addrs, next.Images = prev.Addrs, prev.Images
			if strings.EqualFold(prev.Host, src) {
				next.HostAddrs = prev.HostAddrs
			}
		}
		if err := fresh(); err != nil {
			return nil, err
		}
		res.Report = e.Fence(ctx, imgs, scope, nil)
		if err := res.Report.Err(); err != nil {
			return nil, err
		}
		if outcome == Migrated {
			here := Scope{Kind: ScopeOnHost, HostIPs: scope.HostIPs}
			var kept *Claim
			if prev != nil {
				// another access's disks of this VM keep their entries
				kept = &Claim{Images: prev.Images}
			}
			recordImages(next, kept, e.inspect(ctx, imgs, here, false), here)
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
		}
		w.mark(next)
		return next, nil
	})
	if written != nil {
		res.Claim = *written
		if err == nil && outcome == Migrated {
			err = e.writeImageRecords(ctx, w, written, imgs)
		}
	}
	return res, err
}

// CheckRunning reports, without a lease and without changing anything, the
// clients of a running VM's images: the addresses its claim records for the
// running instance are "instance", every other client "would-fence".
func (e *Engine) CheckRunning(ctx context.Context, pool string, vm int, imgs []Image) (*ClaimResult, error) {
	cl, err := e.ReadClaim(ctx, pool, vm)
	if err != nil {
		return nil, err
	}
	res := &ClaimResult{Previous: cl, Report: e.Check(ctx, imgs, Scope{})}
	if cl == nil {
		return res, nil
	}
	res.Claim = *cl
	mine := map[string]bool{}
	for _, a := range cl.Addrs {
		mine[a.String()] = true
	}
	for i := range res.Report.Images {
		for j := range res.Report.Images[i].Clients {
			c := &res.Report.Images[i].Clients[j]
			if mine[c.Address] && c.Decision == DecideFence {
				c.Decision, c.Action = DecideInstance, ActNone
			}
		}
	}
	return res, nil
}

// ReadClaim returns the VM's claim, or nil when there is none. It takes no lease.
func (e *Engine) ReadClaim(ctx context.Context, pool string, vm int) (*Claim, error) {
	data, _, err := e.c.ReadObject(ctx, pool, ClaimObject(vm))
	if errors.Is(err, ErrObjectNotFound) || (err == nil && len(data) == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var c Claim
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("VM %d: claim is corrupt: %v", vm, err)
	}
	return &c, nil
}

// ResetClaim empties the VM's claim under its lease: the operator's way out
// of a claim that refuses every start (rbdfence claim reset, claim gc). It
// refuses with a *ClaimHeldError while a run holds the lease (a start or a
// migration step is under way) and returns the claim it removed (nil when
// there was none; a corrupt claim is removed and returned as nil too).
func (e *Engine) ResetClaim(ctx context.Context, w Who) (*Claim, error) {
	oid := ClaimObject(w.VM)
	release, err := e.takeLease(ctx, w)
	if err != nil {
		return nil, err
	}
	defer release()
	data, ver, err := e.c.ReadObject(ctx, w.Pool, oid)
	if errors.Is(err, ErrObjectNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("VM %d: cannot read claim %s/%s: %w", w.VM, w.Pool, oid, err)
	}
	var prev *Claim
	if len(data) > 0 {
		prev = &Claim{}
		if json.Unmarshal(data, prev) != nil {
			prev = nil
		}
	}
	if len(data) == 0 {
		return nil, nil
	}
	if err := e.c.WriteObject(ctx, w.Pool, oid, nil, ver); err != nil {
		return nil, fmt.Errorf("VM %d: cannot reset claim %s/%s: %w", w.VM, w.Pool, oid, err)
	}
	return prev, nil
}

// WriteClaim replaces the VM's claim under its lease (admin and tests).
func (e *Engine) WriteClaim(ctx context.Context, w Who, c Claim) error {
	_, err := e.txn(ctx, w, func(*Claim, stillOurs) (*Claim, error) { return &c, nil })
	return err
}

func appendUnique(as []Addr, a Addr) []Addr {
	for _, x := range as {
		if x == a {
			return as
		}
	}
	return append(as, a)
}
