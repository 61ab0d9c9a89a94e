// Package events holds the collision event that rbdfence raises for every
// fenced client, the Sink that records it (OpenNebula's VM user template),
// and a durable local Spool that keeps events while the sink is out of reach,
// so that an event is never lost.
//
// Delivery is at-least-once from the spool's side and exactly-once in effect:
// a Sink must ignore an event whose ID it has already recorded (the
// OpenNebula sink checks the VM's event attributes, RBDFENCE_EVENT_*).
package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
)

// TimeFormat is how event times are written wherever a text form is needed
// (summaries, OpenNebula templates): RFC 3339 in UTC, second precision.
const TimeFormat = "2006-01-02T15:04:05Z07:00"

// Event is one collision: a foreign client of a VM's RBD image and what
// rbdfence did about it. The JSON form is stable (it is the spool format).
type Event struct {
	// ID identifies the event for exactly-once delivery (see newID).
	ID string `json:"id"`
	// Time is when the collision was seen.
	Time time.Time `json:"time"`
	// VM is the OpenNebula VM id.
	VM int `json:"vm"`
	// Host is the host the VM was being started on (or runs on).
	Host string `json:"host"`
	// Image is the RBD image, "pool/name" or "pool/namespace/name".
	Image string `json:"image"`
	// Client is the foreign client, e.g. "client.4235".
	Client string `json:"client"`
	// Address is the client's exact address "ip:port/nonce".
	Address string `json:"address"`
	// Cookie is the lock cookie the client held ("" for a plain watcher).
	Cookie string `json:"cookie"`
	// Action is what was done, e.g. "blocklist", "blocklist+unlock", "report".
	Action string `json:"action"`
	// Expire is when the blocklist entry expires (zero: none).
	Expire time.Time `json:"expire,omitzero"`
	// Source names the code path that raised the event, e.g. "prestart",
	// "hook", "failmigrate".
	Source string `json:"source,omitempty"`
}

// ErrUnavailable marks errors that mean the sink cannot be reached at all
// (connection refused, timeout). Flush stops at the first such error instead
// of trying every pending event. Sinks wrap it (errors.Is must match).
var ErrUnavailable = errors.New("event sink unavailable")

// ErrGone marks errors that mean the event can never be recorded: its VM no
// longer exists in oned (oned never reuses a VM id). Flush and the
// front-end's collection set such an event aside in DIR/gone/ (kept, named
// in the error, never offered again) instead of retrying it forever.
var ErrGone = errors.New("the event's VM no longer exists")

// Sink records events. RecordEvent must be idempotent by Event.ID: recording
// an event whose ID is already recorded succeeds without effect. Errors that
// mean "not reachable" wrap ErrUnavailable; errors that mean "never
// recordable" wrap ErrGone.
type Sink interface {
	RecordEvent(ctx context.Context, ev Event) error
}

// idRE is compiled on first use: compiling it costs about 1700 allocations,
// which every start of every binary linking this package would pay.
var idRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`) })

// newID returns a new random event id (32 hex digits, 128 bits).
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms (Go 1.24+ panics
		// inside Read instead); keep a defined behaviour anyway.
		panic("events: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// Validate reports whether the event can be spooled and recorded: an ID made
// of [A-Za-z0-9._-] (1-128 chars, not starting with '.', '_' or '-'), a VM id
// >= 0 and a non-zero time.
func (e Event) Validate() error {
	if err := ValidID(e.ID); err != nil {
		return err
	}
	if e.VM < 0 {
		return fmt.Errorf("event %s: vm id %d is negative", e.ID, e.VM)
	}
	if e.Time.IsZero() {
		return fmt.Errorf("event %s: time is not set", e.ID)
	}
	return nil
}

// ValidID reports whether id is an event id: 1-128 characters of
// [A-Za-z0-9._-], starting with a letter or digit. Such an id names a spool
// file ("<id>.json") and never a path.
func ValidID(id string) error {
	if !idRE().MatchString(id) {
		if len(id) > 64 {
			id = id[:64] + "..."
		}
		return fmt.Errorf("event id %q: want 1-128 characters of [A-Za-z0-9._-], starting with a letter or digit", id)
	}
	return nil
}

// Summary returns a one-line human description of the event, e.g.
//
//	2024-05-01T10:00:00Z vm 42 host node2: blocklist client.4235 10.0.0.5:0/3456 on one/one-7 (cookie 'auto 9', expires 2024-05-08T10:00:00Z, by prestart)
//
// It contains no double quotes or backslashes of its own, so it can go into
// an OpenNebula template value unchanged.
func (e Event) Summary() string {
	var b strings.Builder
	b.WriteString(e.Time.UTC().Format(TimeFormat))
	fmt.Fprintf(&b, " vm %d", e.VM)
	if e.Host != "" {
		b.WriteString(" host " + OneLine(e.Host))
	}
	action := OneLine(e.Action)
	if action == "" {
		action = "collision"
	}
	b.WriteString(": " + action)
	if e.Client != "" {
		b.WriteString(" " + OneLine(e.Client))
	}
	if e.Address != "" {
		b.WriteString(" " + OneLine(e.Address))
	}
	if e.Image != "" {
		b.WriteString(" on " + OneLine(e.Image))
	}
	var extra []string
	if e.Cookie != "" {
		extra = append(extra, "cookie '"+OneLine(e.Cookie)+"'")
	}
	if !e.Expire.IsZero() {
		extra = append(extra, "expires "+e.Expire.UTC().Format(TimeFormat))
	}
	if e.Source != "" {
		extra = append(extra, "by "+OneLine(e.Source))
	}
	if len(extra) > 0 {
		b.WriteString(" (" + strings.Join(extra, ", ") + ")")
	}
	return b.String()
}

// OneLine replaces control characters (newlines included) by spaces and
// trims the result, so that a value fits on one log or template line.
func OneLine(s string) string {
	if strings.IndexFunc(s, isControl) < 0 {
		return strings.TrimSpace(s)
	}
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if isControl(r) {
			return ' '
		}
		return r
	}, s))
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }
