package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestSpoolList(t *testing.T) {
	one, _ := json.Marshal(sample("e00", 1, t0))
	size := len(one) // every sample event below encodes to the same length
	for _, tc := range []struct {
		name     string
		n        int // events e00.. spooled, one second apart
		max      int
		maxBytes int
		want     int
		more     bool
	}{
		{"empty", 0, 10, 1 << 20, 0, false},
		{"all fit", 3, 10, 1 << 20, 3, false},
		{"count bound", 5, 2, 1 << 20, 2, true},
		{"byte bound", 5, 10, 2*size + 1, 2, true},
		{"exact count", 3, 3, 1 << 20, 3, false},
		{"one event larger than the byte bound is still listed", 2, 10, 1, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := openSpool(t)
			for i := 0; i < tc.n; i++ {
				if err := sp.Put(sample(fmt.Sprintf("e%02d", i), 1, t0.Add(time.Duration(tc.n-i)*-time.Second))); err != nil {
					t.Fatal(err)
				}
			}
			evs, more, err := sp.List(context.Background(), tc.max, tc.maxBytes)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != tc.want || more != tc.more {
				t.Fatalf("listed %d (more %v), want %d (more %v)", len(evs), more, tc.want, tc.more)
			}
			for i, ev := range evs { // oldest first
				if want := fmt.Sprintf("e%02d", i); ev.ID != want {
					t.Fatalf("event %d is %s, want %s", i, ev.ID, want)
				}
			}
		})
	}
	sp := openSpool(t)
	if _, _, err := sp.List(context.Background(), 0, 10); err == nil {
		t.Fatal("List with no room: no error")
	}
}

// A corrupt file is set aside and reported; the good events are listed.
func TestSpoolListCorrupt(t *testing.T) {
	sp := openSpool(t)
	for _, id := range []string{"a", "c"} {
		if err := sp.Put(sample(id, 1, t0)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(sp.Dir(), "b.json"), []byte("{torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	evs, more, err := sp.List(context.Background(), 10, 1<<20)
	var ce *CorruptError
	if !errors.As(err, &ce) || len(ce.Moved) != 1 || more {
		t.Fatalf("err %v more %v, want one corrupt file reported", err, more)
	}
	if len(evs) != 2 || evs[0].ID != "a" || evs[1].ID != "c" {
		t.Fatalf("listed %v", evs)
	}
	if _, err := os.Stat(filepath.Join(sp.Dir(), "bad", "b.json")); err != nil {
		t.Fatalf("corrupt file not set aside: %v", err)
	}
	// Reported once: the next listing is clean.
	if _, _, err := sp.List(context.Background(), 10, 1<<20); err != nil {
		t.Fatal(err)
	}
}

func TestSpoolAck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ack     []string
		removed int
		missing string
		left    string
		err     string
	}{
		{"nothing", nil, 0, "", "a b c", ""},
		{"some", []string{"a", "c"}, 2, "", "b", ""},
		{"already gone", []string{"a", "zz"}, 1, "zz", "b c", ""},
		{"twice in one ack", []string{"b", "b"}, 1, "b", "a c", ""},
		{"a path is refused before anything is removed", []string{"a", "../c"}, 0, "", "a b c", "event id"},
		{"a hidden name is refused", []string{".lock"}, 0, "", "a b c", "event id"},
		{"empty id", []string{""}, 0, "", "a b c", "event id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := openSpool(t)
			for _, id := range []string{"a", "b", "c"} {
				if err := sp.Put(sample(id, 1, t0)); err != nil {
					t.Fatal(err)
				}
			}
			// A file outside the spool that "../c" would name.
			outside := filepath.Join(filepath.Dir(sp.Dir()), "c.json")
			if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			removed, missing, err := sp.Ack(context.Background(), tc.ack)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if removed != tc.removed || strings.Join(missing, " ") != tc.missing {
				t.Fatalf("removed %d missing %q, want %d %q", removed, missing, tc.removed, tc.missing)
			}
			if got := strings.Join(pendingIDs(t, sp), " "); got != tc.left {
				t.Fatalf("left %q, want %q", got, tc.left)
			}
			if _, err := os.Stat(outside); err != nil {
				t.Fatalf("file outside the spool: %v", err)
			}
		})
	}
}

// List and Ack wait for the spool's lock (a Flush delivering) and honour
// ctx while waiting.
func TestSpoolListAckWaitForLock(t *testing.T) {
	sp := openSpool(t)
	if err := sp.Put(sample("a", 1, t0)); err != nil {
		t.Fatal(err)
	}
	unlock, err := sp.lock(context.Background(), lockName)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, _, err := sp.List(ctx, 10, 1<<20); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("List while locked: %v", err)
	}
	if _, _, err := sp.Ack(ctx, []string{"a"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ack while locked: %v", err)
	}
	// The collection lock is another file: a Flush does not wait for a
	// collection, nor the reverse.
	cu, err := sp.LockCollect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	cu()
	unlock()
	if got := pendingIDs(t, sp); len(got) != 1 {
		t.Fatalf("pending %v", got)
	}
}

// Events spooled while a collector lists and acknowledges are never lost:
// each is either acknowledged after being listed or still pending.
func TestSpoolCollectWhileSpooling(t *testing.T) {
	sp := openSpool(t)
	const n = 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			if err := sp.Put(sample(fmt.Sprintf("ev%03d", i), i%7, t0.Add(time.Duration(i)*time.Millisecond))); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	delivered := map[string]int{}
	collect := func() {
		evs, _, err := sp.List(context.Background(), 50, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, ev := range evs {
			delivered[ev.ID]++
			ids = append(ids, ev.ID)
		}
		if _, missing, err := sp.Ack(context.Background(), ids); err != nil || len(missing) > 0 {
			t.Fatalf("ack: %v, missing %v", err, missing)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		collect()
	}
	for len(pendingIDs(t, sp)) > 0 {
		collect()
	}
	if len(delivered) != n {
		t.Fatalf("%d events delivered, want %d", len(delivered), n)
	}
	for id, c := range delivered {
		if c != 1 {
			t.Fatalf("event %s listed %d times after its ack", id, c)
		}
	}
}

// Root writing into a spool another user owns (the hook into oneadmin's
// /var/lib/one) gives that user the files and the directories it creates,
// so the front-end's collector (ssh as oneadmin) can read and remove them.
func TestSpoolOwnerForRoot(t *testing.T) {
	base := t.TempDir()
	const uid, gid = 4242, 4343
	if os.Geteuid() == 0 {
		if err := os.Chown(base, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	sp, err := OpenSpool(filepath.Join(base, "rbdfence", "spool"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Put(sample("a", 1, t0)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sp.Dir(), "b.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _ = sp.Pending() // sets b.json aside, creating bad/
	if _, err := sp.Flush(context.Background(), &fakeSink{fail: func(Event) error { return errors.New("no") }}); err == nil {
		t.Fatal("flush to a failing sink: no error")
	}
	wantUID, wantGID := os.Geteuid(), os.Getegid()
	if os.Geteuid() == 0 {
		wantUID, wantGID = uid, gid
	}
	for _, p := range []string{"rbdfence", "rbdfence/spool", "rbdfence/spool/a.json", "rbdfence/spool/.lock", "rbdfence/spool/bad"} {
		st, err := os.Lstat(filepath.Join(base, p))
		if err != nil {
			t.Fatal(err)
		}
		s := st.Sys().(*syscall.Stat_t)
		if int(s.Uid) != wantUID || int(s.Gid) != wantGID {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, s.Uid, s.Gid, wantUID, wantGID)
		}
	}
	// A spool directory owned by root stays root's.
	if os.Geteuid() == 0 {
		sp2 := openSpool(t)
		if err := sp2.Put(sample("a", 1, t0)); err != nil {
			t.Fatal(err)
		}
		st, _ := os.Lstat(filepath.Join(sp2.Dir(), "a.json"))
		if s := st.Sys().(*syscall.Stat_t); s.Uid != 0 {
			t.Errorf("event in root's spool owned by %d", s.Uid)
		}
	}
}

// The lock file is not followed through a symlink (root's hook writes into
// a directory another user owns).
func TestSpoolLockNoSymlink(t *testing.T) {
	sp := openSpool(t)
	target := filepath.Join(t.TempDir(), "victim")
	if err := os.Symlink(target, filepath.Join(sp.Dir(), lockName)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sp.List(context.Background(), 1, 1); err == nil {
		t.Fatal("List through a symlinked lock: no error")
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the symlink's target was created: %v", err)
	}
}
