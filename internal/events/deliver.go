package events

import (
	"context"
	"errors"
	"fmt"
)

// DeferredError is returned by Deliver when some events could not be
// delivered now but are safe in the spool. It is not a failure: nothing was
// lost. Cause is the delivery error that made Deliver spool them.
type DeferredError struct {
	Spooled int
	Cause   error
}

func (e *DeferredError) Error() string {
	return fmt.Sprintf("%d event(s) kept in the spool for later delivery: %v", e.Spooled, e.Cause)
}

// Unwrap returns the delivery error.
func (e *DeferredError) Unwrap() error { return e.Cause }

// Deliver records evs with sink and keeps what it cannot deliver in spool.
// First it flushes the spool (older events go first), then it offers each
// of evs to sink with ctx's deadline; an event that fails, and every event
// after a failure that wraps ErrUnavailable (or once ctx is done), is put in
// the spool instead. Either sink or spool may be nil.
//
// delivered counts events of evs the sink accepted, spooled those written to
// the spool. The error is nil when every event was delivered; a
// *DeferredError when the rest is safe in the spool; any other error means
// that delivered+spooled < len(evs): some event is lost (no spool, or the
// spool could not be written) and the caller must report it loudly.
func Deliver(ctx context.Context, sink Sink, spool *Spool, evs []Event) (delivered int, spooled int, err error) {
	var (
		badWhy     error // why the sink is not tried for the remaining events
		deferCause error // first reason an event went to the spool
		lost       []error
	)
	if sink == nil {
		badWhy = errors.New("no event sink configured")
	}
	if spool != nil && sink != nil {
		if _, ferr := spool.Flush(ctx, sink); ferr != nil && (errors.Is(ferr, ErrUnavailable) || ctx.Err() != nil) {
			badWhy = ferr
		}
		// Other flush failures concern older events only; new ones are
		// still offered to the sink.
	}
	keep := func(ev Event, why error) {
		if deferCause == nil {
			deferCause = why
		}
		if spool == nil {
			lost = append(lost, fmt.Errorf("event %s (vm %d) lost: no spool: %v", ev.ID, ev.VM, why))
			return
		}
		if perr := spool.Put(ev); perr != nil {
			lost = append(lost, fmt.Errorf("event %s (vm %d) lost: %v (delivery: %v)", ev.ID, ev.VM, perr, why))
			return
		}
		spooled++
	}
	for _, ev := range evs {
		if badWhy != nil {
			keep(ev, badWhy)
			continue
		}
		if cerr := ctx.Err(); cerr != nil {
			badWhy = cerr
			keep(ev, cerr)
			continue
		}
		if derr := sink.RecordEvent(ctx, ev); derr != nil {
			if errors.Is(derr, ErrUnavailable) || ctx.Err() != nil {
				badWhy = derr
			}
			keep(ev, derr)
			continue
		}
		delivered++
	}
	switch {
	case len(lost) > 0:
		return delivered, spooled, errors.Join(lost...)
	case spooled > 0:
		return delivered, spooled, &DeferredError{Spooled: spooled, Cause: deferCause}
	}
	return delivered, spooled, nil
}
