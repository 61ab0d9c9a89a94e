package opennebula

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	// AttrEvent starts the name of every event attribute: one vector
	// attribute per event, RBDFENCE_EVENT_<time>_<hash of its id> (see
	// EventAttr). Earlier versions kept every event under this very name
	// (a lost update when two wrote at once); RecordEvent moves those to
	// their own names.
	AttrEvent = "RBDFENCE_EVENT"
	// MaxEvents is how many events a VM keeps.
	MaxEvents = 10
	// updateMerge is one.vm.update's merge mode (goca parameters.Merge).
	updateMerge = 1
	// recordAttempts bounds the read-update-verify rounds of RecordEvent
	// when another writer replaces the user template concurrently.
	recordAttempts = 3
)

// EventAttr is the name of ev's attribute in the user template:
// RBDFENCE_EVENT_<UTC time, 20060102T150405Z>_<16 hex digits of the
// SHA-256 of its ID>. Names are upper case letters, digits and '_', as
// OpenNebula's template parser takes them (src/parsers/template_parser.l:
// 58-60 of release-7.4.0); the time first makes oned, which keeps a
// template's attributes ordered by name, list them oldest first.
func EventAttr(ev events.Event) string {
	sum := sha256.Sum256([]byte(ev.ID))
	return AttrEvent + "_" + ev.Time.UTC().Format("20060102T150405Z") + "_" + strings.ToUpper(hex.EncodeToString(sum[:8]))
}

// IsEventAttr reports whether name is an event attribute: one of
// EventAttr's names, or the single name of older versions.
func IsEventAttr(name string) bool {
	return name == AttrEvent || strings.HasPrefix(name, AttrEvent+"_")
}

// RecordEvent writes ev into the user template of VM ev.VM with
// one.vm.update in merge mode: the event as its own vector attribute
// (EventAttr: ID,TIME,HOST,IMAGE,CLIENT,ADDRESS,COOKIE,ACTION,EXPIRE,SOURCE),
// RBDFENCE_COLLISIONS (count) and RBDFENCE_LAST_COLLISION (summary), and
// the removal of the events beyond the newest MaxEvents.
//
// No event is lost to a concurrent writer. oned applies one update at a
// time to a VM (one.vm.update merges into the VM as read again under
// its lock, src/rm/api/VirtualMachineAPI.cc:335-360 and PoolSQL::get,
// include/PoolSQL.h:77-102; VirtualMachine::append_template,
// src/vm/VirtualMachine.cc:3028-3068 of release-7.4.0), and merge mode replaces only the attributes whose names
// the update carries (Template::merge, src/template/Template.cc:675-698).
// Each event has a name of its own, so two writers that read the same
// template and add their events at once both keep theirs. A writer
// removes only events it saw, and only those older than the newest
// MaxEvents it saw besides its own: an empty vector "NAME = [ ]"
// (src/parsers/template_syntax.y:127-135) erases the attribute and sets
// nothing (Template.cc:688-691). What two such writers can get wrong is
// the count (both write n+1) and which summary is the last; the next
// event puts both right. An update in replace mode by someone else (an
// admin's onevm update without --append, editing an older copy) can drop
// any attribute: the read-back catches one that lands at once.
//
// It is idempotent: if an event with ev.ID is already there it does
// nothing, so a spooled event delivered twice is counted once. Values are
// flattened to one line and '"' and '\' are replaced (OpenNebula template
// syntax). Events kept under the single RBDFENCE_EVENT name by older
// versions are moved to their own names in the same update.
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
		existing := eventAttrs(ut, ev.VM)
		newer := 0
		for _, e := range existing {
			if e.ev.ID == ev.ID {
				return nil
			}
			if e.ev.Time.After(ev.Time) {
				newer++
			}
		}
		if attempt > 0 && newer >= MaxEvents {
			// Written, then removed by a writer that saw MaxEvents newer
			// ones: kept as long as it is among the newest, as any event.
			return nil
		}
		if attempt == recordAttempts {
			return &Error{Method: "one.vm.update", Err: fmt.Errorf("event %s: VM %d's user template was replaced by concurrent writers %d times", ev.ID, ev.VM, recordAttempts)}
		}
		count := 0
		if s, ok := ut.single(AttrCollisions); ok {
			count, _ = strconv.Atoi(strings.TrimSpace(s))
		}
		if count < len(existing) {
			count = len(existing)
		}
		if _, err := c.call(ctx, "one.vm.update", ev.VM, eventUpdate(count+1, existing, ev), updateMerge); err != nil {
			return err
		}
	}
}

// eventAttr is an event as the user template holds it, with its
// attribute's name.
type eventAttr struct {
	name string
	ev   events.Event
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

// eventAttrs reads the event attributes of a user template (both
// forms), in template order. Entries without an ID are ignored;
// unparsable times are left zero.
func eventAttrs(ut template, vmID int) []eventAttr {
	var out []eventAttr
	for _, a := range ut {
		if !a.isVec || !IsEventAttr(a.name) {
			continue
		}
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
		out = append(out, eventAttr{name: a.name, ev: ev})
	}
	return out
}

// eventsFrom reads the events of a user template, oldest first.
func eventsFrom(ut template, vmID int) []events.Event {
	var out []events.Event
	for _, e := range eventAttrs(ut, vmID) {
		out = append(out, e.ev)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out
}

// eventUpdate renders the merge update that records ev (count is the new
// RBDFENCE_COLLISIONS): ev under its own name; the events beyond the
// newest MaxEvents of existing plus ev erased (ev itself is always kept:
// it may be older than the others when it comes late from a spool); the
// events of the older single name moved to their own names (and the old
// name erased) when there are any.
func eventUpdate(count int, existing []eventAttr, ev events.Event) string {
	all := append([]eventAttr(nil), existing...)
	sort.SliceStable(all, func(i, j int) bool { return all[i].ev.Time.Before(all[j].ev.Time) })
	if len(all) > MaxEvents-1 {
		all = all[len(all)-(MaxEvents-1):]
	}
	kept := map[string]bool{}
	for _, e := range all {
		kept[e.ev.ID] = true
	}
	newest := ev
	for _, e := range all {
		if e.ev.Time.After(newest.Time) {
			newest = e.ev
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s = %s\n", AttrCollisions, tplQuote(strconv.Itoa(count)))
	fmt.Fprintf(&b, "%s = %s\n", AttrLastCollision, tplQuote(newest.Summary()))
	writeEvent(&b, EventAttr(ev), ev)
	legacy := false
	for _, e := range existing {
		switch {
		case e.name == AttrEvent:
			legacy = true
			if kept[e.ev.ID] {
				writeEvent(&b, EventAttr(e.ev), e.ev)
			}
		case !kept[e.ev.ID]:
			fmt.Fprintf(&b, "%s = [ ]\n", e.name)
		}
	}
	if legacy {
		fmt.Fprintf(&b, "%s = [ ]\n", AttrEvent)
	}
	return b.String()
}

// writeEvent renders e as the vector attribute name.
func writeEvent(b *strings.Builder, name string, e events.Event) {
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
	b.WriteString(name + " = [\n")
	for i, f := range fields {
		sep := ",\n"
		if i == len(fields)-1 {
			sep = " ]\n"
		}
		fmt.Fprintf(b, "  %s = %s%s", f.k, tplQuote(f.v), sep)
	}
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
