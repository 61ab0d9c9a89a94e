// Package hostspool is the JSON protocol with which the front-end collects
// the collision events spooled on a KVM host, so that hosts need no oned
// credentials: the front-end reaches each host over OpenNebula's own ssh
// (as oneadmin), runs "rbdfence-host spool list", delivers the events to
// oned itself, then runs "rbdfence-host spool ack" with the ids oned took.
//
//	spool list            stdout: one List
//	spool ack             stdin: one Ack; stdout: one AckResult
//
// Delivery stays exactly-once in effect: an event is removed from the host
// only after oned accepted it, and oned's record ignores an id it already
// holds, so a collector that dies between delivery and ack only makes the
// next collection offer the event again.
//
// Versions follow internal/hoststep: every message carries its sender's
// Version (absent: 1), unknown fields are ignored both ways, and only a
// peer older than minVersion is refused.
package hostspool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"

	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/hoststep"
)

// Version is the protocol version this code speaks.
const Version = 1

// minVersion is the oldest peer version this code works with.
const minVersion = 1

const (
	// MaxEvents bounds the events of one List and the ids of one Ack.
	MaxEvents = 500
	// MaxListBytes bounds the JSON of the events of one List; more stay
	// for the next round (List.More).
	MaxListBytes = 1 << 20
	// MaxSize bounds every message either side reads: MaxListBytes of
	// events plus the rest of a List, or MaxEvents ids of 128 bytes.
	MaxSize = 2 << 20
)

// Corrupt is a spool file that did not decode and was set aside.
type Corrupt struct {
	File    string `json:"file"`
	MovedTo string `json:"moved_to,omitempty"` // "" when moving failed
	Error   string `json:"error"`
}

// List is the host's answer to "spool list".
type List struct {
	Version int            `json:"version,omitempty"`
	OK      bool           `json:"ok"`
	Error   string         `json:"error,omitempty"`
	Spool   string         `json:"spool,omitempty"`
	Events  []events.Event `json:"events"`
	More    bool           `json:"more,omitempty"`
	Corrupt []Corrupt      `json:"corrupt,omitempty"`
}

// Ack asks the host to remove the events the front-end delivered.
type Ack struct {
	Version int      `json:"version,omitempty"`
	IDs     []string `json:"ids"`
	// Gone are events oned can never record (their VM no longer exists):
	// the host moves them to its spool's gone/ directory, where they stay
	// but are no longer listed. A host without this field keeps them.
	Gone []string `json:"gone,omitempty"`
}

// AckResult is the host's answer to "spool ack".
type AckResult struct {
	Version int      `json:"version,omitempty"`
	OK      bool     `json:"ok"`
	Error   string   `json:"error,omitempty"`
	Removed int      `json:"removed"`
	Missing []string `json:"missing,omitempty"`
	// SetAside are the paths on the host the Gone events were moved to.
	SetAside []string `json:"set_aside,omitempty"`
}

// ListSpool lists sp's oldest pending events within the protocol's bounds
// (host side). Corrupt files are set aside and named; they do not stop
// the listing.
func ListSpool(ctx context.Context, sp *events.Spool) *List {
	evs, more, err := sp.List(ctx, MaxEvents, MaxListBytes)
	l := &List{Version: Version, OK: true, Spool: sp.Dir(), Events: evs, More: more}
	if l.Events == nil {
		l.Events = []events.Event{}
	}
	var ce *events.CorruptError
	switch {
	case errors.As(err, &ce):
		for f, dst := range ce.Moved {
			l.Corrupt = append(l.Corrupt, Corrupt{File: f, MovedTo: dst, Error: oneLine(ce.Errs[f])})
		}
		sortCorrupt(l.Corrupt)
	case err != nil:
		l.OK, l.Error = false, WithFix(err, sp.Dir()).Error()
	}
	return l
}

// AckSpool removes the acknowledged events from sp and sets the gone ones
// aside (host side).
func AckSpool(ctx context.Context, sp *events.Spool, a *Ack) *AckResult {
	removed, missing, err := sp.Ack(ctx, a.IDs)
	var moved []string
	if len(a.Gone) > 0 {
		var gmissing []string
		var gerr error
		moved, gmissing, gerr = sp.SetGone(ctx, a.Gone)
		missing = append(missing, gmissing...)
		err = errors.Join(err, gerr)
	}
	r := &AckResult{Version: Version, OK: err == nil, Removed: removed, Missing: missing, SetAside: moved}
	if err != nil {
		r.Error = WithFix(err, sp.Dir()).Error()
	}
	return r
}

// ReadAck decodes and checks an Ack (host side: the input comes from the
// front-end over ssh).
func ReadAck(r io.Reader) (*Ack, error) {
	var a Ack
	if err := decode(r, &a); err != nil {
		return nil, fmt.Errorf("spool ack request: %w", err)
	}
	if err := checkPeer("front-end", a.Version); err != nil {
		return nil, err
	}
	if len(a.IDs)+len(a.Gone) > MaxEvents {
		return nil, fmt.Errorf("spool ack request: %d ids, at most %d", len(a.IDs)+len(a.Gone), MaxEvents)
	}
	for _, id := range append(append([]string(nil), a.IDs...), a.Gone...) {
		if err := events.ValidID(id); err != nil {
			return nil, fmt.Errorf("spool ack request: %w", err)
		}
	}
	return &a, nil
}

// ReadList decodes and checks a List (front-end side: the input comes from
// a host). A List that is not OK is returned with its error.
func ReadList(r io.Reader) (*List, error) {
	var l List
	if err := decode(r, &l); err != nil {
		return nil, fmt.Errorf("spool list answer: %w", err)
	}
	if err := checkPeer("host", l.Version); err != nil {
		return nil, err
	}
	if !l.OK {
		if l.Error == "" {
			return nil, errors.New("spool list answer: neither ok nor an error")
		}
		return nil, fmt.Errorf("the host's spool: %s", oneLine(errors.New(l.Error)))
	}
	if len(l.Events) > MaxEvents {
		return nil, fmt.Errorf("spool list answer: %d events, at most %d", len(l.Events), MaxEvents)
	}
	for i, ev := range l.Events {
		if err := ev.Validate(); err != nil {
			return nil, fmt.Errorf("spool list answer: event %d: %w", i, err)
		}
	}
	return &l, nil
}

// ReadAckResult decodes an AckResult (front-end side).
func ReadAckResult(r io.Reader) (*AckResult, error) {
	var a AckResult
	if err := decode(r, &a); err != nil {
		return nil, fmt.Errorf("spool ack answer: %w", err)
	}
	if err := checkPeer("host", a.Version); err != nil {
		return nil, err
	}
	if !a.OK {
		if a.Error == "" {
			return nil, errors.New("spool ack answer: neither ok nor an error")
		}
		return &a, fmt.Errorf("the host's spool: %s", oneLine(errors.New(a.Error)))
	}
	if a.Removed < 0 {
		return nil, fmt.Errorf("spool ack answer: removed %d", a.Removed)
	}
	return &a, nil
}

// checkPeer refuses a peer older than minVersion (absent version: 1).
func checkPeer(peer string, v int) error {
	if v <= 0 {
		v = 1
	}
	if v < minVersion {
		return fmt.Errorf("host spool protocol: the %s speaks version %d, this rbdfence needs %d or later; run 'onehost sync --force' as oneadmin on the front-end", peer, v, minVersion)
	}
	return nil
}

func decode(r io.Reader, v any) error { return hoststep.DecodeJSON(r, MaxSize, v) }

// oneLine keeps an error message (which may quote outside input) on one
// short line.
func oneLine(err error) string {
	if err == nil {
		return ""
	}
	s := events.OneLine(err.Error())
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func sortCorrupt(c []Corrupt) {
	sort.Slice(c, func(i, j int) bool { return c[i].File < c[j].File })
}

// WithFix adds the fix to a permission error on the spool dir: the
// collector logs in as oneadmin, and a spool written by root before the
// hook gave its files to the spool directory's owner (events/owner.go) is
// not readable by it.
func WithFix(err error, dir string) error {
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	return fmt.Errorf("%w: the spool must belong to the user the front-end logs in as: run 'chown -R oneadmin: %s' on this host", err, dir)
}
