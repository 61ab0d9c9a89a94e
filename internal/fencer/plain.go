//go:build cgo

package fencer

import (
	"context"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// opFence is the Op of a claim-less fence (FenceDisks) in responses and
// audit records.
const opFence = "fence"

// FenceDisks fences every foreign client of disks without a VM claim: the
// libvirt hook uses it for domains that are not OpenNebula VMs ("one-<ID>"),
// which have no claim object. Shareable disks are inspected and reported,
// never fenced. It appends the audit log with VM -1 and returns the
// structured response (never nil); outcome.Of classifies a failure as for Do.
func FenceDisks(ctx context.Context, cfg *config.Config, disks []vmdisk.Disk, run, host string) *hoststep.Response {
	resp := &hoststep.Response{Op: opFence}
	groups := Groups(cfg, disks)
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
	report := &engine.Report{Images: []engine.ImageReport{}}
	for _, g := range groups {
		r, gerr := fenceGroup(ctx, g, opts, false)
		report.Merge(r)
		if gerr != nil {
			err = gerr
			break
		}
	}
	resp.Report = report
	recs, aerr := Audit(cfg, report, audit.Meta{Run: run, Op: opFence, Host: host})
	resp.Audit = recs
	if err != nil {
		resp.OK, resp.Kind, resp.Error, resp.Brief = false, outcome.Of(err), err.Error(), engine.BriefOf(err)
		return resp
	}
	if aerr != nil {
		// The fence is done and reported in Audit; only the local log failed.
		resp.Error = "audit log not written: " + aerr.Error()
	}
	resp.OK = true
	return resp
}
