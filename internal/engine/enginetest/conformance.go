package enginetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// Harness gives the conformance suite what it needs from one implementation.
type Harness struct {
	Cluster engine.Cluster
	Pool    string
	// NewImage creates a fresh, unused image and returns it.
	NewImage func(t *testing.T) engine.Image
	// Zombie starts a foreign client on img (locking it when lock is true) and
	// returns its address once it is visible.
	Zombie func(t *testing.T, img engine.Image, lock bool) engine.Addr
	// CutOff, when set, makes the client at a invisible, as when its host
	// loses Ceph (a real cluster cannot do that on demand: nil there).
	CutOff func(t *testing.T, a engine.Addr)
}

// Run runs the conformance suite against h.
func Run(t *testing.T, h Harness) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := h.Cluster

	t.Run("NoClients", func(t *testing.T) {
		img := h.NewImage(t)
		cl, err := c.ImageClients(ctx, img)
		if err != nil {
			t.Fatal(err)
		}
		if len(cl.Lockers)+len(cl.Watchers) != 0 {
			t.Fatalf("fresh image has clients: %+v (our own watcher must be dropped)", cl)
		}
	})
	t.Run("MissingImage", func(t *testing.T) {
		_, err := c.ImageClients(ctx, engine.Image{Pool: h.Pool, Name: fmt.Sprintf("missing-%d", time.Now().UnixNano())})
		if !errors.Is(err, engine.ErrImageNotFound) {
			t.Fatalf("want ErrImageNotFound, got %v", err)
		}
	})
	t.Run("LockerFenced", func(t *testing.T) {
		img := h.NewImage(t)
		a := h.Zombie(t, img, true)
		cl, err := c.ImageClients(ctx, img)
		if err != nil {
			t.Fatal(err)
		}
		if len(cl.Lockers) != 1 || cl.Lockers[0].Addr != a || !strings.HasPrefix(cl.Lockers[0].Client, "client.") {
			t.Fatalf("want one locker at %s, got %+v", a, cl.Lockers)
		}
		if len(cl.Watchers) != 1 || cl.Watchers[0].Addr != a {
			t.Fatalf("want one watcher at %s, got %+v", a, cl.Watchers)
		}
		for i := 0; i < 2; i++ { // idempotent
			if err := c.Blocklist(ctx, a, time.Hour); err != nil {
				t.Fatalf("blocklist #%d: %v", i, err)
			}
		}
		if err := c.WaitForLatestOSDMap(ctx); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := c.BreakLock(ctx, img, cl.Lockers[0]); err != nil {
				t.Fatalf("break lock #%d: %v", i, err)
			}
		}
		cl = waitClients(t, ctx, c, img, 0, 0)
	})
	t.Run("WatcherOnly", func(t *testing.T) {
		img := h.NewImage(t)
		a := h.Zombie(t, img, false)
		cl, err := c.ImageClients(ctx, img)
		if err != nil {
			t.Fatal(err)
		}
		if len(cl.Lockers) != 0 || len(cl.Watchers) != 1 || cl.Watchers[0].Addr != a {
			t.Fatalf("want only a watcher at %s, got %+v", a, cl)
		}
	})
	t.Run("NoWholeHostBlocklist", func(t *testing.T) {
		a, _ := engine.ParseAddr("192.0.2.1:0/0")
		if err := c.Blocklist(ctx, a, time.Hour); err == nil {
			t.Fatal("blocklisting ip:0/0 must be refused")
		}
	})
	t.Run("Lease", func(t *testing.T) {
		oid := fmt.Sprintf("rbdfence.conformance.%d", time.Now().UnixNano())
		if err := c.AcquireLease(ctx, h.Pool, oid, "host=a run=1", time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := c.AcquireLease(ctx, h.Pool, oid, "host=a run=1", time.Minute); err != nil {
			t.Fatalf("renewing with the same cookie: %v", err)
		}
		err := c.AcquireLease(ctx, h.Pool, oid, "host=b run=2", time.Minute)
		var held *engine.LeaseHeldError
		if !errors.As(err, &held) || !strings.Contains(held.Holder, "host=a run=1") {
			t.Fatalf("want LeaseHeldError naming host=a run=1, got %v", err)
		}
		if err := c.ReleaseLease(ctx, h.Pool, oid, "host=a run=1"); err != nil {
			t.Fatal(err)
		}
		if err := c.ReleaseLease(ctx, h.Pool, oid, "host=a run=1"); err != nil {
			t.Fatalf("releasing twice: %v", err)
		}
		if err := c.AcquireLease(ctx, h.Pool, oid, "host=b run=2", time.Minute); err != nil {
			t.Fatalf("after release: %v", err)
		}
	})
	t.Run("Lifecycle", func(t *testing.T) { lifecycle(t, h) })
	t.Run("LifecycleMigration", func(t *testing.T) { lifecycleMigration(t, h) })
	t.Run("LifecycleKnowledge", func(t *testing.T) { lifecycleKnowledge(t, h) })
	t.Run("CompareAndSwap", func(t *testing.T) {
		oid := fmt.Sprintf("rbdfence.conformance.%d", time.Now().UnixNano())
		if _, _, err := c.ReadObject(ctx, h.Pool, oid); !errors.Is(err, engine.ErrObjectNotFound) {
			t.Fatalf("missing object: want ErrObjectNotFound, got %v", err)
		}
		if err := c.AcquireLease(ctx, h.Pool, oid, "x", time.Minute); err != nil {
			t.Fatal(err)
		}
		data, v1, err := c.ReadObject(ctx, h.Pool, oid)
		if err != nil || len(data) != 0 {
			t.Fatalf("lease must create an empty object: %q %v", data, err)
		}
		if err := c.WriteObject(ctx, h.Pool, oid, []byte("one"), v1); err != nil {
			t.Fatal(err)
		}
		if err := c.WriteObject(ctx, h.Pool, oid, []byte("two"), v1); !errors.Is(err, engine.ErrStale) {
			t.Fatalf("stale write: want ErrStale, got %v", err)
		}
		data, v2, err := c.ReadObject(ctx, h.Pool, oid)
		if err != nil || string(data) != "one" || v2 <= v1 {
			t.Fatalf("after write: %q v%d (was v%d) %v", data, v2, v1, err)
		}
	})
}

func waitClients(t *testing.T, ctx context.Context, c engine.Cluster, img engine.Image, lockers, watchers int) engine.Clients {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cl, err := c.ImageClients(ctx, img)
		if err != nil {
			t.Fatal(err)
		}
		if len(cl.Lockers) == lockers && len(cl.Watchers) == watchers {
			return cl
		}
		if time.Now().After(deadline) {
			t.Fatalf("want %d lockers and %d watchers, got %+v", lockers, watchers, cl)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
