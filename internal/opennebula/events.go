package opennebula

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/events"
)

// User template attributes written by RecordEvent.
const (
	// AttrCollisions is the running count of collisions of the VM.
	AttrCollisions = "RBDFENCE_COLLISIONS"
	// AttrLastCollision is a one-line summary of the newest collision.
	AttrLastCollision = "RBDFENCE_LAST_COLLISION"
	// AttrEvent is one collision, a vector attribute repeated per event.
	AttrEvent = "RBDFENCE_EVENT"
	// MaxEvents is how many RBDFENCE_EVENT attributes a VM keeps.
	MaxEvents = 10
	// updateMerge is one.vm.update's merge mode (goca parameters.Merge).
	updateMerge = 1
	// recordAttempts bounds the read-update-verify rounds of RecordEvent
	// when another writer replaces the attributes concurrently.
	recordAttempts = 3
)

// RecordEvent writes ev into the user template of VM ev.VM with
// one.vm.update in merge mode: RBDFENCE_COLLISIONS (count),
// RBDFENCE_LAST_COLLISION (summary) and the last MaxEvents events as
// RBDFENCE_EVENT=[ID,TIME,HOST,IMAGE,CLIENT,ADDRESS,COOKIE,ACTION,EXPIRE,SOURCE]
// vectors. Merge mode replaces every attribute of a given name, so the full
// kept list is sent each time.
//
// It is idempotent: if an RBDFENCE_EVENT with ev.ID is already there it does
// nothing, so a spooled event delivered twice is counted once. oned has no
// compare-and-swap; RecordEvent reads the VM back after updating and writes
// again if a concurrent writer replaced its event. Values are flattened to
// one line and '"' and '\' are replaced (OpenNebula template syntax).
//
// Similar To: onevm update --append ID FILE
func (c *Client) RecordEvent(ctx context.Context, ev events.Event) error {
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("record event: %w", err)
	}
	err := c.recordEvent(ctx, ev)
	if errors.Is(err, ErrNotFound) {
		// oned does not know the VM (deleted from its database; ids are
		// never reused): the event can never be recorded.
		return fmt.Errorf("%w: %w", events.ErrGone, err)
	}
	return err
}

func (c *Client) recordEvent(ctx context.Context, ev events.Event) error {
	for attempt := 0; ; attempt++ {
		n, err := c.vmNode(ctx, ev.VM)
		if err != nil {
			return err
		}
		ut := templateFrom(n.child("USER_TEMPLATE"))
		existing := eventsFrom(ut, ev.VM)
		for _, e := range existing {
			if e.ID == ev.ID {
				return nil
			}
		}
		if attempt == recordAttempts {
			return &Error{Method: "one.vm.update", Err: fmt.Errorf("event %s: VM %d's %s attributes were replaced by concurrent writers %d times", ev.ID, ev.VM, AttrEvent, recordAttempts)}
		}
		count := 0
		if s, ok := ut.single(AttrCollisions); ok {
			count, _ = strconv.Atoi(strings.TrimSpace(s))
		}
		if count < len(existing) {
			count = len(existing)
		}
		tpl := eventTemplate(count+1, keepEvents(existing, ev))
		if _, err := c.call(ctx, "one.vm.update", ev.VM, tpl, updateMerge); err != nil {
			return err
		}
	}
}

// ListEvents returns the RBDFENCE_EVENT attributes of VM vmID (-1: of all
// VMs that are not DONE) with a time not before since, oldest first. It uses
// one.vmpool.infoextended: one.vmpool.info omits most of the user template.
//
// Similar To: onevm list --extended, filtered on RBDFENCE_EVENT
func (c *Client) ListEvents(ctx context.Context, vmID int, since time.Time) ([]events.Event, error) {
	start, end := -1, -1
	if vmID >= 0 {
		start, end = vmID, vmID
	}
	// filter -2: all resources; state -1: any state but DONE.
	body, err := c.callString(ctx, "one.vmpool.infoextended", -2, start, end, -1)
	if err != nil {
		return nil, err
	}
	pool, err := parseXMLTree([]byte(body), "VM_POOL")
	if err != nil {
		return nil, &Error{Method: "one.vmpool.infoextended", Err: err, kind: ErrProtocol}
	}
	var out []events.Event
	for _, vm := range pool.children("VM") {
		id, err := intChild(vm, "ID", true)
		if err != nil {
			return nil, &Error{Method: "one.vmpool.infoextended", Err: err, kind: ErrProtocol}
		}
		if vmID >= 0 && id != vmID {
			continue
		}
		for _, ev := range eventsFrom(templateFrom(vm.child("USER_TEMPLATE")), id) {
			if !since.IsZero() && ev.Time.Before(since) {
				continue
			}
			out = append(out, ev)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Time.Equal(out[j].Time) {
			return out[i].Time.Before(out[j].Time)
		}
		if out[i].VM != out[j].VM {
			return out[i].VM < out[j].VM
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// eventsFrom reads the RBDFENCE_EVENT vectors of a user template, in order.
// Entries without an ID are ignored; unparsable times are left zero.
func eventsFrom(ut template, vmID int) []events.Event {
	var out []events.Event
	for _, a := range ut.vectors(AttrEvent) {
		get := func(k string) string { v, _ := a.get(k); return strings.TrimSpace(v) }
		ev := events.Event{
			ID:      get("ID"),
			VM:      vmID,
			Host:    get("HOST"),
			Image:   get("IMAGE"),
			Client:  get("CLIENT"),
			Address: get("ADDRESS"),
			Cookie:  get("COOKIE"),
			Action:  get("ACTION"),
			Source:  get("SOURCE"),
		}
		if ev.ID == "" {
			continue
		}
		ev.Time, _ = time.Parse(time.RFC3339, get("TIME"))
		ev.Expire, _ = time.Parse(time.RFC3339, get("EXPIRE"))
		out = append(out, ev)
	}
	return out
}

// keepEvents returns existing plus ev, oldest first, at most MaxEvents of
// them; ev itself is always kept (it may be older than the others when it
// comes late from a spool).
func keepEvents(existing []events.Event, ev events.Event) []events.Event {
	others := append([]events.Event(nil), existing...)
	sort.SliceStable(others, func(i, j int) bool { return others[i].Time.Before(others[j].Time) })
	if len(others) > MaxEvents-1 {
		others = others[len(others)-(MaxEvents-1):]
	}
	kept := append(others, ev)
	sort.SliceStable(kept, func(i, j int) bool { return kept[i].Time.Before(kept[j].Time) })
	return kept
}

// eventTemplate renders the merge update in OpenNebula template syntax.
func eventTemplate(count int, kept []events.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s = %s\n", AttrCollisions, tplQuote(strconv.Itoa(count)))
	if len(kept) > 0 {
		fmt.Fprintf(&b, "%s = %s\n", AttrLastCollision, tplQuote(kept[len(kept)-1].Summary()))
	}
	for _, e := range kept {
		fields := []kv{
			{"ID", e.ID},
			{"TIME", fmtTime(e.Time)},
			{"HOST", e.Host},
			{"IMAGE", e.Image},
			{"CLIENT", e.Client},
			{"ADDRESS", e.Address},
			{"COOKIE", e.Cookie},
			{"ACTION", e.Action},
		}
		if !e.Expire.IsZero() {
			fields = append(fields, kv{"EXPIRE", fmtTime(e.Expire)})
		}
		if e.Source != "" {
			fields = append(fields, kv{"SOURCE", e.Source})
		}
		b.WriteString(AttrEvent + " = [\n")
		for i, f := range fields {
			sep := ",\n"
			if i == len(fields)-1 {
				sep = " ]\n"
			}
			fmt.Fprintf(&b, "  %s = %s%s", f.k, tplQuote(f.v), sep)
		}
	}
	return b.String()
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(events.TimeFormat)
}

// tplQuote quotes a value for OpenNebula's template parser, whose only
// escape is a backslash before a double quote (a value ending in a backslash
// would swallow the closing quote). So control characters become spaces,
// double quotes become single quotes and backslashes become slashes.
func tplQuote(v string) string {
	v = events.OneLine(v)
	v = strings.NewReplacer(`"`, `'`, `\`, `/`).Replace(v)
	return `"` + v + `"`
}
