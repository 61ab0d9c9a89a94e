package engine

import "context"

// Attach is the check of disks being hot-attached to the running VM w
// (OpenNebula's attach_disk): under the VM's claim lease it fences every
// foreign client of imgs and the images' recorded last writers. Nothing of
// the VM has the images open yet, so every client is foreign (shareable and
// read-only images: reported, never fenced, as at a start). The claim is
// not changed: Record, after the attach, adds the VM's new clients. It
// refuses as Start does when the claim says another deploy or host runs
// the VM.
func (e *Engine) Attach(ctx context.Context, w Who, imgs []Image) (*ClaimResult, error) {
	res := &ClaimResult{}
	_, err := e.txn(ctx, w, func(prev *Claim, fresh stillOurs) (*Claim, error) {
		res.Previous = prev
		if prev != nil {
			res.Claim = *prev
		}
		if err := admit(w, prev, e.now()); err != nil {
			return nil, err
		}
		extra, err := e.recordedFor(ctx, nil, imgs)
		if err != nil {
			return nil, err
		}
		if err := fresh(); err != nil {
			return nil, err
		}
		res.Report = e.Fence(ctx, imgs, Scope{}, extra)
		return nil, res.Report.Err() // nothing to write
	})
	return res, err
}

// CheckAttach is Attach's admission alone, without the lease and without a
// fence (a hot-attach with disks in several clusters checks every claim
// first).
func (e *Engine) CheckAttach(ctx context.Context, w Who, imgs []Image) (*ClaimResult, error) {
	prev, err := e.ReadClaim(ctx, w.Pool, w.VM)
	if err != nil {
		return nil, err
	}
	return &ClaimResult{Previous: prev}, admit(w, prev, e.now())
}
