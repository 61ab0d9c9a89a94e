//go:build cgo

package hostfence

import (
	"strings"
	"testing"
	"time"
)

func TestEventsAndSummary(t *testing.T) {
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	res := &Result{Host: "node7", HostID: 7, Run: "r1", Time: at, HostIPs: []string{"10.0.0.7"}, Fenced: 3, Expire: at.Add(time.Hour),
		VMs: []VM{
			{VM: 1, Seq: 2, Fenced: []string{"10.0.0.7:0/1", "10.0.0.7:0/2"}},
			{VM: 2, Seq: 0, Fenced: []string{}},                           // nothing of it on the host: no event
			{VM: 3, Seq: 1, Fenced: []string{}, Elsewhere: "node8"},       // runs elsewhere: no event
			{VM: 4, Seq: 1, Fenced: []string{"10.0.0.7:0/9"}, Error: "x"}, // incomplete
		}}
	evs := Events(res)
	if len(evs) != 2 || evs[0].VM != 1 || evs[1].VM != 4 {
		t.Fatalf("events: %+v", evs)
	}
	if evs[0].Action != "host-fenced" || evs[0].Address != "10.0.0.7:0/1 10.0.0.7:0/2" || evs[0].Host != "node7" || evs[0].Source != Op || !evs[0].Expire.Equal(res.Expire) {
		t.Fatalf("event of VM 1: %+v", evs[0])
	}
	if evs[1].Action != "host-fence-failed" {
		t.Fatalf("event of VM 4: %+v", evs[1])
	}
	for _, ev := range evs {
		if err := ev.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if again := Events(res); again[0].ID != evs[0].ID || evs[0].ID == evs[1].ID {
		t.Fatal("event ids must be stable per run and VM, and differ between VMs")
	}
	tpl, line := HostSummary(res)
	if !strings.Contains(line, "host node7: fenced 3 client(s) of 2 of the host's 4 VM(s)") || !strings.Contains(line, "incomplete") {
		t.Fatalf("summary line: %s", line)
	}
	for _, want := range []string{`RESULT = "incomplete"`, `CLIENTS = "3"`, `HOST_IPS = "10.0.0.7"`, "RBDFENCE_HOST_FENCE = [", `RUN = "r1"`} {
		if !strings.Contains(tpl, want) {
			t.Fatalf("host template lacks %q:\n%s", want, tpl)
		}
	}
	if err := res.Err(); err == nil || !strings.Contains(err.Error(), "VM 4: x") {
		t.Fatalf("Err: %v", err)
	}
}
