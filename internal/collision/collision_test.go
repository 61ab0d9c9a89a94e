package collision

import (
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
)

func TestEvents(t *testing.T) {
	rec := audit.Record{Time: time.Unix(100, 0), Run: "r", VM: audit.VMOf(42), Host: "h", Image: "one/a", Client: "client.9", Address: "10.0.0.1:0/5", Action: "blocklisted+unlocked"}
	failed := rec
	failed.Address, failed.Error = "10.0.0.2:0/6", "boom"
	other := rec
	other.VM = nil
	evs := Events([]audit.Record{rec, failed, other}, "hook/start")
	if len(evs) != 2 {
		t.Fatalf("records of non-VMs must not become events: %d", len(evs))
	}
	if evs[0].Action != "blocklisted+unlocked" || evs[1].Action != "fence-failed" || evs[0].Source != "hook/start" {
		t.Fatalf("events %+v", evs)
	}
	for _, ev := range evs {
		if err := ev.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	// The id depends on run, VM, image and address only: the intent spooled
	// after the blocklist and the final event replace each other.
	intent := rec
	intent.Action, intent.Time = "blocklisted", time.Unix(99, 0)
	if eventID(intent) != eventID(rec) || eventID(rec) == eventID(failed) {
		t.Fatal("event ids must be stable per run, VM, image and address")
	}
}
