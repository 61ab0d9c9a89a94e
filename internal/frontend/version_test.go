package frontend

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// oldHost stands in for a host whose rbdfence missed `onehost sync`: it
// answers with the JSON a version 1 host writes (hoststep/testdata), and,
// like a version 1 host, rejects a request with a field it does not know
// (those added since version 1 that the front-end sends).
const oldHost = `#!/bin/sh
req=$(cat)
echo "$req" >> "$STUB_DIR/requests"
case "$req" in
*'"version"'*|*'"instance"'*) cat "$TESTDATA/v1-response-unknown-field.json"; exit 2 ;;
esac
cat "$TESTDATA/v1-response-$ANSWER.json"
`

func TestHostStepOldHost(t *testing.T) {
	td, err := filepath.Abs("../hoststep/testdata")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TESTDATA", td)
	req := &hoststep.Request{Op: hoststep.OpStart, VM: 42, Seq: 3, Host: "node1", Run: "r", Source: "frontend",
		Disks: []vmdisk.Disk{{ID: "0", Pool: "one", Name: "one-7-42-0"}}, Instance: 1700000123}
	for _, tc := range []struct {
		answer string
		kind   outcome.Kind
	}{{"start", outcome.OK}, {"refused", outcome.Refused}} {
		s := newStub(t, "premigrate", false)
		if err := os.WriteFile(s.env.Cfg.OpenNebula.HostBinary, []byte(oldHost), 0o755); err != nil {
			t.Fatal(err)
		}
		t.Setenv("ANSWER", tc.answer)
		resp, err := s.env.hostStep(t.Context(), "node1", req, onHost)
		if err != nil || resp.OK != (tc.kind == outcome.OK) || resp.Kind != tc.kind {
			t.Fatalf("%s: %+v %v\nstderr:\n%s", tc.answer, resp, err, s.errb.String())
		}
		reqs := strings.Split(strings.TrimSpace(s.read("requests")), "\n")
		if len(reqs) != 2 {
			t.Fatalf("%s: %d requests, want the versioned one and the version 1 one: %q", tc.answer, len(reqs), reqs)
		}
		for i, want := range []int{hoststep.Version, 0} {
			var got hoststep.Request
			if err := json.Unmarshal([]byte(reqs[i]), &got); err != nil || got.Version != want || got.Op != req.Op || got.VM != 42 {
				t.Errorf("%s: request %d %s: version %d, want %d (%v)", tc.answer, i, reqs[i], got.Version, want, err)
			}
		}
		if !strings.Contains(s.errb.String(), "protocol version 1") || !strings.Contains(s.errb.String(), "onehost sync --force") {
			t.Errorf("%s: the log does not name the old host's version and the fix:\n%s", tc.answer, s.errb.String())
		}
	}
}

// TestHostStepNewHost: a host that speaks the current version answers the
// first request; unknown fields in its answer are ignored.
func TestHostStepNewHost(t *testing.T) {
	s := newStub(t, "premigrate", false)
	s.respond(t, "start", nil, 0)
	if err := os.WriteFile(filepath.Join(s.dir, "resp-start.json"), []byte(`{"version":3,"ok":true,"op":"start","report":{"images":[],"fenced":0,"errors":0,"new":1},"new_field":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	req := &hoststep.Request{Op: hoststep.OpStart, VM: 42, Seq: 3, Host: "node1", Run: "r", Source: "frontend"}
	resp, err := s.env.hostStep(t.Context(), "node1", req, onHost)
	if err != nil || !resp.OK || resp.Version != 3 {
		t.Fatalf("%+v %v", resp, err)
	}
	if n := strings.Count(strings.TrimSpace(s.read("requests")), "\n") + 1; n != 1 {
		t.Fatalf("%d requests", n)
	}
}
