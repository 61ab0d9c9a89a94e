package engine

import "context"

// The read-only views of a claim change: what a start or an attach would
// do, and who runs a VM, decided as the change would be but without the
// lease (a check must never block a real start) and without changing
// anything.

// checkStart is Start's dry run: it reads the claim without taking the lease
// and reports what Start would do.
func (e *Engine) checkStart(ctx context.Context, w Who, imgs []Image) (*ClaimResult, error) {
	prev, _, err := e.ClaimOf(ctx, w)
	if err != nil {
		return nil, err
	}
	res := &ClaimResult{Previous: prev}
	rd := e.decide(prev, Event{Op: OpStart, Who: w, Now: e.now()})
	if rd.Handover {
		res.Handover = true
		res.Report = e.handover(ctx, imgs)
		return res, nil
	}
	if rd.Refusal != nil {
		return res, rd.Refusal
	}
	res.Report = e.Check(ctx, imgs, Scope{})
	if rd.Fence == nil {
		return res, nil
	}
	extra := rd.Fence.Recorded
	if rd.Fence.Writers {
		writers, err := e.recordedWriters(ctx, imgs)
		if err != nil {
			return res, err
		}
		for _, a := range writers {
			extra = appendUnique(extra, a)
		}
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

// CheckAttach is Attach's admission alone, without the lease and without a
// fence (a hot-attach with disks in several clusters checks every claim
// first).
func (e *Engine) CheckAttach(ctx context.Context, w Who, imgs []Image) (*ClaimResult, error) {
	prev, _, err := e.ClaimOf(ctx, w)
	if err != nil {
		return nil, err
	}
	return &ClaimResult{Previous: prev}, e.decide(prev, Event{Op: OpAttach, Who: w, Now: e.now()}).Refusal
}

// CheckRunning reports, without a lease and without changing anything, the
// clients of the running VM w's images: the addresses its claim records for
// the running instance are "instance", every other client "would-fence".
func (e *Engine) CheckRunning(ctx context.Context, w Who, imgs []Image) (*ClaimResult, error) {
	cl, _, err := e.ClaimOf(ctx, w)
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
