package events

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestDeliver(t *testing.T) {
	unavailable := fmt.Errorf("dial tcp: connection refused: %w", ErrUnavailable)
	tests := []struct {
		name          string
		noSpool       bool
		nilSink       bool
		older         []string // already spooled before the call
		fail          func(Event) error
		wantDelivered int
		wantSpooled   int
		wantErr       string // "", "deferred", "lost"
		wantSink      string // delivery order seen by the sink
		wantLeft      string
	}{
		{
			name: "sink ok", wantDelivered: 2, wantSink: "n1,n2",
		},
		{
			name: "older events are flushed first", older: []string{"o1", "o2"},
			wantDelivered: 2, wantSink: "o1,o2,n1,n2",
		},
		{
			name: "sink down: everything spooled",
			fail: func(Event) error { return unavailable }, older: []string{"o1"},
			wantSpooled: 2, wantErr: "deferred", wantLeft: "o1,n1,n2",
		},
		{
			name: "one event refused: spooled, the other delivered",
			fail: func(ev Event) error {
				if ev.ID == "n1" {
					return errors.New("[one.vm.update] Error getting virtual machine [1].")
				}
				return nil
			},
			wantDelivered: 1, wantSpooled: 1, wantErr: "deferred", wantSink: "n2", wantLeft: "n1",
		},
		{
			name: "older event refused does not block new ones", older: []string{"o1"},
			fail: func(ev Event) error {
				if ev.ID == "o1" {
					return errors.New("VM gone")
				}
				return nil
			},
			wantDelivered: 2, wantSink: "n1,n2", wantLeft: "o1",
		},
		{
			name: "no sink: spooled", nilSink: true,
			wantSpooled: 2, wantErr: "deferred", wantLeft: "n1,n2",
		},
		{
			name: "no spool and sink down: lost", noSpool: true,
			fail:    func(Event) error { return unavailable },
			wantErr: "lost",
		},
		{
			name: "no spool, sink ok", noSpool: true, wantDelivered: 2, wantSink: "n1,n2",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var sp *Spool
			if !tc.noSpool {
				sp = openSpool(t)
				for i, id := range tc.older {
					if err := sp.Put(sample(id, 1, t0.Add(-time.Duration(10-i)*time.Second))); err != nil {
						t.Fatal(err)
					}
				}
			}
			sink := &fakeSink{fail: tc.fail}
			var s Sink = sink
			if tc.nilSink {
				s = nil
			}
			evs := []Event{sample("n1", 1, t0), sample("n2", 2, t0.Add(time.Second))}
			d, n, err := Deliver(context.Background(), s, sp, evs)
			if d != tc.wantDelivered || n != tc.wantSpooled {
				t.Errorf("Deliver = %d delivered, %d spooled; want %d, %d", d, n, tc.wantDelivered, tc.wantSpooled)
			}
			var de *DeferredError
			switch tc.wantErr {
			case "":
				if err != nil {
					t.Errorf("err = %v, want nil", err)
				}
			case "deferred":
				if !errors.As(err, &de) || de.Spooled != tc.wantSpooled {
					t.Errorf("err = %v, want *DeferredError with %d spooled", err, tc.wantSpooled)
				}
			case "lost":
				if err == nil || errors.As(err, &de) || !strings.Contains(err.Error(), "lost") {
					t.Errorf("err = %v, want a loss error", err)
				}
				if d+n >= len(evs) {
					t.Errorf("delivered+spooled = %d, want < %d", d+n, len(evs))
				}
			}
			if got := strings.Join(sink.ids(), ","); got != tc.wantSink {
				t.Errorf("sink saw %q, want %q", got, tc.wantSink)
			}
			if sp != nil {
				if got := strings.Join(pendingIDs(t, sp), ","); got != tc.wantLeft {
					t.Errorf("spool holds %q, want %q", got, tc.wantLeft)
				}
			}
		})
	}
}

// With the sink unreachable, Deliver does not wait on it for every event.
func TestDeliverSinkDownDoesNotRetryEachEvent(t *testing.T) {
	sp := openSpool(t)
	calls := 0
	sink := &fakeSink{fail: func(Event) error {
		calls++
		return fmt.Errorf("timeout: %w", ErrUnavailable)
	}}
	var evs []Event
	for i := 0; i < 5; i++ {
		evs = append(evs, sample(fmt.Sprintf("n%d", i), 1, t0.Add(time.Duration(i)*time.Second)))
	}
	_, n, err := Deliver(context.Background(), sink, sp, evs)
	var de *DeferredError
	if n != 5 || !errors.As(err, &de) {
		t.Fatalf("Deliver = %d spooled, %v", n, err)
	}
	if calls != 1 {
		t.Errorf("sink called %d times, want 1", calls)
	}
}

// With an expired context, events still reach the spool.
func TestDeliverExpiredContextStillSpools(t *testing.T) {
	sp := openSpool(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, n, err := Deliver(ctx, &fakeSink{}, sp, []Event{sample("n1", 1, t0)})
	var de *DeferredError
	if n != 1 || !errors.As(err, &de) {
		t.Fatalf("Deliver = %d spooled, %v; want 1 deferred", n, err)
	}
}

// A spool that cannot be written is reported as a loss.
func TestDeliverUnwritableSpool(t *testing.T) {
	sp := openSpool(t)
	// Replace the directory by a file: every write fails, even for root.
	if err := os.RemoveAll(sp.Dir()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sp.Dir(), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, n, err := Deliver(context.Background(), nil, sp, []Event{sample("n1", 1, t0)})
	var de *DeferredError
	if n != 0 || err == nil || errors.As(err, &de) {
		t.Fatalf("Deliver = %d spooled, %v; want a loss error", n, err)
	}
}
