package events

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

func sample(id string, vm int, at time.Time) Event {
	return Event{
		ID: id, Time: at, VM: vm, Host: "node2", Image: "one/one-7",
		Client: "client.4235", Address: "10.0.0.5:0/3456789", Cookie: "auto 94823",
		Action: "blocklist", Expire: at.Add(7 * 24 * time.Hour), Source: "prestart",
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mod     func(*Event)
		wantErr string
	}{
		{"ok", func(*Event) {}, ""},
		{"ok generated id", func(e *Event) { e.ID = newID() }, ""},
		{"empty id", func(e *Event) { e.ID = "" }, "event id"},
		{"slash in id", func(e *Event) { e.ID = "a/b" }, "event id"},
		{"dot id", func(e *Event) { e.ID = ".hidden" }, "event id"},
		{"dotdot id", func(e *Event) { e.ID = ".." }, "event id"},
		{"long id", func(e *Event) { e.ID = strings.Repeat("a", 129) }, "event id"},
		{"negative vm", func(e *Event) { e.VM = -1 }, "negative"},
		{"zero time", func(e *Event) { e.Time = time.Time{} }, "time is not set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := sample("ev1", 42, t0)
			tc.mod(&ev)
			err := ev.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSummary(t *testing.T) {
	tests := []struct {
		name string
		ev   Event
		want string
	}{
		{
			name: "full",
			ev:   sample("ev1", 42, t0),
			want: `2024-05-01T10:00:00Z vm 42 host node2: blocklist client.4235 10.0.0.5:0/3456789 on one/one-7 (cookie 'auto 94823', expires 2024-05-08T10:00:00Z, by prestart)`,
		},
		{
			name: "watcher without lock, no expiry",
			ev:   Event{ID: "x", Time: t0, VM: 7, Image: "one/one-sys-7-1", Client: "client.9", Address: "10.0.0.6:0/1", Action: "report"},
			want: "2024-05-01T10:00:00Z vm 7: report client.9 10.0.0.6:0/1 on one/one-sys-7-1",
		},
		{
			name: "control characters flattened",
			ev:   Event{ID: "x", Time: t0.In(time.FixedZone("X", 3600)), VM: 1, Host: "evil\nhost", Action: "block\r\nlist"},
			want: "2024-05-01T10:00:00Z vm 1 host evil host: block  list",
		},
		{
			name: "no action",
			ev:   Event{ID: "x", Time: t0, VM: 3},
			want: "2024-05-01T10:00:00Z vm 3: collision",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.ev.Summary()
			if got != tc.want {
				t.Errorf("Summary() =\n %s\nwant\n %s", got, tc.want)
			}
			if strings.ContainsAny(got, "\r\n") {
				t.Errorf("Summary() is not one line: %q", got)
			}
		})
	}
}

func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := newID()
		if len(id) != 32 || !idRE().MatchString(id) {
			t.Fatalf("newID() = %q: want 32 hex digits", id)
		}
		if seen[id] {
			t.Fatalf("newID() repeated %q", id)
		}
		seen[id] = true
	}
}

// The JSON form is the spool format: its field names must not change.
func TestEventJSONStable(t *testing.T) {
	tests := []struct {
		name string
		ev   Event
		want string
	}{
		{
			name: "full",
			ev:   sample("ev1", 42, t0),
			want: `{"id":"ev1","time":"2024-05-01T10:00:00Z","vm":42,"host":"node2","image":"one/one-7","client":"client.4235","address":"10.0.0.5:0/3456789","cookie":"auto 94823","action":"blocklist","expire":"2024-05-08T10:00:00Z","source":"prestart"}`,
		},
		{
			name: "optional fields omitted",
			ev:   Event{ID: "ev2", Time: t0, VM: 0},
			want: `{"id":"ev2","time":"2024-05-01T10:00:00Z","vm":0,"host":"","image":"","client":"","address":"","cookie":"","action":""}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Errorf("json =\n %s\nwant\n %s", b, tc.want)
			}
			var back Event
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if !back.Time.Equal(tc.ev.Time) || !back.Expire.Equal(tc.ev.Expire) || back.ID != tc.ev.ID || back.Cookie != tc.ev.Cookie {
				t.Errorf("round trip: got %+v want %+v", back, tc.ev)
			}
		})
	}
}

func TestOneLine(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{" padded ", "padded"},
		{"a\nb", "a b"},
		{"a\x00b\tc", "a b c"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := OneLine(tc.in); got != tc.want {
			t.Errorf("OneLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
