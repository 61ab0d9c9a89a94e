package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// collectLockName is the lock a front-end holds while it collects host
// spools (Spool.LockCollect). It is not the spool's own lock: the drivers'
// Deliver flushes the front-end's spool under that one and must not wait
// for a collection that talks to every host.
const collectLockName = ".collect.lock"

// List returns the oldest pending events, at most max of them and at most
// maxBytes of JSON in all (at least one event when any is pending, so a
// single large event cannot block the spool), and whether more are
// pending. It holds the spool's lock while reading (waiting for it honours
// ctx): a Flush of this spool delivering at the same time finishes first,
// so List does not offer what that Flush is about to remove. Files that do
// not decode are set aside as Pending does and reported in a
// *CorruptError returned together with the events.
//
// A collector (the front-end, over ssh) delivers what List returned and
// then calls Ack with the ids it delivered: an event spooled meanwhile is
// listed by the next List, never removed unseen.
func (s *Spool) List(ctx context.Context, max, maxBytes int) (evs []Event, more bool, err error) {
	if max < 1 || maxBytes < 1 {
		return nil, false, fmt.Errorf("spool list: bounds %d events, %d bytes: both must be positive", max, maxBytes)
	}
	unlock, err := s.lock(ctx, lockName)
	if err != nil {
		return nil, false, err
	}
	defer unlock()
	all, _, perr := s.pending()
	var ce *CorruptError
	if perr != nil && !errors.As(perr, &ce) {
		return nil, false, perr
	}
	size := 0
	for i, ev := range all {
		b, merr := json.Marshal(ev)
		if merr != nil {
			return nil, false, fmt.Errorf("spool list: encode event %s: %w", ev.ID, merr)
		}
		if i >= max || (i > 0 && size+len(b) > maxBytes) {
			return evs, true, perr
		}
		size += len(b)
		evs = append(evs, ev)
	}
	return evs, false, perr
}

// Ack removes the spooled events with the given ids, which a collector
// has delivered, under the spool's lock (waiting for it honours ctx). An
// id with no spooled event (removed by a concurrent Flush or collector) is
// returned in missing, which is not an error. Ids that are not event ids
// are refused before anything is removed: they name files only through
// Validate's character set, never a path.
func (s *Spool) Ack(ctx context.Context, ids []string) (removed int, missing []string, err error) {
	for _, id := range ids {
		if verr := ValidID(id); verr != nil {
			return 0, nil, fmt.Errorf("spool ack: %w", verr)
		}
	}
	unlock, err := s.lock(ctx, lockName)
	if err != nil {
		return 0, nil, err
	}
	defer unlock()
	var errs []error
	for _, id := range ids {
		rerr := os.Remove(filepath.Join(s.dir, id+spoolExt))
		switch {
		case rerr == nil:
			removed++
		case errors.Is(rerr, fs.ErrNotExist):
			missing = append(missing, id)
		default:
			errs = append(errs, fmt.Errorf("spool ack: event %s: %w", id, rerr))
		}
	}
	if removed > 0 {
		if serr := syncDir(s.dir); serr != nil {
			errs = append(errs, fmt.Errorf("spool: sync %s: %w", s.dir, serr))
		}
	}
	return removed, missing, errors.Join(errs...)
}

// SetGone moves the spooled events with the given ids, which a collector
// found can never be recorded (its sink said ErrGone), to DIR/gone/ under
// the spool's lock: kept, no longer listed. Ids are checked as in Ack; an
// id with no spooled event is returned in missing.
func (s *Spool) SetGone(ctx context.Context, ids []string) (moved []string, missing []string, err error) {
	for _, id := range ids {
		if verr := ValidID(id); verr != nil {
			return nil, nil, fmt.Errorf("spool set aside: %w", verr)
		}
	}
	unlock, err := s.lock(ctx, lockName)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	var errs []error
	for _, id := range ids {
		dst, merr := s.setAside(id+spoolExt, goneDir)
		switch {
		case merr == nil:
			moved = append(moved, dst)
		case errors.Is(merr, fs.ErrNotExist):
			missing = append(missing, id)
		default:
			errs = append(errs, fmt.Errorf("spool set aside: event %s: %w", id, merr))
		}
	}
	return moved, missing, errors.Join(errs...)
}

// LockCollect takes the front-end's collection lock in this spool's
// directory (waiting for it honours ctx): two collections on one front-end
// (the timer's and an admin's `rbdfence events flush`) take turns, so an
// event is never offered to oned by both at once. The drivers' Deliver
// does not take it.
func (s *Spool) LockCollect(ctx context.Context) (unlock func(), err error) {
	return s.lock(ctx, collectLockName)
}
