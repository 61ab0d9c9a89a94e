package engine

import (
	"context"
	"net/netip"
	"time"
)

// MigrationOutcome says how a live migration ended.
type MigrationOutcome int

// Outcomes.
const (
	Migrated MigrationOutcome = iota // postmigrate (on dst): the VM runs on dst
	Failed                           // failmigrate (on dst): the VM keeps running on src
	// FailedFromSource is failmigrate run on src because dst cannot be
	// reached: every client not on src is fenced (the copy on dst with it).
	FailedFromSource
)

// OpenWindow opens the live-migration handover of deploy w.Seq (the
// destination's HISTORY SEQ) from src to dst for ttl: the incoming migration
// the destination's hook accepts in this window fences nothing. It fences
// nothing itself (see Transition, OpOpenWindow).
func (e *Engine) OpenWindow(ctx context.Context, w Who, src, dst string, ttl time.Duration) (*ClaimResult, error) {
	return e.apply(ctx, w, nil, Event{Op: OpOpenWindow, Src: src, Dst: dst, TTL: ttl}, nil)
}

// CloseWindow closes the handover window and fences the loser of a migration.
// It runs on one of the two hosts, hereIPs being that host's own addresses:
// Migrated (on dst) fences every lock owner that is not on dst and records
// dst's clients as the running instance; Failed (on dst) fences every client
// on dst (a copy that "failed" but runs) and keeps src as the claim's host;
// FailedFromSource (on src, when dst cannot be reached) fences every client
// that is not on src and keeps src.
func (e *Engine) CloseWindow(ctx context.Context, w Who, imgs []Image, src, dst string, hereIPs []netip.Addr, outcome MigrationOutcome) (*ClaimResult, error) {
	ev := Event{Op: OpCloseWindow, Src: src, Dst: dst, Here: hereIPs, Outcome: outcome}
	var look observe
	if outcome == Migrated {
		// The destination's clients become the claim's instance.
		look = func(ctx context.Context, ev *Event) (*Report, error) {
			here := Scope{Kind: ScopeOnHost, HostIPs: hereIPs}
			ev.Seen = onHostSeen(e.inspect(ctx, imgs, here, false), here)
			return nil, nil
		}
	}
	return e.apply(ctx, w, imgs, ev, look)
}

// AcceptIncoming is the check of the hook's `migrate begin` on the
// destination: it returns the window when the claim shows an open handover
// the front-end opened for the VM's current deploy, from the claim's host to
// w's host, of the instance w.Instance identifies (the incoming domain's
// deployment_time: a stale copy of an older deploy migrated with virsh
// carries another; see wrongInstance for unknown values), and a
// *NoHandoverError otherwise. It reads the claim without the lease and
// changes nothing.
func (e *Engine) AcceptIncoming(ctx context.Context, w Who) (*Window, error) {
	prev, _, err := e.ClaimOf(ctx, w)
	if err != nil {
		return nil, err
	}
	rd := e.decide(prev, Event{Op: OpIncoming, Who: w, Now: e.now()})
	if rd.Refusal != nil {
		return nil, rd.Refusal
	}
	return rd.Window, nil
}
