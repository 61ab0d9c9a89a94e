package hoststep

import (
	"bytes"
	"strings"
	"testing"
)

func FuzzReadRequest(f *testing.F) {
	f.Add([]byte(`{"op":"start","vm":42,"seq":3,"host":"node1","run":"r","source":"frontend","disks":[{"id":"0","pool":"one","name":"one-7"}]}`))
	f.Add([]byte(`{"op":"postmigrate","vm":1,"seq":-1,"host":"a","src":"a","dst":"b","run":"r","source":"frontend","disks":[]}`))
	f.Add([]byte(`{not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := ReadRequest(bytes.NewReader(b))
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("multi-line error %q", err)
			}
			return
		}
		if req.Validate() != nil {
			t.Fatal("ReadRequest returned an invalid request")
		}
	})
}

func FuzzReadResponse(f *testing.F) {
	f.Add([]byte(`{"ok":true,"op":"start","report":{"dry_run":false,"images":[],"fenced":0,"errors":0}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ReadResponse(bytes.NewReader(b))
	})
}
