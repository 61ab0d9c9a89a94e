package hostspool

import (
	"bytes"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/events"
)

// FuzzReadAck: the ack request reaches the host binary (run by oneadmin
// over ssh, or by root) from outside; only event ids may come out of it.
func FuzzReadAck(f *testing.F) {
	f.Add([]byte(`{"version":1,"ids":["a","b"]}`))
	f.Add([]byte(`{"ids":["../x"]}`))
	f.Add([]byte(`{not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ReadAck(bytes.NewReader(b))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if len(a.IDs) > MaxEvents {
			t.Fatalf("%d ids", len(a.IDs))
		}
		for _, id := range a.IDs {
			if events.ValidID(id) != nil || strings.ContainsAny(id, "/\x00") {
				t.Fatalf("ReadAck let %q through", id)
			}
		}
	})
}

// FuzzReadList: a host's answer reaches the front-end from outside.
func FuzzReadList(f *testing.F) {
	f.Add([]byte(`{"version":1,"ok":true,"events":[{"id":"a","time":"2024-05-01T10:00:00Z","vm":1}],"more":true}`))
	f.Add([]byte(`{"ok":false,"error":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ReadList(bytes.NewReader(b))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		for _, ev := range l.Events {
			if ev.Validate() != nil {
				t.Fatal("ReadList returned an invalid event")
			}
		}
	})
}
