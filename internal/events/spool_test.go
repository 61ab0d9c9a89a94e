package events

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeSink records what it receives; fail decides per event.
type fakeSink struct {
	mu    sync.Mutex
	got   []Event
	seen  map[string]int
	fail  func(Event) error
	delay time.Duration
}

func (f *fakeSink) RecordEvent(ctx context.Context, ev Event) error {
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f.fail != nil {
		if err := f.fail(ev); err != nil {
			return err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen == nil {
		f.seen = map[string]int{}
	}
	f.seen[ev.ID]++
	f.got = append(f.got, ev)
	return nil
}

func (f *fakeSink) ids() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, ev := range f.got {
		ids = append(ids, ev.ID)
	}
	return ids
}

func openSpool(t *testing.T) *Spool {
	t.Helper()
	sp, err := OpenSpool(filepath.Join(t.TempDir(), "spool"))
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func pendingIDs(t *testing.T, sp *Spool) []string {
	t.Helper()
	evs, err := sp.Pending()
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	var ids []string
	for _, ev := range evs {
		ids = append(ids, ev.ID)
	}
	return ids
}

func TestSpoolPutPendingOrderAndModes(t *testing.T) {
	sp := openSpool(t)
	for _, ev := range []Event{
		sample("c", 1, t0.Add(2*time.Second)),
		sample("a", 1, t0),
		sample("b2", 2, t0.Add(time.Second)),
		sample("b1", 2, t0.Add(time.Second)),
	} {
		if err := sp.Put(ev); err != nil {
			t.Fatalf("Put(%s): %v", ev.ID, err)
		}
	}
	// Putting the same event again replaces it.
	if err := sp.Put(sample("a", 1, t0)); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(pendingIDs(t, sp), ","), "a,b1,b2,c"; got != want {
		t.Errorf("Pending order = %s, want %s", got, want)
	}
	st, err := os.Stat(sp.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("spool dir mode = %v, want 0700", st.Mode().Perm())
	}
	fi, err := os.Stat(filepath.Join(sp.Dir(), "a.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("event file mode = %v, want 0600", fi.Mode().Perm())
	}
	evs, _ := sp.Pending()
	if want := sample("a", 1, t0); !evs[0].Time.Equal(want.Time) || evs[0].Cookie != want.Cookie || !evs[0].Expire.Equal(want.Expire) {
		t.Errorf("round trip: got %+v want %+v", evs[0], want)
	}
}

func TestSpoolPutRejectsInvalid(t *testing.T) {
	sp := openSpool(t)
	for _, ev := range []Event{
		sample("../escape", 1, t0),
		sample("", 1, t0),
		sample("ok", 1, time.Time{}),
	} {
		if err := sp.Put(ev); err == nil {
			t.Errorf("Put(%q) succeeded, want error", ev.ID)
		}
	}
	entries, _ := os.ReadDir(sp.Dir())
	if len(entries) != 0 {
		t.Errorf("spool has %d entries after rejected puts", len(entries))
	}
}

// A crash during Put leaves a temp file: it is ignored, and removed once stale.
func TestSpoolTempFileLeftBehind(t *testing.T) {
	sp := openSpool(t)
	if err := sp.Put(sample("good", 1, t0)); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(sp.Dir(), ".tmp-half.json-123")
	stale := filepath.Join(sp.Dir(), ".tmp-old.json-456")
	for _, p := range []string{fresh, stale} {
		if err := os.WriteFile(p, []byte(`{"id":"half","ti`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleTmpAge)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(pendingIDs(t, sp), ","); got != "good" {
		t.Fatalf("Pending = %s, want good", got)
	}
	sink := &fakeSink{}
	n, err := sp.Flush(context.Background(), sink)
	if err != nil || n != 1 {
		t.Fatalf("Flush = %d, %v; want 1, nil", n, err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temp file removed (a Put may still be writing it): %v", err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale temp file not removed: %v", err)
	}
}

func TestSpoolCorruptFilesSetAside(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		content string
	}{
		{"not json", "x1.json", "garbage"},
		{"truncated", "x2.json", `{"id":"x2","time":"2024-05-01T10:00:00Z","vm":`},
		{"id mismatch", "x3.json", `{"id":"other","time":"2024-05-01T10:00:00Z","vm":1}`},
		{"invalid event", "x4.json", `{"id":"x4","time":"0001-01-01T00:00:00Z","vm":1}`},
		{"trailing data", "x5.json", `{"id":"x5","time":"2024-05-01T10:00:00Z","vm":1} {}`},
		{"negative vm", "x6.json", `{"id":"x6","time":"2024-05-01T10:00:00Z","vm":-3}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sp := openSpool(t)
			if err := sp.Put(sample("good", 1, t0)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(sp.Dir(), tc.file)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			evs, err := sp.Pending()
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Pending error = %v, want *CorruptError", err)
			}
			if len(evs) != 1 || evs[0].ID != "good" {
				t.Fatalf("Pending events = %+v, want only good", evs)
			}
			dst := ce.Moved[path]
			if dst != filepath.Join(sp.Dir(), "bad", tc.file) {
				t.Errorf("moved to %q, want bad/%s", dst, tc.file)
			}
			if b, err := os.ReadFile(dst); err != nil || string(b) != tc.content {
				t.Errorf("bad file content = %q, %v", b, err)
			}
			if _, err := os.Stat(path); !os.IsNotExist(err) {
				t.Errorf("corrupt file still in the spool")
			}
			if strings.ContainsAny(err.Error(), "\n") {
				t.Errorf("error not one line: %q", err)
			}
			// Reported once: the second look finds a clean spool.
			if _, err := sp.Pending(); err != nil {
				t.Errorf("second Pending: %v", err)
			}
			// A second corrupt file of the same name does not overwrite the first.
			if err := os.WriteFile(path, []byte("again"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = sp.Pending()
			if !errors.As(err, &ce) || ce.Moved[path] != dst+".1" {
				t.Errorf("second corrupt file: %v", err)
			}
		})
	}
}

func TestFlush(t *testing.T) {
	unavailable := fmt.Errorf("connect: refused: %w", ErrUnavailable)
	tests := []struct {
		name     string
		fail     func(Event) error
		wantSent int
		wantLeft string
		wantErr  error
		wantGone string // files in DIR/gone/
	}{
		{"all delivered", nil, 3, "", nil, ""},
		{"one event refused, others go on", func(ev Event) error {
			if ev.ID == "b" {
				return errors.New("VM 2 does not exist")
			}
			return nil
		}, 2, "b", nil, ""},
		{"VM gone: set aside, not offered again", func(ev Event) error {
			if ev.ID == "b" {
				return fmt.Errorf("%w: one.vm.info: not found in oned", ErrGone)
			}
			return nil
		}, 2, "", ErrGone, "b.json"},
		{"sink unavailable stops the flush", func(ev Event) error {
			if ev.ID == "b" {
				return unavailable
			}
			return nil
		}, 1, "b,c", ErrUnavailable, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sp := openSpool(t)
			for i, id := range []string{"a", "b", "c"} {
				if err := sp.Put(sample(id, i+1, t0.Add(time.Duration(i)*time.Second))); err != nil {
					t.Fatal(err)
				}
			}
			sink := &fakeSink{fail: tc.fail}
			sent, err := sp.Flush(context.Background(), sink)
			if sent != tc.wantSent {
				t.Errorf("sent = %d, want %d", sent, tc.wantSent)
			}
			if tc.wantSent == 3 && err != nil {
				t.Errorf("Flush error: %v", err)
			}
			if tc.wantSent < 3 && err == nil {
				t.Errorf("Flush error = nil, want the delivery failure")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("Flush error = %v, want %v", err, tc.wantErr)
			}
			if got := strings.Join(pendingIDs(t, sp), ","); got != tc.wantLeft {
				t.Errorf("left in spool = %q, want %q", got, tc.wantLeft)
			}
			var gone []string
			if des, _ := os.ReadDir(filepath.Join(sp.Dir(), goneDir)); des != nil {
				for _, de := range des {
					gone = append(gone, de.Name())
				}
			}
			if got := strings.Join(gone, ","); got != tc.wantGone {
				t.Errorf("set aside in gone/ = %q, want %q", got, tc.wantGone)
			}
			if tc.wantGone != "" {
				// Not offered again: a second flush sends nothing and succeeds.
				before := len(sink.ids())
				if sent, err := sp.Flush(context.Background(), sink); sent != 0 || err != nil || len(sink.ids()) != before {
					t.Errorf("second flush: sent %d, err %v, offered %d more", sent, err, len(sink.ids())-before)
				}
			}
			// Delivery order is by time.
			if got := sink.ids(); !sort.SliceIsSorted(got, func(i, j int) bool { return got[i] < got[j] }) {
				t.Errorf("delivery order %v not by time", got)
			}
		})
	}
}

func TestFlushReportsCorruptAndDeliversTheRest(t *testing.T) {
	sp := openSpool(t)
	if err := sp.Put(sample("a", 1, t0)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sp.Dir(), "zz.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	sink := &fakeSink{}
	sent, err := sp.Flush(context.Background(), sink)
	var ce *CorruptError
	if sent != 1 || !errors.As(err, &ce) {
		t.Fatalf("Flush = %d, %v; want 1 and a *CorruptError", sent, err)
	}
}

func TestFlushLockHonoursContext(t *testing.T) {
	sp := openSpool(t)
	if err := sp.Put(sample("a", 1, t0)); err != nil {
		t.Fatal(err)
	}
	other, err := OpenSpool(sp.Dir()) // another "process"
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := other.lock(context.Background(), lockName)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	sent, err := sp.Flush(ctx, &fakeSink{})
	if sent != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush under a held lock = %d, %v; want 0, deadline exceeded", sent, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Flush waited %v for the lock, want about 150ms", d)
	}
}

func TestFlushStopsWhenContextDone(t *testing.T) {
	sp := openSpool(t)
	for i := 0; i < 5; i++ {
		if err := sp.Put(sample(fmt.Sprintf("e%d", i), 1, t0.Add(time.Duration(i)*time.Second))); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Millisecond)
	defer cancel()
	sent, err := sp.Flush(ctx, &fakeSink{delay: 50 * time.Millisecond})
	if sent >= 5 || err == nil {
		t.Fatalf("Flush = %d, %v; want an early stop", sent, err)
	}
	if left := len(pendingIDs(t, sp)); left != 5-sent {
		t.Errorf("left %d, want %d", left, 5-sent)
	}
}

// Concurrent flushers in one process (separate opens of the lock file, as
// separate processes would have) never deliver an event twice.
func TestFlushConcurrentNoDoubleDelivery(t *testing.T) {
	sp := openSpool(t)
	const n = 40
	for i := 0; i < n; i++ {
		if err := sp.Put(sample(fmt.Sprintf("e%02d", i), 1, t0.Add(time.Duration(i)*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
	}
	sink := &fakeSink{delay: time.Millisecond}
	var wg sync.WaitGroup
	total := make(chan int, 8)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s2, err := OpenSpool(sp.Dir())
			if err != nil {
				t.Error(err)
				return
			}
			sent, err := s2.Flush(context.Background(), sink)
			if err != nil {
				t.Error(err)
			}
			total <- sent
		}()
	}
	wg.Wait()
	close(total)
	sum := 0
	for s := range total {
		sum += s
	}
	if sum != n {
		t.Errorf("sum of sent = %d, want %d", sum, n)
	}
	for id, c := range sink.seen {
		if c != 1 {
			t.Errorf("event %s delivered %d times", id, c)
		}
	}
	if len(sink.seen) != n {
		t.Errorf("delivered %d distinct events, want %d", len(sink.seen), n)
	}
}

// helperEnv makes the test binary act as a flushing process.
const helperEnv = "RBDFENCE_EVENTS_FLUSH_HELPER"

// fileSink appends each delivered ID to a file (O_APPEND, one write per line).
type fileSink struct{ path string }

func (f fileSink) RecordEvent(ctx context.Context, ev Event) error {
	time.Sleep(2 * time.Millisecond)
	fh, err := os.OpenFile(f.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer fh.Close()
	_, err = fh.WriteString(ev.ID + "\n")
	return err
}

// TestMain turns the test binary into a flushing helper process when
// helperEnv is set (TestFlushTwoProcesses runs it that way).
func TestMain(m *testing.M) {
	if v := os.Getenv(helperEnv); v != "" {
		flushHelper(v)
	}
	os.Exit(m.Run())
}

func flushHelper(v string) {
	dir, out, _ := strings.Cut(v, "|")
	sp, err := OpenSpool(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if _, err := sp.Flush(context.Background(), fileSink{out}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	os.Exit(0)
}

// Two (here: four) processes flushing the same spool deliver every event
// exactly once.
func TestFlushTwoProcesses(t *testing.T) {
	sp := openSpool(t)
	const n = 30
	for i := 0; i < n; i++ {
		if err := sp.Put(sample(fmt.Sprintf("p%02d", i), 1, t0.Add(time.Duration(i)*time.Millisecond))); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "delivered")
	var cmds []*exec.Cmd
	for i := 0; i < 4; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+sp.Dir()+"|"+out)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper: %v", err)
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	count := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		count[sc.Text()]++
	}
	if len(count) != n {
		t.Errorf("delivered %d distinct events, want %d", len(count), n)
	}
	for id, c := range count {
		if c != 1 {
			t.Errorf("event %s delivered %d times", id, c)
		}
	}
	if left := pendingIDs(t, sp); len(left) != 0 {
		t.Errorf("left in spool: %v", left)
	}
}
