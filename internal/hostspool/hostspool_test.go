package hostspool

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/events"
)

var t0 = time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

func TestReadAck(t *testing.T) {
	many := make([]string, MaxEvents+1)
	for i := range many {
		many[i] = "e"
	}
	tooMany, _ := json.Marshal(Ack{IDs: many})
	for _, tc := range []struct {
		name string
		in   string
		ids  string
		err  string
	}{
		{"ids", `{"version":1,"ids":["a","b-1.x"]}`, "a b-1.x", ""},
		{"no version is version 1", `{"ids":["a"]}`, "a", ""},
		{"newer peer, unknown field ignored", `{"version":7,"ids":["a"],"later":true}`, "a", ""},
		{"no ids", `{"version":1,"ids":[]}`, "", ""},
		{"path", `{"ids":["../../etc/passwd"]}`, "", "event id"},
		{"slash", `{"ids":["a/b"]}`, "", "event id"},
		{"leading dot", `{"ids":[".lock"]}`, "", "event id"},
		{"empty id", `{"ids":[""]}`, "", "event id"},
		{"not a string", `{"ids":[1]}`, "", "not valid JSON"},
		{"too many", string(tooMany), "", "at most"},
		{"empty", "", "", "empty"},
		{"not JSON", "{ids", "", "not valid JSON"},
		{"two objects", `{"ids":[]} {"ids":[]}`, "", "trailing data"},
		{"too large", `{"ids":["` + strings.Repeat("a", MaxSize) + `"]}`, "", "larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ReadAck(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("multi-line error %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(a.IDs, " "); got != tc.ids {
				t.Fatalf("ids %q, want %q", got, tc.ids)
			}
		})
	}
}

func TestReadList(t *testing.T) {
	ev := `{"id":"a1","time":"2024-05-01T10:00:00Z","vm":42,"host":"n1","image":"one/one-7","client":"client.4","address":"10.0.0.5:0/1","cookie":"","action":"blocklist"}`
	for _, tc := range []struct {
		name string
		in   string
		n    int
		more bool
		err  string
	}{
		{"events", `{"version":1,"ok":true,"events":[` + ev + `],"more":true}`, 1, true, ""},
		{"none", `{"version":1,"ok":true,"events":[]}`, 0, false, ""},
		{"corrupt reported", `{"version":1,"ok":true,"events":[],"corrupt":[{"file":"/s/x.json","moved_to":"/s/bad/x.json","error":"decode"}]}`, 0, false, ""},
		{"host error", `{"version":1,"ok":false,"error":"spool: permission denied"}`, 0, false, "permission denied"},
		{"host error on many lines", `{"ok":false,"error":"a\nb"}`, 0, false, "a b"},
		{"neither", `{"version":1,"ok":false}`, 0, false, "neither ok nor an error"},
		{"bad event id", `{"ok":true,"events":[{"id":"../x","time":"2024-05-01T10:00:00Z","vm":1}]}`, 0, false, "event id"},
		{"negative vm", `{"ok":true,"events":[{"id":"x","time":"2024-05-01T10:00:00Z","vm":-1}]}`, 0, false, "negative"},
		{"no time", `{"ok":true,"events":[{"id":"x","vm":1}]}`, 0, false, "time"},
		{"not JSON", `ssh: connect to host`, 0, false, "not valid JSON"},
		{"empty", ``, 0, false, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := ReadList(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("multi-line error %q", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Events) != tc.n || l.More != tc.more {
				t.Fatalf("%d events more %v", len(l.Events), l.More)
			}
		})
	}
}

func TestReadAckResult(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		removed int
		err     string
	}{
		{"ok", `{"version":1,"ok":true,"removed":2,"missing":["x"]}`, 2, ""},
		{"failed", `{"version":1,"ok":false,"error":"spool lock: timeout"}`, 0, "spool lock"},
		{"neither", `{"ok":false}`, 0, "neither"},
		{"negative", `{"ok":true,"removed":-1}`, 0, "removed -1"},
		{"garbage", `]`, 0, "not valid JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ReadAckResult(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || a.Removed != tc.removed {
				t.Fatalf("%+v %v", a, err)
			}
		})
	}
}

// The host side round trip: list what is spooled (a corrupt file set
// aside and named), ack it, and the spool is empty.
func TestListAckSpool(t *testing.T) {
	sp, err := events.OpenSpool(filepath.Join(t.TempDir(), "spool"))
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"a", "b", "d"} {
		if err := sp.Put(events.Event{ID: id, VM: 1, Time: t0.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(sp.Dir(), "c.json"), []byte("nope"), 0o600); err != nil {
		t.Fatal(err)
	}
	l := ListSpool(context.Background(), sp)
	b, _ := json.Marshal(l)
	got, err := ReadList(strings.NewReader(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != 3 || len(got.Corrupt) != 1 || !strings.HasSuffix(got.Corrupt[0].MovedTo, "bad/c.json") {
		t.Fatalf("list %s", b)
	}
	a, err := ReadAck(strings.NewReader(`{"version":1,"ids":["a","b","gone"],"gone":["d"]}`))
	if err != nil {
		t.Fatal(err)
	}
	r := AckSpool(context.Background(), sp, a)
	if !r.OK || r.Removed != 2 || len(r.Missing) != 1 || len(r.SetAside) != 1 || !strings.HasSuffix(r.SetAside[0], "gone/d.json") {
		t.Fatalf("ack %+v", r)
	}
	if evs, err := sp.Pending(); err != nil || len(evs) != 0 {
		t.Fatalf("pending %v %v", evs, err)
	}
	if _, err := os.Stat(r.SetAside[0]); err != nil {
		t.Fatalf("the gone event is not kept: %v", err)
	}
	if _, err := ReadAck(strings.NewReader(`{"version":1,"ids":[],"gone":["../x"]}`)); err == nil {
		t.Fatal("a gone id that is a path was accepted")
	}
}

// A spool the collector cannot read (root's, from before the hook gave
// its files away) is reported with the fix.
func TestListUnreadableSpool(t *testing.T) {
	sp, err := events.OpenSpool(filepath.Join(t.TempDir(), "spool"))
	if err != nil {
		t.Fatal(err)
	}
	if err := sp.Put(events.Event{ID: "a", VM: 1, Time: t0}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(sp.Dir(), "a.json"), 0); err != nil {
		t.Fatal(err)
	}
	l := ListSpool(context.Background(), sp)
	if os.Geteuid() == 0 { // root reads it anyway: listed
		if !l.OK || len(l.Events) != 1 {
			t.Fatalf("root: %+v", l)
		}
		return
	}
	if l.OK || !strings.Contains(l.Error, "chown -R oneadmin: "+sp.Dir()) {
		t.Fatalf("%+v", l)
	}
}
