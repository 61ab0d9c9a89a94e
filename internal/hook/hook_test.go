package hook

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		args    []string
		want    Invocation
		wantErr string
	}{
		{args: []string{"one-42", "prepare", "begin", "-"}, want: Invocation{"one-42", "prepare", "begin", "-"}},
		{args: []string{"-odd name", "stopped", "end", "-"}, want: Invocation{"-odd name", "stopped", "end", "-"}},
		{args: []string{"one-42", "prepare", "begin"}, wantErr: "want 4 arguments"},
		{args: []string{"one-42", "prepare", "begin", "-", "x"}, wantErr: "want 4 arguments"},
		{args: nil, wantErr: "got 0"},
		{args: []string{"", "prepare", "begin", "-"}, wantErr: "empty domain"},
		{args: []string{"one-1", "", "begin", "-"}, wantErr: "empty domain"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			got, err := ParseArgs(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseArgs(%q) = %v, want error containing %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseArgs(%q) = %+v, %v; want %+v", tt.args, got, err, tt.want)
			}
		})
	}
}

func TestDispatch(t *testing.T) {
	tests := []struct {
		op, sub string
		want    Action
	}{
		{"prepare", "begin", ActFence},
		{"migrate", "begin", ActMarkMigration},
		{"release", "end", ActClearMark},
		{"stopped", "end", ActClearMark},
		{"started", "begin", ActRecord},
		// Everything else exits at once without touching Ceph.
		{"start", "begin", ActNone},
		{"restore", "begin", ActNone},
		{"reconnect", "begin", ActNone},
		{"attach", "begin", ActNone},
		{"prepare", "end", ActNone},
		{"release", "begin", ActNone},
		{"stopped", "begin", ActNone},
		{"migrate", "end", ActNone},
		{"started", "end", ActNone},
		{"PREPARE", "begin", ActNone},
		{"something-new", "-", ActNone},
	}
	for _, tt := range tests {
		t.Run(tt.op+"_"+tt.sub, func(t *testing.T) {
			if got := Dispatch(Invocation{Domain: "one-1", Op: tt.op, SubOp: tt.sub, Extra: "-"}); got != tt.want {
				t.Fatalf("Dispatch(%s %s) = %s, want %s", tt.op, tt.sub, got, tt.want)
			}
		})
	}
}

func TestMarks(t *testing.T) {
	t0 := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		set       bool          // write a mark at t0 first
		checkAt   time.Duration // check at t0 + checkAt
		clear     bool          // clear before checking
		wantFresh bool
		wantGone  bool // the file is removed by the check (or clear)
	}{
		{name: "no mark", wantGone: true},
		{name: "fresh", set: true, checkAt: time.Minute, wantFresh: true},
		{name: "just before the window ends", set: true, checkAt: 30*time.Minute - time.Second, wantFresh: true},
		{name: "expired at the window", set: true, checkAt: 30 * time.Minute, wantGone: true},
		{name: "expired long ago", set: true, checkAt: 48 * time.Hour, wantGone: true},
		{name: "small clock step back", set: true, checkAt: -30 * time.Second, wantFresh: true},
		{name: "mark far in the future", set: true, checkAt: -2 * time.Hour, wantGone: true},
		{name: "cleared", set: true, checkAt: time.Second, clear: true, wantGone: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state", MarkDir)
			now := t0
			m := Marks{Dir: dir, Window: 30 * time.Minute, Now: func() time.Time { return now }}
			if tt.set {
				if err := m.Set("one-42", "run1", nil); err != nil {
					t.Fatal(err)
				}
				st, err := os.Stat(m.Path("one-42"))
				if err != nil || st.Mode().Perm() != 0o600 {
					t.Fatalf("mark file: %v, mode %v; want 0600", err, st.Mode())
				}
				dst, err := os.Stat(dir)
				if err != nil || dst.Mode().Perm() != 0o700 {
					t.Fatalf("mark dir: %v, mode %v; want 0700", err, dst.Mode())
				}
			}
			if tt.clear {
				if err := m.Clear("one-42"); err != nil {
					t.Fatal(err)
				}
			}
			now = t0.Add(tt.checkAt)
			fresh, mk, err := m.Fresh("one-42")
			if err != nil || fresh != tt.wantFresh {
				t.Fatalf("Fresh = %v, %+v, %v; want fresh %v", fresh, mk, err, tt.wantFresh)
			}
			if fresh && (mk.Domain != "one-42" || !mk.Time.Equal(t0) || mk.Run != "run1") {
				t.Fatalf("mark content %+v", mk)
			}
			_, err = os.Stat(m.Path("one-42"))
			if gone := errors.Is(err, os.ErrNotExist); gone != tt.wantGone {
				t.Fatalf("mark file gone = %v (%v), want %v", gone, err, tt.wantGone)
			}
			// Clearing is idempotent.
			if err := m.Clear("one-42"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestMarkPerDomainAndGarbage(t *testing.T) {
	m := Marks{Dir: t.TempDir(), Window: time.Hour}
	if err := m.Set("one-1", "r", nil); err != nil {
		t.Fatal(err)
	}
	if fresh, _, _ := m.Fresh("one-2"); fresh {
		t.Fatal("a mark of one-1 must not cover one-2")
	}
	if fresh, _, _ := m.Fresh("one-1"); !fresh {
		t.Fatal("one-1 is marked")
	}
	// A corrupt mark never keeps a fence away, and is removed.
	if err := os.WriteFile(m.Path("one-3"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if fresh, _, err := m.Fresh("one-3"); fresh || err != nil {
		t.Fatalf("corrupt mark: fresh %v, %v", fresh, err)
	}
	if _, err := os.Stat(m.Path("one-3")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("corrupt mark not removed")
	}
	// A mark copied under another domain's name does not count.
	b, _ := os.ReadFile(m.Path("one-1"))
	if err := os.WriteFile(m.Path("one-4"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if fresh, _, _ := m.Fresh("one-4"); fresh {
		t.Fatal("a mark naming another domain must not count")
	}
}

func TestMarkPath(t *testing.T) {
	m := Marks{Dir: "/var/lib/rbdfence/migrating"}
	tests := []struct{ domain, want string }{
		{"one-42", "/var/lib/rbdfence/migrating/one-42"},
		{"web_01.example", "/var/lib/rbdfence/migrating/web_01.example"},
		{"../../etc/passwd", "/var/lib/rbdfence/migrating/x-2e2e2f2e2e2f6574632f706173737764"},
		{".hidden", "/var/lib/rbdfence/migrating/x-2e68696464656e"},
		{"a b", "/var/lib/rbdfence/migrating/x-612062"},
		{"-x", "/var/lib/rbdfence/migrating/x-2d78"},
	}
	for _, tt := range tests {
		if got := m.Path(tt.domain); got != tt.want {
			t.Errorf("Path(%q) = %q, want %q", tt.domain, got, tt.want)
		}
	}
}

// slowReader returns data and then blocks forever (a terminal on stdin).
type slowReader struct{ data []byte }

func (r *slowReader) Read(p []byte) (int, error) {
	if len(r.data) > 0 {
		n := copy(p, r.data)
		r.data = r.data[n:]
		return n, nil
	}
	select {}
}

func TestReadInput(t *testing.T) {
	tests := []struct {
		name    string
		r       io.Reader
		max     int64
		want    string
		wantErr string
	}{
		{name: "whole", r: strings.NewReader("<domain/>"), max: 100, want: "<domain/>"},
		{name: "exactly max", r: strings.NewReader("12345"), max: 5, want: "12345"},
		{name: "too large", r: strings.NewReader("123456"), max: 5, wantErr: "larger than 5 bytes"},
		{name: "never ends", r: &slowReader{data: []byte("<dom")}, max: 100, wantErr: "no end of input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			b, err := ReadInput(tt.r, tt.max, 200*time.Millisecond)
			if time.Since(start) > 2*time.Second {
				t.Fatalf("ReadInput took %s", time.Since(start))
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(b) != tt.want {
				t.Fatalf("got %q, %v", b, err)
			}
		})
	}
}

func TestDrainBounded(t *testing.T) {
	start := time.Now()
	Drain(&slowReader{data: []byte("x")}, 100*time.Millisecond)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Drain of a never-ending input took %s", d)
	}
	r := bytes.NewReader(make([]byte, 1<<20))
	Drain(r, time.Second)
	if r.Len() != 0 {
		t.Fatalf("Drain left %d bytes", r.Len())
	}
}
