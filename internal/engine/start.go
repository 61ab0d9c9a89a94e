package engine

import "context"

// Start claims the VM for w and fences every foreign client of its images plus
// the addresses recorded for the previous instance. It refuses (typed error)
// when another run holds the claim, a newer deploy is recorded, or the same
// deploy is claimed by another host. With dryRun it decides and reports but
// changes nothing (no fence, no claim written).
func (e *Engine) Start(ctx context.Context, w Who, imgs []Image, dryRun bool) (*ClaimResult, error) {
	if dryRun {
		return e.checkStart(ctx, w, imgs)
	}
	return e.apply(ctx, w, imgs, Event{Op: OpStart}, nil)
}
