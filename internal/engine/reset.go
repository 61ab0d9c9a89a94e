package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// ResetClaim empties the VM's claim under its lease: the operator's way out
// of a claim that refuses every start (rbdfence claim reset, claim gc). With
// w.Stime it is the claim of that VM (never another installation's VM of
// the same id: a claim that is not shown to be its VM's is refused). It
// refuses with a *ClaimHeldError while a run holds the lease (a start or a
// migration step is under way) and returns the claim it removed (nil when
// there was none; a corrupt claim is removed and returned as nil too).
func (e *Engine) ResetClaim(ctx context.Context, w Who) (*Claim, error) {
	oid, err := e.locate(ctx, w)
	if err != nil {
		return nil, err
	}
	release, err := e.takeLease(ctx, w, oid)
	if err != nil {
		return nil, err
	}
	defer release()
	data, ver, err := e.c.ReadObject(ctx, w.Pool, oid)
	if errors.Is(err, ErrObjectNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("VM %d: cannot read claim %s/%s: %w", w.VM, w.Pool, oid, err)
	}
	if len(data) == 0 {
		return nil, nil
	}
	var prev *Claim
	if c := (&Claim{}); json.Unmarshal(data, c) == nil {
		prev = c
	}
	rd := e.decide(prev, Event{Op: OpReset, Who: w, Now: e.now()})
	if rd.Refusal != nil {
		return nil, rd.Refusal
	}
	if err := e.c.WriteObject(ctx, w.Pool, oid, nil, ver); err != nil {
		return nil, fmt.Errorf("VM %d: cannot reset claim %s/%s: %w", w.VM, w.Pool, oid, err)
	}
	return prev, nil
}

// WriteClaim replaces the VM's claim under its lease (admin and tests).
func (e *Engine) WriteClaim(ctx context.Context, w Who, c Claim) error {
	_, err := e.apply(ctx, w, nil, Event{Op: OpReplace, Claim: &c}, nil)
	return err
}
