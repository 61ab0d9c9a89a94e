package engine

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// StateFenced is the claim state a host fence leaves: the instance the claim
// records ran on a failed host and is blocklisted. A start of the VM with a
// newer deploy (OpenNebula's reschedule) is admitted as after any other
// claim, and fences the recorded addresses again (they stay fenced).
const StateFenced = "fenced"

// SourceHostFence is the Source of a claim written by a host fence.
const SourceHostFence = "fence-host"

// HostVM is one VM placed on a failed host, with its images in this cluster.
type HostVM struct {
	VM  int
	Seq int // OpenNebula's HISTORY SEQ of its placement on the host
	// Stime is the VM's STIME (Claim.Stime): which VM of that id.
	Stime  int64
	Images []Image
}

// who is v's identity in a host fence: its STIME, and oned's placement of
// it on the failed host (deploy Seq there), by which a claim an older
// version wrote without STIME is still read as this VM's (belongs).
func (v HostVM) who(hf HostFence) Who {
	return Who{VM: v.VM, Pool: hf.Pool, Stime: v.Stime, History: []Placement{{Seq: v.Seq, Host: hf.Host}}}
}

// hostVMWho is HostVM.who as FenceHost calls it: a variable only so that
// the model's mutant fence-host-no-placement can revert it.
var hostVMWho = HostVM.who

// HostFence asks to fence the Ceph clients of a failed host's VMs in one
// cluster.
type HostFence struct {
	// Host is OpenNebula's name of the failed host.
	Host string
	// HostIPs are addresses Ceph sees for the host's clients: the host's
	// identity as the caller knows it (given by the operator, or its name
	// resolved). The host's own addresses its VMs' claims record
	// (Claim.HostAddrs, written by steps that ran on the host) are added;
	// recorded client addresses never are (see FenceHost).
	HostIPs []netip.Addr
	VMs     []HostVM
	Pool    string // the pool of the claim objects
	Run     string
	// WholeAddress also blocklists every host address as a whole
	// (ip:0/0): every client on it, OSDs of a hyper-converged host
	// included. Only when the operator asks for it.
	WholeAddress bool
}

// HostVMResult is what a host fence did for one VM in one cluster.
type HostVMResult struct {
	VM  int `json:"vm"`
	Seq int `json:"seq"`
	// Report holds the VM's images (clients on the host fenced, others
	// out of scope) and its claim's recorded addresses (Recorded).
	Report *Report `json:"report"`
	// Claim is the claim as the fence left it (nil when not written).
	Claim *Claim `json:"claim,omitempty"`
	// Elsewhere is set when the claim records an instance on another host:
	// its addresses were not fenced and the claim was left as it is.
	Elsewhere string `json:"elsewhere,omitempty"`
	Error     string `json:"error,omitempty"`
}

// HostFenceResult is the outcome of FenceHost in one cluster.
type HostFenceResult struct {
	HostIPs []netip.Addr   `json:"host_ips"`
	VMs     []HostVMResult `json:"vms"`
	// Whole are the whole-address entries (WholeAddress only).
	Whole  []ClientReport `json:"whole,omitempty"`
	Fenced int            `json:"fenced"`
	Errors int            `json:"errors"`
	// Took is how long each phase took, in milliseconds: "claims" (read),
	// "inspect", "fence" (blocklist, OSD map wait, lock breaks), "mark"
	// (claims written).
	Took map[string]int64 `json:"took_ms"`
}

// Err returns nil when every client was fenced and every claim written.
func (r *HostFenceResult) Err() error {
	var msgs []string
	for _, v := range r.VMs {
		if v.Error != "" {
			msgs = append(msgs, fmt.Sprintf("VM %d: %s", v.VM, v.Error))
		}
	}
	for _, c := range r.Whole {
		if c.Error != "" {
			msgs = append(msgs, fmt.Sprintf("whole address %s: %s", c.Address, c.Error))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return &IncompleteError{Problems: msgs}
}

// WholeAddressBlocklister is implemented by clusters that can blocklist every
// client of one IP address (ip:0/0). It is not part of Cluster: only a host
// fence asked for by the operator uses it.
type WholeAddressBlocklister interface {
	BlocklistIP(ctx context.Context, ip netip.Addr, expire time.Duration) error
}

// hostFenceConcurrency bounds the reads and claim writes of a host fence in
// flight at once (fence.concurrency when larger).
const hostFenceConcurrency = 64

// onFailedHost reports whether claim c records an instance on the failed host.
func onFailedHost(c *Claim, hf HostFence) bool {
	return sameHost(c, Who{Host: hf.Host, HostIPs: hf.HostIPs})
}

// FenceHost fences, in this cluster, every Ceph client instance of the failed
// host's VMs: the addresses each VM's claim records for its instance on the
// host (even when no longer visible) and every client of the VMs' images
// whose IP is the failed host's own (every image: shareable and read-only
// ones too, since everything on the failed host is a zombie now).
//
// The scope is the failed host's identity only: hf.HostIPs and the host's
// own addresses the claims record (HostAddrs). A claim's recorded client
// addresses never widen it: a claim keeps addresses recorded on another
// host (a disk detached before a live migration keeps its entry, and so do
// another Ceph access's disks), and the IP of such an address is a healthy
// host where other VMs' clients of a shareable image run. Recorded
// addresses are fenced as exact addresses only, and only those recorded for
// the VM's exclusive images: an entry under a shareable or read-only image
// (an older fence-host recorded them) is not fenced, and the marking adds
// no client of such an image. Clients elsewhere are never touched, and neither is the
// recorded instance of a claim that names another host (the VM already runs
// elsewhere).
//
// All entries are added at once and committed in one OSD map; then each
// VM's claim is rewritten, under its lease, as StateFenced with the fenced
// clients of its exclusive images recorded, so that the reschedule
// elsewhere is admitted and fences them again. Nothing is decided by the
// hook's or the front-end's claim window: an open migration window is
// closed.
func (e *Engine) FenceHost(ctx context.Context, hf HostFence) *HostFenceResult {
	res := &HostFenceResult{VMs: make([]HostVMResult, len(hf.VMs)), Took: map[string]int64{}}
	t0 := e.now()
	lap := func(phase string) {
		now := e.now()
		res.Took[phase] = now.Sub(t0).Milliseconds()
		t0 = now
	}
	claims := make([]*Claim, len(hf.VMs))
	// A host fence is one burst against a failed host's many VMs: it reads,
	// inspects and writes with more in flight than a single VM's start.
	wide := *e
	wide.o.Concurrency = max(e.o.Concurrency, hostFenceConcurrency)

	// 1. Read every claim (no lease: reading never blocks a start). A stale
	// read cannot fence a live instance: what is fenced below is either on
	// the failed host's IPs or recorded for the claim's instance on that
	// host, and writeFenced leaves a claim that names another host by then.
	var wg sync.WaitGroup
	sem := make(chan struct{}, wide.o.Concurrency)
	for i, v := range hf.VMs {
		res.VMs[i] = HostVMResult{VM: v.VM, Seq: v.Seq}
		wg.Add(1)
		go func(i int, v HostVM) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, _, err := e.ClaimOf(ctx, hostVMWho(v, hf))
			if err != nil {
				res.VMs[i].Error = fmt.Sprintf("cannot read its claim: %v", err)
				return
			}
			claims[i] = c
		}(i, v)
	}
	wg.Wait()
	lap("claims")

	// 2. The host's identity: the addresses given and the host's own that
	// its claims record. The recorded client addresses are fenced exactly
	// (extra) and add nothing to it.
	ips := append([]netip.Addr(nil), hf.HostIPs...)
	addIP := func(ip netip.Addr) {
		ip = ip.Unmap()
		if ip.IsValid() && !slices.Contains(ips, ip) {
			ips = append(ips, ip)
		}
	}
	notExclusive := map[string]bool{} // images some VM here shares or only reads
	for _, v := range hf.VMs {
		for _, img := range v.Images {
			if img.Shareable || img.ReadOnly {
				notExclusive[img.String()] = true
			}
		}
	}
	recorded := map[Addr][]int{} // address -> indexes of the VMs that recorded it
	var extra []Addr
	for i, c := range claims {
		if c == nil {
			continue
		}
		if !onFailedHost(c, hf) {
			res.VMs[i].Elsewhere = c.Host
			continue
		}
		for _, a := range c.HostAddrs {
			addIP(a)
		}
		for _, a := range exclusiveAddrs(c, notExclusive) {
			if _, ok := recorded[a]; !ok {
				extra = append(extra, a)
			}
			recorded[a] = append(recorded[a], i)
		}
	}
	slices.SortFunc(ips, func(a, b netip.Addr) int { return a.Compare(b) })
	res.HostIPs = ips
	if len(ips) == 0 {
		// Nothing identifies the host's clients: a VM without a recorded
		// instance there cannot be fenced. Never report that as complete.
		for i, v := range hf.VMs {
			if len(v.Images) > 0 && res.VMs[i].Error == "" && res.VMs[i].Elsewhere == "" {
				res.VMs[i].Error = fmt.Sprintf("no address of host %s is known (none given, its name does not resolve and no claim records one): set the addresses its Ceph clients use in its template (onehost update %s: RBDFENCE_HOST_ADDRESSES=\"IP ...\") or give --host-addr", hf.Host, hf.Host)
			}
		}
	}

	// 3. Whole addresses first, so that the OSD map wait below covers them.
	whole := hf.WholeAddress && len(ips) > 0
	if whole {
		res.Whole = e.blocklistWhole(ctx, ips)
	}

	// 4. One inspection and one fence for every image of every VM.
	var imgs []Image
	owner := map[string][]int{}
	for i, v := range hf.VMs {
		for _, img := range v.Images {
			k := img.String()
			if _, ok := owner[k]; !ok {
				im := img
				im.Shareable, im.ReadOnly = false, false // a host fence covers them too
				imgs = append(imgs, im)
			}
			owner[k] = append(owner[k], i)
		}
	}
	r := &Report{Images: []ImageReport{}}
	if len(ips) > 0 && len(imgs) > 0 {
		r = wide.inspect(ctx, imgs, Scope{Kind: ScopeOnHost, HostIPs: ips}, false)
	}
	lap("inspect")
	// Every entry of a host fence is proposed at once: the monitors commit
	// concurrent additions together instead of one proposal per round.
	all := wide
	all.o.Concurrency = max(wide.o.Concurrency, len(extra)+len(imgs)*2)
	if len(extra) > 0 || len(r.Images) > 0 {
		all.fence(ctx, r, extra)
	}
	if whole {
		e.confirmWhole(ctx, res.Whole)
	}
	lap("fence")

	// 5. Split the report by VM.
	for i := range hf.VMs {
		res.VMs[i].Report = &Report{Images: []ImageReport{}}
	}
	for _, im := range r.Images {
		for _, i := range owner[im.Image] {
			res.VMs[i].Report.Images = append(res.VMs[i].Report.Images, im)
		}
	}
	for _, c := range r.Recorded {
		for _, i := range recorded[c.addr] {
			res.VMs[i].Report.Recorded = append(res.VMs[i].Report.Recorded, c)
		}
	}
	for i := range res.VMs {
		res.VMs[i].Report.count()
		if err := res.VMs[i].Report.Err(); err != nil && res.VMs[i].Error == "" {
			res.VMs[i].Error = err.Error()
		}
	}

	// 6. Rewrite each claim: fenced, every fenced address recorded.
	for i, v := range hf.VMs {
		if res.VMs[i].Error != "" || res.VMs[i].Elsewhere != "" {
			continue
		}
		wg.Add(1)
		go func(i int, v HostVM) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			c, elsewhere, err := e.writeFenced(ctx, hf, v, exclusiveOnly(res.VMs[i].Report, notExclusive))
			switch {
			case err != nil:
				res.VMs[i].Error = err.Error()
			case elsewhere != "":
				res.VMs[i].Elsewhere = elsewhere
			default:
				res.VMs[i].Claim = c
			}
		}(i, v)
	}
	wg.Wait()
	lap("mark")

	for _, v := range res.VMs {
		if v.Error != "" {
			res.Errors++
		}
	}
	for _, c := range res.Whole {
		if c.Error != "" {
			res.Errors++
		} else {
			res.Fenced++
		}
	}
	for _, im := range r.Images {
		for _, c := range im.Clients {
			if c.Fenced() {
				res.Fenced++
			}
		}
	}
	for _, c := range r.Recorded {
		if c.Fenced() {
			res.Fenced++
		}
	}
	return res
}

// exclusiveAddrs are the client addresses claim c records for the
// instance's exclusive images: every entry of c.Images but those under an
// image in notExclusive, and the addresses of c.Addrs that no entry holds
// (recorded by a version without per-image entries).
func exclusiveAddrs(c *Claim, notExclusive map[string]bool) []Addr {
	var out []Addr
	under := map[Addr]bool{}
	for k, as := range c.Images {
		for _, a := range as {
			under[a] = true
			if !notExclusive[k] {
				out = appendUnique(out, a)
			}
		}
	}
	for _, a := range c.Addrs {
		if !under[a] {
			out = appendUnique(out, a)
		}
	}
	sortAddrs(out)
	return out
}

// exclusiveOnly is r without the images in notExclusive: what the claim
// marking may record as the instance's (a shareable or read-only image's
// client, fenced on the failed host, is not the instance's own).
func exclusiveOnly(r *Report, notExclusive map[string]bool) *Report {
	out := *r
	out.Images = nil
	for _, im := range r.Images {
		if !notExclusive[im.Image] {
			out.Images = append(out.Images, im)
		}
	}
	return &out
}

// writeFenced marks the VM's claim fenced under its lease (Transition,
// OpHostFenced), with the addresses fenced on its exclusive images (r holds
// no other) added to those recorded. A claim that names another host
// meanwhile (a start elsewhere won the race) is left alone: its host is
// returned.
func (e *Engine) writeFenced(ctx context.Context, hf HostFence, v HostVM, r *Report) (*Claim, string, error) {
	w := hostVMWho(v, hf)
	w.Seq, w.Host, w.Source, w.Run = v.Seq, hf.Host, SourceHostFence, hf.Run
	var fenced []Seen
	for _, im := range r.Images {
		s := Seen{Image: im.Image, Exclusive: true}
		for _, c := range im.Clients {
			if c.Fenced() {
				s.Watchers = appendUnique(s.Watchers, c.addr)
			}
		}
		fenced = append(fenced, s)
	}
	res, err := e.apply(ctx, w, nil, Event{Op: OpHostFenced, Failed: Who{Host: hf.Host, HostIPs: hf.HostIPs}, Seen: fenced}, nil)
	var held *ClaimHeldError
	if errors.As(err, &held) {
		return nil, "", fmt.Errorf("%w; its clients on %s are fenced, but the claim could not be marked: run fence-host again", err, hf.Host)
	}
	if err != nil {
		return nil, "", err
	}
	if res.Elsewhere != "" {
		return nil, res.Elsewhere, nil
	}
	c := res.Claim
	return &c, "", nil
}

// blocklistWhole adds ip:0/0 for every ip (all at once).
func (e *Engine) blocklistWhole(ctx context.Context, ips []netip.Addr) []ClientReport {
	out := make([]ClientReport, len(ips))
	wb, ok := e.c.(WholeAddressBlocklister)
	when := e.now().Add(e.o.Expire).UTC().Truncate(time.Second)
	var wg sync.WaitGroup
	for i, ip := range ips {
		a := Addr{IP: ip}
		out[i] = ClientReport{Address: a.String(), addr: a, Decision: DecideFence, Action: ActNone}
		if !ok {
			out[i].Action, out[i].Error = ActFailed, "this cluster adapter cannot blocklist a whole address"
			continue
		}
		wg.Add(1)
		go func(c *ClientReport, ip netip.Addr) {
			defer wg.Done()
			if err := wb.BlocklistIP(ctx, ip, e.o.Expire); err != nil {
				c.Action, c.Error = ActFailed, fmt.Sprintf("blocklist failed: %v", err)
				return
			}
			c.Action, c.Expire = ActBlocklisted, when
		}(&out[i], ip)
	}
	wg.Wait()
	return out
}

// confirmWhole waits for the OSD map carrying the whole-address entries
// (the fence's own wait already did when it blocklisted anything).
func (e *Engine) confirmWhole(ctx context.Context, ws []ClientReport) {
	if err := e.c.WaitForLatestOSDMap(ctx); err != nil {
		for i := range ws {
			if ws[i].Error == "" {
				ws[i].Action, ws[i].Error = ActFailed, fmt.Sprintf("blocklisted, but the new OSD map was not confirmed: %v", err)
			}
		}
	}
}
