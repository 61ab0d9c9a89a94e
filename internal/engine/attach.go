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
	res, err := e.apply(ctx, w, imgs, Event{Op: OpAttach}, nil)
	if res.Previous != nil {
		res.Claim = *res.Previous
	}
	return res, err
}
