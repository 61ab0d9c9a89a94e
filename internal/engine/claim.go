package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
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
	Images  map[string][]Addr `json:"images,omitempty"`
	Window  *Window           `json:"window,omitempty"`
	Run     string            `json:"run"`
	Updated time.Time         `json:"updated"`
}

// Window is an open live-migration handover: starts on Dst do not fence.
type Window struct {
	Src     string    `json:"src"`
	Dst     string    `json:"dst"`
	Opened  time.Time `json:"opened"`
	Expires time.Time `json:"expires"`
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
}

// sameHost reports whether the claim's host is the host w runs on: the same
// name (case-insensitive, or the same first label: "node1" and
// "node1.example.com"), or a shared address.
func sameHost(c *Claim, w Who) bool {
	if c == nil {
		return false
	}
	if strings.EqualFold(c.Host, w.Host) || (shortName(c.Host) != "" && strings.EqualFold(shortName(c.Host), shortName(w.Host))) {
		return true
	}
	for _, a := range c.HostAddrs {
		for _, b := range w.HostIPs {
			if a == b && a.IsGlobalUnicast() {
				return true
			}
		}
	}
	return false
}

// shortName is a host name's first label ("" for an IP address).
func shortName(h string) string {
	if _, err := netip.ParseAddr(h); err == nil {
		return ""
	}
	short, _, _ := strings.Cut(h, ".")
	return short
}

// mark records w's addresses in c when c's host is w's own.
func (w Who) mark(c *Claim) {
	if len(w.HostIPs) > 0 && strings.EqualFold(c.Host, w.Host) {
		c.HostAddrs = w.HostIPs
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
func (e *Engine) txn(ctx context.Context, w Who, fn func(prev *Claim) (*Claim, error)) (*Claim, error) {
	oid := ClaimObject(w.VM)
	err := e.c.AcquireLease(ctx, w.Pool, oid, w.cookie(), e.o.Lease)
	var held *LeaseHeldError
	if errors.As(err, &held) {
		return nil, &ClaimHeldError{VM: w.VM, Holder: held.Holder}
	}
	if err != nil {
		return nil, fmt.Errorf("VM %d: cannot take the claim lease %s/%s: %w", w.VM, w.Pool, oid, err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = e.c.ReleaseLease(rctx, w.Pool, oid, w.cookie()) // the lease expires on its own
	}()
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
		next, err := fn(prev)
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

// admit decides whether w may start the VM given the recorded claim.
func admit(w Who, prev *Claim, now time.Time) error {
	if prev == nil || inWindow(prev, w.Host, now) {
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
	written, err := e.txn(ctx, w, func(prev *Claim) (*Claim, error) {
		res.Previous = prev
		if err := admit(w, prev, e.now()); err != nil {
			return nil, err
		}
		seq := w.Seq
		if seq < 0 && sameHost(prev, w) {
			seq = prev.Seq // the hook continues the deploy the front-end claimed
		}
		next := &Claim{Seq: seq, Host: w.Host, Source: w.Source, State: StateStarting}
		if inWindow(prev, w.Host, e.now()) {
			res.Handover = true
			res.Report = e.handover(ctx, imgs)
			next.Window, next.State = prev.Window, StateMigrating
			next.Addrs, next.Images = prev.Addrs, prev.Images
		} else {
			extra, err := e.recordedFor(ctx, prev, imgs)
			if err != nil {
				return nil, err
			}
			res.Report = e.Fence(ctx, imgs, Scope{}, extra)
			if err := res.Report.Err(); err != nil {
				return nil, err // claim not written: the next try fences again
			}
		}
		if prev != nil && prev.Source == SourceFrontend && w.Source == SourceHook && sameHost(prev, w) {
			next.Host = prev.Host        // keep OpenNebula's name for the host
			next.Source = SourceFrontend // keep the front-end's authority over this deploy
		}
		w.mark(next)
		return next, nil
	})
	if written != nil {
		res.Claim = *written
	}
	return res, err
}

// checkStart is Start's dry run: it reads the claim without taking the lease
// (a check must never block a real start) and reports what Start would do.
func (e *Engine) checkStart(ctx context.Context, w Who, imgs []Image) (*ClaimResult, error) {
	prev, err := e.ReadClaim(ctx, w.Pool, w.VM)
	if err != nil {
		return nil, err
	}
	res := &ClaimResult{Previous: prev}
	if err := admit(w, prev, e.now()); err != nil {
		return res, err
	}
	if inWindow(prev, w.Host, e.now()) {
		res.Handover = true
		res.Report = e.handover(ctx, imgs)
		return res, nil
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
func (e *Engine) Record(ctx context.Context, w Who, imgs []Image, scope Scope) (*ClaimResult, error) {
	res := &ClaimResult{}
	written, err := e.txn(ctx, w, func(prev *Claim) (*Claim, error) {
		res.Previous = prev
		if err := admit(w, prev, e.now()); err != nil {
			return nil, err
		}
		r := e.inspect(ctx, imgs, scope, false)
		r.count()
		res.Report = r
		if err := r.Err(); err != nil {
			return nil, err
		}
		next := &Claim{Seq: w.Seq, Host: w.Host, Source: w.Source, State: StateRunning}
		if prev != nil {
			if next.Seq < 0 {
				next.Seq = prev.Seq
			}
			if prev.Source == SourceFrontend && sameHost(prev, w) {
				next.Host = prev.Host
				next.Source = SourceFrontend
			}
		}
		recordImages(next, prev, r, scope)
		w.mark(next)
		return next, nil
	})
	if written != nil {
		res.Claim = *written
		if err == nil {
			err = e.writeImageRecords(ctx, w, written, imgs)
		}
	}
	return res, err
}

// OpenWindow opens the live-migration handover from src to dst for ttl: a
// start of the VM on dst fences nothing while it is open. It fences nothing.
func (e *Engine) OpenWindow(ctx context.Context, w Who, src, dst string, ttl time.Duration) (*ClaimResult, error) {
	res := &ClaimResult{}
	written, err := e.txn(ctx, w, func(prev *Claim) (*Claim, error) {
		res.Previous = prev
		next := &Claim{Seq: w.Seq, Host: src, Source: w.Source, State: StateMigrating}
		if prev != nil {
			next.Addrs = prev.Addrs
			if next.Seq < 0 || prev.Seq > next.Seq {
				next.Seq = prev.Seq
			}
		}
		now := e.now().UTC()
		next.Window = &Window{Src: src, Dst: dst, Opened: now, Expires: now.Add(ttl)}
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
	written, err := e.txn(ctx, w, func(prev *Claim) (*Claim, error) {
		res.Previous = prev
		next := &Claim{Seq: w.Seq, Source: w.Source, State: StateRunning}
		if prev != nil && (next.Seq < 0 || prev.Seq > next.Seq) {
			next.Seq = prev.Seq
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
		if outcome != Migrated && prev != nil {
			next.Addrs, next.Images = prev.Addrs, prev.Images
			if strings.EqualFold(prev.Host, src) {
				next.HostAddrs = prev.HostAddrs
			}
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

// WriteClaim replaces the VM's claim under its lease (admin and tests).
func (e *Engine) WriteClaim(ctx context.Context, w Who, c Claim) error {
	_, err := e.txn(ctx, w, func(*Claim) (*Claim, error) { return &c, nil })
	return err
}

// inWindow reports whether an open handover window admits host as destination.
func inWindow(c *Claim, host string, now time.Time) bool {
	return c != nil && c.Window != nil && now.Before(c.Window.Expires) &&
		(strings.EqualFold(c.Window.Dst, host) || (shortName(host) != "" && strings.EqualFold(shortName(c.Window.Dst), shortName(host))))
}

func appendUnique(as []Addr, a Addr) []Addr {
	for _, x := range as {
		if x == a {
			return as
		}
	}
	return append(as, a)
}
