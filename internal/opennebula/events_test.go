package opennebula_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/test/onedsim"
)

var t0 = time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

func ev(id string, vm int, at time.Time) events.Event {
	return events.Event{
		ID: id, Time: at, VM: vm, Host: "node2", Image: fmt.Sprintf("one/one-7-%d-0", vm),
		Client: "client.4235", Address: "10.0.0.5:0/3456789", Cookie: "auto 94823",
		Action: "blocklist", Expire: at.Add(7 * 24 * time.Hour), Source: "prestart",
	}
}

// eventVectors returns the event attributes of a user template, in the
// template's order (by name: oldest first).
func eventVectors(ut onedsim.Template) []onedsim.Attribute {
	var out []onedsim.Attribute
	for _, a := range ut {
		if opennebula.IsEventAttr(a.Name) {
			out = append(out, a)
		}
	}
	return out
}

// userEvents returns the event IDs and the two scalar attributes.
func userEvents(t *testing.T, sim *onedsim.Sim, vm int) (ids []string, count, last string) {
	t.Helper()
	ut, ok := sim.UserTemplate(vm)
	if !ok {
		t.Fatalf("no VM %d", vm)
	}
	for _, a := range eventVectors(ut) {
		ids = append(ids, a.Vector["ID"])
	}
	count, _ = ut.Single(opennebula.AttrCollisions)
	last, _ = ut.Single(opennebula.AttrLastCollision)
	return ids, count, last
}

func TestRecordEvent(t *testing.T) {
	sim := startSim(t, vm42())
	c := newClient(t, sim, 5*time.Second)
	ctx := context.Background()

	first := ev("e00", 42, t0)
	if err := c.RecordEvent(ctx, first); err != nil {
		t.Fatal(err)
	}
	ids, count, last := userEvents(t, sim, 42)
	if strings.Join(ids, ",") != "e00" || count != "1" || last != first.Summary() {
		t.Fatalf("after one event: ids %v count %q last %q", ids, count, last)
	}
	ut, _ := sim.UserTemplate(42)
	evs := eventVectors(ut)
	if len(evs) != 1 || evs[0].Name != opennebula.EventAttr(first) || !strings.HasPrefix(evs[0].Name, "RBDFENCE_EVENT_20240501T100000Z_") {
		t.Fatalf("event attributes %+v, want one named %s", evs, opennebula.EventAttr(first))
	}
	got := evs[0].Vector
	want := map[string]string{
		"ID": "e00", "TIME": "2024-05-01T10:00:00Z", "HOST": "node2", "IMAGE": "one/one-7-42-0",
		"CLIENT": "client.4235", "ADDRESS": "10.0.0.5:0/3456789", "COOKIE": "auto 94823",
		"ACTION": "blocklist", "EXPIRE": "2024-05-08T10:00:00Z", "SOURCE": "prestart",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("RBDFENCE_EVENT = %v\nwant %v", got, want)
	}
	if d, _ := ut.Single("DESCRIPTION"); d != "web frontend" {
		t.Errorf("merge lost DESCRIPTION: %q", d)
	}
	if u := sim.Updates(); len(u) != 1 || u[0].Type != 1 || u[0].Error != "" {
		t.Fatalf("updates = %+v, want one merge", u)
	}

	// Exactly once: the same event again changes nothing and sends no update.
	if err := c.RecordEvent(ctx, first); err != nil {
		t.Fatal(err)
	}
	if u := sim.Updates(); len(u) != 1 {
		t.Errorf("duplicate event sent %d updates", len(u)-1)
	}
	if _, count, _ := userEvents(t, sim, 42); count != "1" {
		t.Errorf("duplicate event counted: %s", count)
	}

	// Twelve more: the count runs on, the last 10 are kept.
	for i := 1; i <= 12; i++ {
		if err := c.RecordEvent(ctx, ev(fmt.Sprintf("e%02d", i), 42, t0.Add(time.Duration(i)*time.Minute))); err != nil {
			t.Fatal(err)
		}
	}
	ids, count, last = userEvents(t, sim, 42)
	if count != "13" || len(ids) != opennebula.MaxEvents || ids[0] != "e03" || ids[9] != "e12" {
		t.Fatalf("after 13 events: count %s ids %v", count, ids)
	}
	if !strings.HasPrefix(last, "2024-05-01T10:12:00Z vm 42") {
		t.Errorf("last = %q", last)
	}

	// A late event (older than all kept, e.g. from a spool) is still kept
	// and counted; LAST_COLLISION stays the newest.
	late := ev("late", 42, t0.Add(-time.Hour))
	if err := c.RecordEvent(ctx, late); err != nil {
		t.Fatal(err)
	}
	ids, count, last2 := userEvents(t, sim, 42)
	if count != "14" || len(ids) != opennebula.MaxEvents || !contains(ids, "late") || contains(ids, "e03") || last2 != last {
		t.Errorf("after a late event: count %s ids %v last %q", count, ids, last2)
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func TestRecordEventSanitisesValues(t *testing.T) {
	sim := startSim(t, vm42())
	c := newClient(t, sim, 5*time.Second)
	e := ev("odd", 42, t0)
	e.Cookie = "auto \"1\"\nx\\"
	e.Host = "node\t2"
	if err := c.RecordEvent(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	ut, _ := sim.UserTemplate(42)
	v := eventVectors(ut)[0].Vector
	if v["COOKIE"] != "auto '1' x/" || v["HOST"] != "node 2" {
		t.Errorf("sanitised values: %q %q", v["COOKIE"], v["HOST"])
	}
}

func TestRecordEventErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(*onedsim.Sim)
		ev    events.Event
		kind  error
		code  int
		gone  bool // never recordable: the spool sets it aside
	}{
		{name: "invalid event", ev: events.Event{ID: "", VM: 42, Time: t0}},
		{name: "no such VM", ev: ev("x", 77, t0), kind: opennebula.ErrNotFound, code: opennebula.CodeNoExists, gone: true},
		{name: "update refused", setup: func(s *onedsim.Sim) { s.SetFailCalls("one.vm.update", 1) }, ev: ev("x", 42, t0), code: opennebula.CodeInternal},
		{name: "update locked", setup: func(s *onedsim.Sim) {
			s.SetFailCallsWith("one.vm.update", 1, onedsim.CodeLocked, "The resource virtual machine is locked. [42].")
		}, ev: ev("x", 42, t0), code: opennebula.CodeLocked},
		{name: "oned down", setup: func(s *onedsim.Sim) { _ = s.SetDown(true) }, ev: ev("x", 42, t0), kind: events.ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim := startSim(t, vm42())
			if tc.setup != nil {
				tc.setup(sim)
			}
			c := newClient(t, sim, 2*time.Second)
			err := c.RecordEvent(context.Background(), tc.ev)
			if err == nil {
				t.Fatal("RecordEvent succeeded")
			}
			if tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Errorf("err = %v, want %v", err, tc.kind)
			}
			if got := errors.Is(err, events.ErrGone); got != tc.gone {
				t.Errorf("errors.Is(err, ErrGone) = %v, want %v (err %v)", got, tc.gone, err)
			}
			var oe *opennebula.Error
			if tc.code != 0 && (!errors.As(err, &oe) || oe.Code != tc.code) {
				t.Errorf("err = %v, want oned code %#x", err, tc.code)
			}
			// After the failure, delivery works and counts once.
			if tc.ev.ID == "" || tc.ev.VM != 42 {
				return
			}
			_ = sim.Reset()
			if err := c.RecordEvent(context.Background(), tc.ev); err != nil {
				t.Fatalf("retry: %v", err)
			}
			if _, count, _ := userEvents(t, sim, 42); count != "1" {
				t.Errorf("count after retry = %s", count)
			}
		})
	}
}

// The opennebula client is the events.Sink of the spool: an event that
// could not be delivered while oned was down arrives exactly once later,
// even when the first attempt reached oned but its answer was lost.
func TestSpoolDeliversThroughClient(t *testing.T) {
	sim := startSim(t, vm42())
	c := newClient(t, sim, time.Second)
	var _ events.Sink = c
	sp, err := events.OpenSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	_ = sim.SetDown(true)
	d, n, err := events.Deliver(ctx, c, sp, []events.Event{ev("a", 42, t0), ev("b", 42, t0.Add(time.Second))})
	var de *events.DeferredError
	if d != 0 || n != 2 || !errors.As(err, &de) {
		t.Fatalf("Deliver while down = %d, %d, %v", d, n, err)
	}

	// The update of "a" is applied but the client gives up before the
	// answer: the event stays in the spool and is offered again.
	_ = sim.SetDown(false)
	if err := c.RecordEvent(ctx, ev("a", 42, t0)); err != nil {
		t.Fatal(err)
	}
	sent, err := sp.Flush(ctx, c)
	if err != nil || sent != 2 {
		t.Fatalf("Flush = %d, %v", sent, err)
	}
	ids, count, _ := userEvents(t, sim, 42)
	if strings.Join(ids, ",") != "a,b" || count != "2" {
		t.Errorf("ids %v count %s, want a,b and 2", ids, count)
	}
}

func TestListEvents(t *testing.T) {
	done := onedsim.VM{ID: 50, State: onedsim.StateDone, LCMState: 0}
	sim := startSim(t, vm42(), onedsim.VM{ID: 43, Host: "node3"}, onedsim.VM{ID: 44}, done)
	c := newClient(t, sim, 5*time.Second)
	ctx := context.Background()
	for _, e := range []events.Event{ev("b", 43, t0.Add(2*time.Minute)), ev("a", 42, t0), ev("c", 42, t0.Add(5*time.Minute))} {
		if err := c.RecordEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	// An event on a DONE VM is not listed (state filter -1).
	if err := c.RecordEvent(ctx, ev("gone", 50, t0)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		vm    int
		since time.Time
		want  string
	}{
		{"all", -1, time.Time{}, "a@42,b@43,c@42"},
		{"one VM", 42, time.Time{}, "a@42,c@42"},
		{"since", -1, t0.Add(time.Minute), "b@43,c@42"},
		{"since is inclusive", -1, t0.Add(2 * time.Minute), "b@43,c@42"},
		{"VM without events", 44, time.Time{}, ""},
		{"unknown VM", 99, time.Time{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.ListEvents(ctx, tc.vm, tc.since)
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, e := range got {
				s = append(s, fmt.Sprintf("%s@%d", e.ID, e.VM))
			}
			if strings.Join(s, ",") != tc.want {
				t.Errorf("ListEvents = %v, want %s", s, tc.want)
			}
		})
	}
	// Events read back equal what was recorded.
	got, err := c.ListEvents(ctx, 42, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := ev("a", 42, t0)
	g := got[0]
	if g.ID != want.ID || !g.Time.Equal(want.Time) || g.VM != 42 || g.Host != want.Host || g.Image != want.Image ||
		g.Client != want.Client || g.Address != want.Address || g.Cookie != want.Cookie || g.Action != want.Action ||
		!g.Expire.Equal(want.Expire) || g.Source != want.Source {
		t.Errorf("read back %+v\nwant %+v", g, want)
	}
	if n := sim.Calls("one.vmpool.info"); n != 0 {
		t.Errorf("ListEvents used one.vmpool.info %d times (it drops the user template)", n)
	}
}

func TestListEventsDown(t *testing.T) {
	sim := startSim(t, vm42())
	c := newClient(t, sim, time.Second)
	_ = sim.SetDown(true)
	if _, err := c.ListEvents(context.Background(), -1, time.Time{}); !errors.Is(err, opennebula.ErrUnreachable) {
		t.Errorf("err = %v, want ErrUnreachable", err)
	}
}
