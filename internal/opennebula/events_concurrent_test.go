package opennebula_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/test/onedsim"
)

// heldUpdates is a proxy in front of the oned stand-in that holds the
// first one.vm.update of each writer (told apart by the event id in its
// template) until the test releases it, and passes every other call.
type heldUpdates struct {
	target  string
	arrived chan string
	mu      sync.Mutex
	release map[string]chan struct{}
	seen    map[string]bool
}

func (h *heldUpdates) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if bytes.Contains(body, []byte("<methodName>one.vm.update</methodName>")) {
		h.mu.Lock()
		for id, ch := range h.release {
			if bytes.Contains(body, []byte(id)) && !h.seen[id] {
				h.seen[id] = true
				h.mu.Unlock()
				h.arrived <- id
				<-ch
				h.mu.Lock()
				break
			}
		}
		h.mu.Unlock()
	}
	resp, err := http.Post(h.target, "text/xml", bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// TestRecordEventConcurrentWriters (issue 18 item 12): two writers read
// the VM's user template before either writes (a driver publishing its
// fence while `events flush` delivers a host's event of the same VM);
// writer A's update lands and A's read-back finds its event; then B's
// update lands. Both events stay in what onevm show displays. On 0300e58
// B's merge replaced every RBDFENCE_EVENT and A's was lost although A had
// verified it. Then eight writers at once: all eight are kept.
func TestRecordEventConcurrentWriters(t *testing.T) {
	sim := startSim(t, vm42())
	const a, b = "writer-aaaa", "writer-bbbb"
	h := &heldUpdates{target: sim.URL(), arrived: make(chan string, 2),
		release: map[string]chan struct{}{a: make(chan struct{}), b: make(chan struct{})}, seen: map[string]bool{}}
	proxy := httptest.NewServer(h)
	t.Cleanup(proxy.Close)
	newProxied := func() *opennebula.Client {
		c, err := opennebula.New(proxy.URL, authFile(t, simAuth+"\n"), 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := context.Background()
	done := map[string]chan error{a: make(chan error, 1), b: make(chan error, 1)}
	for i, id := range []string{a, b} {
		c := newProxied()
		e := ev(id, 42, t0.Add(time.Duration(i)*time.Second))
		go func() { done[id] <- c.RecordEvent(ctx, e) }()
	}
	wait := func(what string, ch <-chan error) {
		t.Helper()
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no answer within 30 s", what)
		}
	}
	for i := 0; i < 2; i++ {
		select {
		case <-h.arrived: // both writers have read, and wait to write
		case <-time.After(30 * time.Second):
			t.Fatal("the writers did not both reach their update")
		}
	}
	close(h.release[a])
	wait("writer A", done[a])
	close(h.release[b])
	wait("writer B", done[b])
	ids, count, _ := userEvents(t, sim, 42)
	if !contains(ids, a) || !contains(ids, b) {
		t.Fatalf("events after two concurrent writers: %v (count %s), want both %s and %s\n%s", ids, count, a, b, userTemplate(t, sim))
	}

	// Eight writers at once, on the stand-in directly.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		c := newClient(t, sim, 20*time.Second)
		e := ev(fmt.Sprintf("burst-%d", i), 42, t0.Add(time.Minute+time.Duration(i)*time.Second))
		wg.Add(1)
		go func() { defer wg.Done(); errs <- c.RecordEvent(ctx, e) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ids, _, _ = userEvents(t, sim, 42)
	if len(ids) != opennebula.MaxEvents {
		t.Fatalf("%d events kept, want %d: %v", len(ids), opennebula.MaxEvents, ids)
	}
	for i := 0; i < 8; i++ {
		if !contains(ids, fmt.Sprintf("burst-%d", i)) {
			t.Fatalf("burst-%d lost: %v", i, ids)
		}
	}
}

// TestRecordEventMovesLegacyEvents: events an older version kept under the
// single RBDFENCE_EVENT name are moved to their own names by the next
// event, in the same update; nothing is lost and the newest ten are kept.
func TestRecordEventMovesLegacyEvents(t *testing.T) {
	var legacy strings.Builder
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&legacy, "RBDFENCE_EVENT = [ ID = \"old%d\", TIME = \"%s\", ACTION = \"blocklist\" ]\n", i, t0.Add(time.Duration(i)*time.Minute).Format(time.RFC3339))
	}
	legacy.WriteString("RBDFENCE_COLLISIONS = \"10\"\n")
	tpl, err := onedsim.ParseTemplate(legacy.String())
	if err != nil {
		t.Fatal(err)
	}
	v := vm42()
	v.UserTemplate = tpl
	sim := startSim(t, v)
	c := newClient(t, sim, 5*time.Second)
	if err := c.RecordEvent(context.Background(), ev("new", 42, t0.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	ut, _ := sim.UserTemplate(42)
	if len(ut.Get(opennebula.AttrEvent)) != 0 {
		t.Fatalf("the old single-name events are still there:\n%s", ut.String())
	}
	ids, count, _ := userEvents(t, sim, 42)
	if count != "11" || len(ids) != opennebula.MaxEvents || ids[0] != "old1" || ids[9] != "new" {
		t.Fatalf("after the move: count %s ids %v\n%s", count, ids, ut.String())
	}
	listed, err := c.ListEvents(context.Background(), 42, time.Time{})
	if err != nil || len(listed) != opennebula.MaxEvents || listed[9].ID != "new" {
		t.Fatalf("ListEvents: %v %v", listed, err)
	}
}

func userTemplate(t *testing.T, sim *onedsim.Sim) string {
	t.Helper()
	ut, _ := sim.UserTemplate(42)
	return ut.String()
}
