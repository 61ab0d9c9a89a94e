package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// DefaultClaimPool is where a VM's claim lives in each cluster unless
// ceph.claim_pool says otherwise: OpenNebula's default Ceph pool. The
// location depends only on the VM and the cluster, never on the VM's disks
// (their order, which are attached), so that every step, the front-end and
// the hook, read the same claim.
const DefaultClaimPool = "one"

// MoveClaim moves the VM's claim from where versions before 0.x kept it (the
// pool of the VM's first RBD disk; legacy lists the pools of the VM's disks
// in this cluster) to w.Pool, when w.Pool has none yet. The newest legacy
// claim (by deploy, then time) is copied and every legacy copy emptied (an
// empty object reads as "no claim", for older versions too), each under the
// claim lease of its object. It returns the pool it moved from ("" when
// nothing moved). A claim pool that cannot be read is an error that says
// what to do.
func (e *Engine) MoveClaim(ctx context.Context, w Who, legacy []string) (string, error) {
	oid, err := e.locate(ctx, w)
	if err != nil {
		oid = ClaimObject(w.VM) // the message below says what to do
	}
	data, _, err := e.c.ReadObject(ctx, w.Pool, oid)
	switch {
	case err == nil && len(data) > 0:
		return "", nil // the common case: one read
	case err != nil && !errors.Is(err, ErrObjectNotFound):
		return "", fmt.Errorf("VM %d: cannot read its claim %s/%s (%v): the claim pool must exist in every cluster that holds the VM's disks and the Ceph user must be allowed to write it (osd 'profile rbd pool=%s'); create it or set ceph.claim_pool", w.VM, w.Pool, oid, err, w.Pool)
	}
	var from []string
	for _, p := range legacy {
		if p != w.Pool && !slices.Contains(from, p) {
			from = append(from, p)
		}
	}
	if len(from) == 0 {
		return "", nil
	}
	type found struct {
		pool string
		c    Claim
	}
	var olds []found
	for _, p := range from {
		d, _, err := e.c.ReadObject(ctx, p, ClaimObject(w.VM))
		if errors.Is(err, ErrObjectNotFound) || (err == nil && len(d) == 0) {
			continue
		}
		if err != nil {
			continue // a disk pool we may not read holds no claim of ours
		}
		var c Claim
		if json.Unmarshal(d, &c) != nil {
			continue
		}
		olds = append(olds, found{p, c})
	}
	if len(olds) == 0 {
		return "", nil
	}
	best := olds[0]
	for _, o := range olds[1:] {
		if o.c.Seq > best.c.Seq || (o.c.Seq == best.c.Seq && o.c.Updated.After(best.c.Updated)) {
			best = o
		}
	}
	// Under the new location's lease: write the claim there unless a
	// concurrent run did meanwhile.
	moved := ""
	_, err = e.txn(ctx, w, func(prev *Claim, fresh stillOurs) (*Claim, bool, error) {
		rd := e.decide(prev, Event{Op: OpAdopt, Who: w, Now: e.now(), Claim: &best.c})
		if rd.Next != nil {
			moved = best.pool
		}
		return rd.Next, false, rd.Refusal
	})
	if err != nil {
		return "", fmt.Errorf("VM %d: moving its claim from pool %s to %s: %w", w.VM, best.pool, w.Pool, err)
	}
	for _, o := range olds {
		// Empty each legacy copy under its lease, if it is still the
		// version we read (a copy that changed meanwhile stays).
		lid := ClaimObject(w.VM)
		if e.c.AcquireLease(ctx, o.pool, lid, w.cookie(), e.o.Lease) != nil {
			continue
		}
		if d, _, err := e.c.ReadObject(ctx, o.pool, lid); err == nil && sameClaim(d, o.c) {
			_ = e.c.ClearObject(ctx, o.pool, lid)
		}
		_ = e.c.ReleaseLease(context.WithoutCancel(ctx), o.pool, lid, w.cookie())
	}
	return moved, nil
}

// sameClaim reports whether data holds claim c (unchanged since read).
func sameClaim(data []byte, c Claim) bool {
	var d Claim
	return json.Unmarshal(data, &d) == nil && d.Run == c.Run && d.Updated.Equal(c.Updated) && d.Seq == c.Seq
}
