//go:build cgo

package fencer

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/collision"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/failpoint"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// Do performs one host step: it connects to Ceph with the disks' access,
// runs the engine operation under the VM's claim, appends the audit log and
// returns the structured response (never nil).
func Do(ctx context.Context, cfg *config.Config, req *hoststep.Request) *hoststep.Response {
	if req.Op == hoststep.OpDomain {
		return domainStep(ctx, cfg, req)
	}
	resp := &hoststep.Response{Op: req.Op}
	fail := func(err error) *hoststep.Response {
		resp.OK, resp.Kind, resp.Error, resp.Brief = false, outcome.Of(err), err.Error(), engine.BriefOf(err)
		return resp
	}
	ips, err := hostIPs(cfg)
	if err != nil {
		return fail(err)
	}
	for _, ip := range ips {
		resp.HostIPs = append(resp.HostIPs, ip.String())
	}
	groups := Groups(cfg, req.Disks)
	if len(groups) == 0 {
		resp.OK = true
		resp.Report = &engine.Report{Images: []engine.ImageReport{}}
		return resp
	}
	opts, err := EngineOptions(cfg)
	if err != nil {
		resp.Kind, resp.Error = outcome.Usage, err.Error()
		return resp
	}
	opts.MissingOK = true
	source := req.Source + "/" + req.Op
	// Opened at the first event only: a step that fences nothing creates
	// no spool directory.
	spool := sync.OnceValue(func() *events.Spool { return eventSpool(cfg, req.VM) })
	opts.OnBlocklisted = func(image string, c engine.ClientReport) {
		// Durable before the lock break: a crash from here on leaves the
		// event in the spool, delivered once by the next run or flush.
		putEvents(spool, []audit.Record{{Time: time.Now().UTC(), Run: req.Run, Op: req.Op, VM: audit.VMOf(req.VM), Host: req.Host, Image: image,
			Client: c.Client, Address: c.Address, Cookie: c.Cookie, Action: string(c.Action), Expire: c.Expire, Result: "ok"}}, source)
		failpoint.Hit("after-blocklist")
	}
	learnInstance(ctx, cfg, req)
	base := engine.Who{VM: req.VM, Seq: req.Seq, Host: req.Host, Source: req.Source, Run: req.Run, Incoming: req.Incoming, Instance: req.Instance,
		Restore: req.Restore, Stime: req.Stime, History: req.History}
	// Ask libvirt (a virsh process) while Ceph connects; every group waits
	// for the answer before its claim is read or anything is fenced.
	answer := make(chan engine.Domain, 1)
	go func() { answer <- domainAnswer(ctx, cfg, req) }()
	domain := sync.OnceValue(func() engine.Domain { return <-answer })
	meta := audit.Meta{Run: req.Run, Op: req.Op, VM: audit.VMOf(req.VM), Host: req.Host}

	// A start with disks in several clusters (or reached with several Ceph
	// accesses) first checks every claim, so that a refusal in one cluster
	// fences nothing in another.
	if (req.Op == hoststep.OpStart || req.Op == hoststep.OpAttach) && len(groups) > 1 {
		for _, g := range groups {
			if _, err := runGroup(ctx, cfg, req, g, base, opts, ips, true, domain); err != nil {
				return fail(err)
			}
		}
	}
	// Every step handles every group: each cluster holds the VM's claim for
	// the disks it serves, and QEMU opens one client per disk.
	resp.Report = &engine.Report{Images: []engine.ImageReport{}}
	handover := true
	for _, g := range groups {
		var res *engine.ClaimResult
		res, err = runGroup(ctx, cfg, req, g, base, opts, ips, req.Op == hoststep.OpCheck, domain)
		if res != nil {
			handover = handover && res.Handover
			mergeClaim(resp, res)
			resp.Report.Merge(res.Report)
			resp.Report.DryRun = resp.Report.DryRun || (res.Report != nil && res.Report.DryRun)
		}
		if err != nil {
			break
		}
	}
	resp.Handover = err == nil && handover
	recs, aerr := Audit(cfg, resp.Report, meta)
	resp.Audit = recs
	putEvents(spool, recs, source)
	failpoint.Hit("after-audit")
	if err == nil && aerr != nil {
		// The fence is done and reported in Audit; only the local log failed.
		resp.Error = "audit log not written: " + aerr.Error()
	}
	if err != nil {
		return fail(err)
	}
	resp.OK = true
	return resp
}

// eventSpool opens the local event spool for VM events (nil for non-VMs or
// when it cannot be opened: the audit log still has every fence).
func eventSpool(cfg *config.Config, vm int) *events.Spool {
	if vm < 0 {
		return nil
	}
	s, err := events.OpenSpool(cfg.SpoolDir)
	if err != nil {
		return nil
	}
	return s
}

// putEvents spools the events of recs (same ids as the publisher will use);
// the spool is opened only if there is an event.
func putEvents(spool func() *events.Spool, recs []audit.Record, source string) {
	evs := collision.Events(recs, source)
	if len(evs) == 0 {
		return
	}
	s := spool()
	if s == nil {
		return
	}
	for _, ev := range evs {
		_ = s.Put(ev)
	}
}

// runGroup runs req's step for the disks of group g under the VM's claim in
// g's cluster (dry for a check, or for the admission pass of a start).
func runGroup(ctx context.Context, cfg *config.Config, req *hoststep.Request, g Group, who engine.Who, opts engine.Options, ips []netip.Addr, dry bool, domain func() engine.Domain) (*engine.ClaimResult, error) {
	sess, err := Open(ctx, g.Access, opts)
	who.Domain = domain()
	if err != nil {
		if req.Op == hoststep.OpStart {
			// What libvirt said decides even without the claim: a domain
			// that runs here is refused whatever Ceph says.
			if rd := engine.Transition(nil, engine.Event{Op: engine.OpStart, Who: who, Now: time.Now()}); rd.Refusal != nil {
				return nil, rd.Refusal
			}
		}
		return nil, err
	}
	defer sess.Close()
	who.Pool = ClaimPool(cfg)
	if cfg.Ceph.ClaimPool == "" && req.Op != hoststep.OpCheck && req.Op != hoststep.OpIncoming && !dry {
		// Upgrade: the claim moves from the first disk's pool once.
		if _, err := sess.Engine.MoveClaim(ctx, who, legacyPools(g)); err != nil {
			return nil, err
		}
	}
	// The addresses this host's clients show Ceph: its own (ips) and those
	// Ceph learned for this step's client, the same for every client of
	// the host (behind NAT toward Ceph, an address the host does not
	// have). The scope of a record and of a window's close is both.
	own := sess.Cluster.OwnAddrs()
	if err := seenKnown(req.Op, own); err != nil {
		return nil, err
	}
	view := hostView(ips, own)
	scope := view.Scope()
	if !req.Local {
		// This step runs on req.Host: the addresses Ceph sees for its
		// clients that are the host's own identify it in the claim,
		// whatever name OpenNebula or host_name give it. (Not the whole
		// interface list: virbr0's 192.168.122.1 is on every libvirt host;
		// not an address the host does not have: behind one NAT, every
		// host shows Ceph the same.)
		who.HostIPs, who.Behind = view.Identity(), view.Behind()
	}
	switch {
	case dry && req.Op == hoststep.OpAttach:
		return sess.Engine.CheckAttach(ctx, who, g.Images)
	}
	switch req.Op {
	case hoststep.OpCheck, hoststep.OpStart:
		return sess.Engine.Start(ctx, who, g.Images, dry)
	case hoststep.OpRecord:
		return sess.Engine.Record(ctx, who, g.Images, engine.Scope{Kind: engine.ScopeOnHost, HostIPs: scope})
	case hoststep.OpPremigrate:
		return sess.Engine.OpenWindow(ctx, who, req.Src, req.Dst, time.Duration(cfg.Fence.MigrationWindow))
	case hoststep.OpPostmigrate:
		return sess.Engine.CloseWindow(ctx, who, g.Images, req.Src, req.Dst, scope, engine.Migrated)
	case hoststep.OpFailmigrate:
		outcome := engine.Failed
		if req.Host == req.Src && req.Src != req.Dst {
			outcome = engine.FailedFromSource // dst unreachable: fence all that is not here
		}
		return sess.Engine.CloseWindow(ctx, who, g.Images, req.Src, req.Dst, scope, outcome)
	case hoststep.OpAttach:
		return sess.Engine.Attach(ctx, who, g.Images)
	case hoststep.OpIncoming:
		win, err := sess.Engine.AcceptIncoming(ctx, who)
		if win == nil {
			return nil, err
		}
		return &engine.ClaimResult{Claim: engine.Claim{VM: req.VM, Host: win.Src, State: engine.StateMigrating, Window: win}}, err
	}
	return nil, fmt.Errorf("unknown op %q", req.Op)
}

// ClaimPool is the pool that holds a VM's claim in each cluster of its
// disks: ceph.claim_pool, or engine.DefaultClaimPool. It does not depend on
// the VM's disks, so the claim stays where it is when disks are attached,
// detached or reordered.
func ClaimPool(cfg *config.Config) string {
	if cfg.Ceph.ClaimPool != "" {
		return cfg.Ceph.ClaimPool
	}
	return engine.DefaultClaimPool
}

// legacyPools are the pools where older versions kept the claim of a VM
// with disks g: the first disk's pool (of any group: they read one claim).
func legacyPools(g Group) []string {
	var out []string
	for _, im := range g.Images {
		out = append(out, im.Pool)
	}
	return out
}

// mergeClaim puts res's claim into resp: the first cluster's claim, with the
// client addresses recorded in every cluster.
func mergeClaim(resp *hoststep.Response, res *engine.ClaimResult) {
	if res.Claim.Host == "" {
		return
	}
	if resp.Claim == nil {
		c := res.Claim
		c.Addrs = append([]engine.Addr(nil), c.Addrs...)
		resp.Claim = &c
		return
	}
	for _, a := range res.Claim.Addrs {
		if !slices.Contains(resp.Claim.Addrs, a) {
			resp.Claim.Addrs = append(resp.Claim.Addrs, a)
		}
	}
}

func fenceGroup(ctx context.Context, g Group, opts engine.Options, dry bool) (*engine.Report, error) {
	s, err := Open(ctx, g.Access, opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var r *engine.Report
	if dry {
		r = s.Engine.Check(ctx, g.Images, engine.Scope{})
	} else {
		r = s.Engine.Fence(ctx, g.Images, engine.Scope{}, nil)
	}
	return r, r.Err()
}
