//go:build cgo

package fencer

import (
	"context"
	"fmt"
	"net/netip"
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
	resp := &hoststep.Response{Op: req.Op}
	fail := func(err error) *hoststep.Response {
		resp.OK, resp.Kind, resp.Error = false, outcome.Of(err), err.Error()
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
	spool := eventSpool(cfg, req.VM)
	opts.OnBlocklisted = func(image string, c engine.ClientReport) {
		// Durable before the lock break: a crash from here on leaves the
		// event in the spool, delivered once by the next run or flush.
		putEvents(spool, []audit.Record{{Time: time.Now().UTC(), Run: req.Run, Op: req.Op, VM: req.VM, Host: req.Host, Image: image,
			Client: c.Client, Address: c.Address, Cookie: c.Cookie, Action: string(c.Action), Expire: c.Expire, Result: "ok"}}, source)
		failpoint.Hit("after-blocklist")
	}
	pool := cfg.Ceph.ClaimPool
	if pool == "" {
		pool = groups[0].Images[0].Pool
	}
	who := engine.Who{VM: req.VM, Seq: req.Seq, Host: req.Host, Source: req.Source, Run: req.Run, Pool: pool, Incoming: req.Incoming}
	if err := refuseRunning(ctx, cfg, req); err != nil {
		return fail(err)
	}

	meta := audit.Meta{Run: req.Run, Op: req.Op, VM: req.VM, Host: req.Host}

	sess, err := Open(ctx, groups[0].Access, opts)
	if err != nil {
		return fail(err)
	}
	defer sess.Close()
	if !req.Local {
		// This step runs on req.Host: the address Ceph sees for its clients
		// identifies the host in the claim, whatever name OpenNebula or
		// host_name give it. (Not the interface list: virbr0's 192.168.122.1
		// is on every libvirt host.)
		seen := map[netip.Addr]bool{}
		for _, a := range sess.Cluster.OwnAddrs() {
			if a.IP.IsGlobalUnicast() && !seen[a.IP] {
				seen[a.IP] = true
				who.HostIPs = append(who.HostIPs, a.IP)
			}
		}
	}
	var res *engine.ClaimResult
	switch req.Op {
	case hoststep.OpCheck:
		res, err = sess.Engine.Start(ctx, who, groups[0].Images, true)
	case hoststep.OpStart:
		res, err = sess.Engine.Start(ctx, who, groups[0].Images, false)
	case hoststep.OpRecord:
		res, err = sess.Engine.Record(ctx, who, groups[0].Images, engine.Scope{Kind: engine.ScopeOnHost, HostIPs: ips})
	case hoststep.OpIncoming:
		var win *engine.Window
		if win, err = sess.Engine.AcceptIncoming(ctx, who); win != nil {
			res = &engine.ClaimResult{Claim: engine.Claim{VM: req.VM, Host: win.Src, State: engine.StateMigrating, Window: win}}
		}
	case hoststep.OpPremigrate:
		res, err = sess.Engine.OpenWindow(ctx, who, req.Src, req.Dst, time.Duration(cfg.Fence.MigrationWindow))
	case hoststep.OpPostmigrate:
		res, err = sess.Engine.CloseWindow(ctx, who, groups[0].Images, req.Src, req.Dst, ips, engine.Migrated)
	case hoststep.OpFailmigrate:
		outcome := engine.Failed
		if req.Host == req.Src && req.Src != req.Dst {
			outcome = engine.FailedFromSource // dst unreachable: fence all that is not here
		}
		res, err = sess.Engine.CloseWindow(ctx, who, groups[0].Images, req.Src, req.Dst, ips, outcome)
	default:
		return fail(fmt.Errorf("unknown op %q", req.Op))
	}
	if res != nil {
		resp.Handover = res.Handover
		if res.Claim.Host != "" {
			c := res.Claim
			resp.Claim = &c
		}
		resp.Report = res.Report
	}
	// Disks on other Ceph access sets: fenced without a claim of their own.
	if err == nil && (req.Op == hoststep.OpStart || req.Op == hoststep.OpCheck) && !resp.Handover {
		for _, g := range groups[1:] {
			r, gerr := fenceGroup(ctx, g, opts, req.Op == hoststep.OpCheck)
			if resp.Report != nil {
				resp.Report.Merge(r)
			}
			if gerr != nil {
				err = gerr
				break
			}
		}
	}
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

// putEvents spools the events of recs (same ids as the publisher will use).
func putEvents(s *events.Spool, recs []audit.Record, source string) {
	if s == nil {
		return
	}
	for _, ev := range collision.Events(recs, source) {
		_ = s.Put(ev)
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
