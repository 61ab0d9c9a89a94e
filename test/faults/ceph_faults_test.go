// Package faults_test proves that a fence interrupted by a Ceph fault ends in
// a defined state: the failure is reported (never a silent partial fence), no
// lock is broken before its owner is blocklisted, and the next run completes.
// It uses a private cluster so that pausing its daemons disturbs no other test.
package faults_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// The fault tests pause daemons: they get a cluster of their own.
const faultPort = "16791"

var faultDir = testenv.Dir("ceph-fault")

func cluster(t *testing.T) *testenv.Ceph {
	return testenv.StartCephAt(t, faultDir, "", faultPort)
}

// daemon pauses (SIGSTOP) or resumes (SIGCONT) one of the fault cluster's daemons.
func daemon(t *testing.T, op, name string) {
	t.Helper()
	out, err := exec.Command("bash", filepath.Join(testenv.Root(), "test/ceph/cluster.sh"), op, name, "--dir", faultDir, "--port", faultPort).CombinedOutput()
	if err != nil {
		t.Fatalf("cluster.sh %s %s: %v\n%s", op, name, err, out)
	}
}

// faulty wraps the real adapter and runs a fault before one chosen call.
type faulty struct {
	engine.Cluster
	mu     sync.Mutex
	before map[string]func()
}

func (f *faulty) at(name string) {
	f.mu.Lock()
	fn := f.before[name]
	delete(f.before, name)
	f.mu.Unlock()
	if fn != nil {
		fn()
	}
}

func (f *faulty) Blocklist(ctx context.Context, a engine.Addr, d time.Duration) error {
	f.at("blocklist")
	return f.Cluster.Blocklist(ctx, a, d)
}

func (f *faulty) BreakLock(ctx context.Context, img engine.Image, l engine.Locker) error {
	f.at("break")
	return f.Cluster.BreakLock(ctx, img, l)
}

func connect(t *testing.T, c *testenv.Ceph) *ceph.Cluster {
	t.Helper()
	cl, err := ceph.Connect(context.Background(), ceph.Config{MonHost: c.MonHost, User: c.User, Keyring: c.Keyring,
		ConnectTimeout: 5 * time.Second, OpTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func image(spec string) engine.Image {
	pool, name, _ := strings.Cut(spec, "/")
	return engine.Image{Pool: pool, Name: name}
}

func TestOSDStopsBetweenBlocklistAndLockBreak(t *testing.T) {
	c := cluster(t)
	img := c.NewImage(t, "osdstop")
	z := testenv.StartZombie(t, c, img, "write", "--mon", c.MonHost)
	z.WaitWrite(t, true, 10*time.Second)
	f := &faulty{Cluster: connect(t, c), before: map[string]func(){}}
	resumed := false
	f.before["break"] = func() { daemon(t, "pause", "osd") }
	t.Cleanup(func() {
		if !resumed {
			daemon(t, "resume", "osd")
		}
	})
	e := engine.New(f, engine.Options{Expire: time.Hour})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	r := e.Fence(ctx, []engine.Image{image(img)}, engine.Scope{}, nil)
	took := time.Since(start)
	err := r.Err()
	cl := r.Images[0].Clients[0]
	if err == nil || cl.Action != engine.ActFailed || !strings.Contains(cl.Error, "blocklisted, but breaking lock") {
		t.Fatalf("an interrupted lock break must be reported as such: %v %+v", err, cl)
	}
	if took > 15*time.Second {
		t.Fatalf("bounded by the op timeout: took %s", took)
	}
	if _, ok := c.BlocklistEntries(t)[z.Addr]; !ok {
		t.Fatal("the zombie must be blocklisted even though its lock could not be broken")
	}
	daemon(t, "resume", "osd")
	resumed = true
	if ev := z.WaitWrite(t, false, 20*time.Second); ev.Errno != 108 {
		t.Fatalf("the blocklisted zombie must not write once the OSD is back: errno %d", ev.Errno)
	}
	// The next run finds the dead owner's lock and completes the fence.
	r = e.Fence(context.Background(), []engine.Image{image(img)}, engine.Scope{}, nil)
	if r.Err() != nil || r.Fenced != 1 || r.Images[0].Clients[0].Action != engine.ActUnlocked {
		t.Fatalf("rerun after the OSD returned: %v %+v", r.Err(), r.Images[0].Clients)
	}
	if out := c.AsLibvirt(t, "rbd", "lock", "ls", "--format", "json", img); strings.TrimSpace(out) != "[]" {
		t.Fatalf("lock still held: %s", out)
	}
}

func TestMonitorUnreachableMidRun(t *testing.T) {
	c := cluster(t)
	img := c.NewImage(t, "monstop")
	z := testenv.StartZombie(t, c, img, "write", "--mon", c.MonHost)
	z.WaitWrite(t, true, 10*time.Second)
	f := &faulty{Cluster: connect(t, c), before: map[string]func(){}}
	resumed := false
	f.before["blocklist"] = func() { daemon(t, "pause", "mon") }
	t.Cleanup(func() {
		if !resumed {
			daemon(t, "resume", "mon")
		}
	})
	e := engine.New(f, engine.Options{Expire: time.Hour})
	r := e.Fence(context.Background(), []engine.Image{image(img)}, engine.Scope{}, nil)
	cl := r.Images[0].Clients[0]
	if r.Err() == nil || cl.Action != engine.ActFailed || !strings.Contains(cl.Error, "blocklist failed") {
		t.Fatalf("a blocklist that could not reach the monitor must be reported: %+v", cl)
	}
	daemon(t, "resume", "mon")
	resumed = true
	// Nothing half-done: the lock was not broken, the zombie still owns it.
	z.WaitWrite(t, true, 20*time.Second)
	if out := c.AsLibvirt(t, "rbd", "lock", "ls", "--format", "json", img); !strings.Contains(out, strings.TrimPrefix(z.Addr, "")) {
		t.Fatalf("the lock must not be broken when the blocklist failed: %s", out)
	}
	r = e.Fence(context.Background(), []engine.Image{image(img)}, engine.Scope{}, nil)
	if r.Err() != nil || r.Fenced != 1 {
		t.Fatalf("rerun with the monitor back: %v", r.Err())
	}
	if ev := z.WaitWrite(t, false, 10*time.Second); ev.Errno != 108 {
		t.Fatalf("errno %d", ev.Errno)
	}
}
