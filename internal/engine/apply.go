package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The I/O around a claim change, in the order it happens: take the VM's
// claim lease, read the claim, look at Ceph where the change needs it,
// decide (Transition, transition.go), check that the lease and the claim
// are still what the decision was made on, fence, write the next claim
// with a compare-and-swap, and start over from the read when the claim
// changed meanwhile.

// ClaimResult is the outcome of a claim operation.
type ClaimResult struct {
	Claim    Claim   `json:"claim"`
	Previous *Claim  `json:"previous,omitempty"`
	Report   *Report `json:"report"`
	// Handover is true when an open migration window for this host meant nothing was fenced.
	Handover bool `json:"handover,omitempty"`
	// Wake is true when the start is the restore of a guest asleep on its
	// host (pmsuspended): it is woken up, nothing is fenced.
	Wake bool `json:"wake,omitempty"`
	// Elsewhere: a host fence left the claim alone, which names this host.
	Elsewhere string `json:"elsewhere,omitempty"`
}

// observe looks at Ceph before the change is decided, under the lease, and
// fills in what the event needs (Event.Seen); it also returns the report
// of what it saw (nil when it looked at nothing).
type observe func(ctx context.Context, ev *Event) (*Report, error)

// apply runs one claim change for w on imgs: under the VM's claim lease it
// reads the claim, observes, decides with e.decide (Transition), fences
// what the decision says once it has checked that it still holds the lease
// and the claim it decided on, and writes the next claim. A refusal
// fences and writes nothing. After the claim is written it stores the
// per-image addresses with the images when the decision says so.
func (e *Engine) apply(ctx context.Context, w Who, imgs []Image, ev Event, look observe) (*ClaimResult, error) {
	res := &ClaimResult{}
	var rd Ready
	written, err := e.txn(ctx, w, func(prev *Claim, fresh stillOurs) (*Claim, bool, error) {
		res.Previous, res.Report, res.Handover = prev, nil, false
		ev := ev
		ev.Who, ev.Now, ev.Allow = w, e.now(), e.o.Allow
		if look != nil {
			r, err := look(ctx, &ev)
			res.Report = r
			if err != nil {
				return nil, false, err
			}
		}
		rd = e.decide(prev, ev)
		if rd.Refusal != nil {
			return nil, false, rd.Refusal
		}
		if rd.Handover {
			res.Handover = true
			res.Report = e.handover(ctx, imgs)
		}
		if rd.Wake {
			res.Wake = true
			res.Report = e.handover(ctx, imgs)
		}
		res.Elsewhere = rd.Elsewhere
		if f := rd.Fence; f != nil {
			extra := f.Recorded
			if f.Writers {
				writers, err := e.recordedWriters(ctx, imgs)
				if err != nil {
					return nil, false, err
				}
				for _, a := range writers {
					extra = appendUnique(extra, a)
				}
			}
			if err := fresh(); err != nil {
				return nil, false, err
			}
			res.Report = e.Fence(ctx, imgs, f.Scope, extra)
			if err := res.Report.Err(); err != nil {
				return nil, false, err // claim not written: the next try fences again
			}
		}
		return rd.Next, rd.Clear, nil
	})
	if written != nil {
		res.Claim = *written
		if err == nil && rd.ImageRecords {
			err = e.writeImageRecords(ctx, w, written, imgs)
		}
	}
	return res, err
}

// decide is Transition (the model-based test may wrap it to break a rule).
func (e *Engine) decide(prev *Claim, ev Event) Ready {
	if e.transition != nil {
		return e.transition(prev, ev)
	}
	return Transition(prev, ev)
}

// onHostSeen returns what r shows on its images in scope, for Event.Seen.
func onHostSeen(r *Report, scope Scope) []Seen {
	out := make([]Seen, 0, len(r.Images))
	for _, im := range r.Images {
		s := Seen{Image: im.Image, Exclusive: im.img.exclusive()}
		for _, c := range im.Clients {
			s.Clients = append(s.Clients, c.addr)
			if c.Watcher && c.addr.Exact() && scope.covers(c) {
				s.Watchers = appendUnique(s.Watchers, c.addr)
			}
		}
		out = append(out, s)
	}
	return out
}

// errClaimChanged: the claim changed since fn read it (txn reads it again).
var errClaimChanged = errors.New("the claim changed while this run decided")

// stillOurs, given to a txn's fn, returns nil when this run still holds the
// claim's lease and the claim is still what fn was given. fn calls it right
// before it fences: a run that paused (or was slow) past its lease must not
// fence from a stale read of the claim while another run has moved it on
// (a newer deploy's instance may be running by then). It returns a
// *ClaimHeldError when another run holds the lease now, and errClaimChanged
// (txn then starts over from a fresh read) when the claim changed.
type stillOurs func() error

// takeLease takes (or, with our cookie, keeps) the VM's claim lease: a
// *ClaimHeldError names the run that holds it. release gives it up (the
// lease also expires on its own when a holder dies).
func (e *Engine) takeLease(ctx context.Context, w Who, oid string) (release func(), err error) {
	err = e.c.AcquireLease(ctx, w.Pool, oid, w.cookie(), e.o.Lease)
	var held *LeaseHeldError
	if errors.As(err, &held) {
		return nil, &ClaimHeldError{VM: w.VM, Holder: held.Holder}
	}
	if err != nil {
		return nil, fmt.Errorf("VM %d: cannot take the claim lease %s/%s: %w", w.VM, w.Pool, oid, err)
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = e.c.ReleaseLease(rctx, w.Pool, oid, w.cookie())
	}, nil
}

// txn runs fn under the VM's claim lease with a compare-and-swap write of the
// claim fn returns, retrying from the read when the write lost. fn receives
// nil when there is no claim yet; returning a nil claim writes nothing,
// unless clear is set: then the claim is emptied.
func (e *Engine) txn(ctx context.Context, w Who, fn func(prev *Claim, fresh stillOurs) (next *Claim, clear bool, err error)) (*Claim, error) {
	for moves := 0; ; moves++ {
		oid, err := e.locate(ctx, w)
		if err != nil {
			return nil, err
		}
		c, err := e.txnAt(ctx, w, oid, fn)
		var other *OtherVMError
		if errors.As(err, &other) && oid == ClaimObject(w.VM) && moves < 2 {
			continue // another VM's claim took the object meanwhile: locate again
		}
		return c, err
	}
}

// locate returns the object of w's VM's claim in w.Pool: the VM's object
// (ClaimObject) when it holds w's VM's claim, or a claim that may be
// (ClaimUnknown: Transition refuses on it), or no claim, while w's VM has
// none in its own object (ClaimObjectOf) either, else that own object. A
// step that does not know the VM's identity uses the VM's object.
func (e *Engine) locate(ctx context.Context, w Who) (string, error) {
	primary := ClaimObject(w.VM)
	if w.Stime == 0 {
		return primary, nil
	}
	c, err := e.claimAt(ctx, w.Pool, w.VM, primary)
	if err != nil {
		return "", err
	}
	if c != nil && c.Stime == w.Stime {
		return primary, nil // the common case: one read
	}
	own := ClaimObjectOf(w.VM, w.Stime)
	o, err := e.claimAt(ctx, w.Pool, w.VM, own)
	if err != nil {
		return "", err
	}
	if o == nil && (c == nil || c.Belonging(w) == ClaimOurs || (c.Belonging(w) == ClaimUnknown && !unknownAsNoClaim)) {
		return primary, nil
	}
	return own, nil
}

// unknownAsNoClaim makes locate read a claim of unknown belonging as no
// claim, as before issue 31 item 2: false in every binary, set only by the
// model's mutant fence-host-no-placement (SetUnknownAsNoClaimForModel).
var unknownAsNoClaim = false

// claimAt reads the claim in pool/oid (nil when there is none) without a lease.
func (e *Engine) claimAt(ctx context.Context, pool string, vm int, oid string) (*Claim, error) {
	data, _, err := e.c.ReadObject(ctx, pool, oid)
	if errors.Is(err, ErrObjectNotFound) || (err == nil && len(data) == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("VM %d: cannot read claim %s/%s: %w", vm, pool, oid, err)
	}
	var c Claim
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("VM %d: claim %s/%s is corrupt (%v): inspect it with 'rados -p %s get %s -' and remove it if it is garbage", vm, pool, oid, err, pool, oid)
	}
	return &c, nil
}

// ReadClaimObject returns the claim in pool/oid (a ClaimObject or
// ClaimObjectOf name), or nil when there is none, without a lease.
func (e *Engine) ReadClaimObject(ctx context.Context, pool, oid string) (*Claim, error) {
	vm, _, ok := ParseClaimObject(oid)
	if !ok {
		return nil, fmt.Errorf("%s is not a claim object", oid)
	}
	return e.claimAt(ctx, pool, vm, oid)
}

// ClaimOf returns w's VM's claim (nil when there is none) and the object
// it is in, without a lease. A claim that is not shown to be w's VM's or
// another's (ClaimUnknown) is no claim of w's VM: it comes back in an
// *UnknownClaimError, with no claim.
func (e *Engine) ClaimOf(ctx context.Context, w Who) (*Claim, string, error) {
	oid, err := e.locate(ctx, w)
	if err != nil {
		return nil, "", err
	}
	c, err := e.claimAt(ctx, w.Pool, w.VM, oid)
	if err == nil && c != nil && c.Belonging(w) == ClaimUnknown {
		return nil, oid, &UnknownClaimError{VM: w.VM, Recorded: *c}
	}
	return c, oid, err
}

// txnAt is txn on object oid.
func (e *Engine) txnAt(ctx context.Context, w Who, oid string, fn func(prev *Claim, fresh stillOurs) (next *Claim, clear bool, err error)) (*Claim, error) {
	release, err := e.takeLease(ctx, w, oid)
	if err != nil {
		return nil, err
	}
	defer release()
	for attempt := 0; attempt < 5; attempt++ {
		data, ver, err := e.c.ReadObject(ctx, w.Pool, oid)
		if err != nil && !errors.Is(err, ErrObjectNotFound) {
			return nil, fmt.Errorf("VM %d: cannot read claim %s/%s: %w", w.VM, w.Pool, oid, err)
		}
		var prev *Claim
		if len(data) > 0 {
			prev = &Claim{}
			if err := json.Unmarshal(data, prev); err != nil {
				return nil, fmt.Errorf("VM %d: claim %s/%s is corrupt (%v): inspect it with 'rados -p %s get %s -' and remove it if it is garbage", w.VM, w.Pool, oid, err, w.Pool, oid)
			}
		}
		fresh := func() error {
			if _, err := e.takeLease(ctx, w, oid); err != nil {
				return err
			}
			now, nowVer, err := e.c.ReadObject(ctx, w.Pool, oid)
			if err != nil && !errors.Is(err, ErrObjectNotFound) {
				return fmt.Errorf("VM %d: cannot read claim %s/%s: %w", w.VM, w.Pool, oid, err)
			}
			if !bytes.Equal(now, data) {
				return errClaimChanged
			}
			// Same claim: the version moved only with our lease (taking a
			// lock writes the object's lock attribute), so the write that
			// follows compares against the version as it is now.
			ver = nowVer
			return nil
		}
		next, clear, err := fn(prev, fresh)
		if errors.Is(err, errClaimChanged) {
			continue
		}
		if err != nil || (next == nil && !clear) {
			return nil, err
		}
		var out []byte
		if next != nil {
			if out, err = json.Marshal(next); err != nil {
				return nil, err
			}
		}
		err = e.c.WriteObject(ctx, w.Pool, oid, out, ver)
		if errors.Is(err, ErrStale) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("VM %d: cannot write claim %s/%s: %w", w.VM, w.Pool, oid, err)
		}
		return next, nil
	}
	return nil, fmt.Errorf("VM %d: claim %s/%s kept changing under us; retry", w.VM, w.Pool, oid)
}

// ReadClaim returns the claim in VM vm's object (ClaimObject), or nil when
// there is none. It takes no lease. ClaimOf finds a VM's claim by its
// identity.
func (e *Engine) ReadClaim(ctx context.Context, pool string, vm int) (*Claim, error) {
	return e.claimAt(ctx, pool, vm, ClaimObject(vm))
}
