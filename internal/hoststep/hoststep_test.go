package hoststep

import (
	"strings"
	"testing"
)

func TestReadRequest(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{in: `{"op":"start","vm":42,"seq":3,"host":"node1","run":"r","source":"frontend","disks":[{"id":"0","pool":"one","name":"one-7"}]}`},
		{in: ``, err: "empty"},
		{in: `{"op":"start","vm":42}`, err: "no host"},
		{in: `{"op":"explode","vm":1,"host":"a"}`, err: "unknown op"},
		{in: `{"op":"start","vm":-3,"host":"a"}`, err: "bad VM id"},
		{in: `{"op":"premigrate","vm":1,"host":"a"}`, err: "src and dst"},
		{in: `{"op":"start","vm":1,"host":"a","disks":[{"id":"0","pool":"","name":"x"}]}`, err: "no pool"},
		{in: `{"op":"start","vm":1,"host":"a","extra":1}`, err: "unknown field"},
		{in: `{"op":"start","vm":1,"host":"a"} trailing`, err: "trailing data"},
	} {
		_, err := ReadRequest(strings.NewReader(tc.in))
		if tc.err == "" && err != nil {
			t.Errorf("%s: %v", tc.in, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: want %q, got %v", tc.in, tc.err, err)
		}
	}
}

func TestReadResponse(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{in: `{"ok":true,"op":"start"}`},
		{in: `{"ok":false,"op":"start","kind":"ceph","error":"timed out"}`},
		{in: `null`, err: "neither ok nor an error"},
		{in: `{}`, err: "neither ok nor an error"},
		{in: `[1]`, err: "not valid JSON"},
	} {
		_, err := ReadResponse(strings.NewReader(tc.in))
		if (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: want %q, got %v", tc.in, tc.err, err)
		}
	}
}
