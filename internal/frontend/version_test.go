package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
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
	// The version 1 answers, as to a check (a start is refused on such a
	// host: TestHostStepOldHostStart).
	td := t.TempDir()
	for _, f := range []string{"v1-response-start.json", "v1-response-refused.json", "v1-response-unknown-field.json"} {
		b, err := os.ReadFile(filepath.Join("../hoststep/testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.ReplaceAll(string(b), `"op":"start"`, `"op":"check"`))
		if err := os.WriteFile(filepath.Join(td, strings.Replace(f, "-start", "-check", 1)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("TESTDATA", td)
	req := &hoststep.Request{Op: hoststep.OpCheck, VM: 42, Seq: 3, Host: "node1", Run: "r", Source: "frontend",
		Disks: []vmdisk.Disk{{ID: "0", Pool: "one", Name: "one-7-42-0"}}, Instance: 1700000123}
	for _, tc := range []struct {
		answer string
		kind   outcome.Kind
	}{{"check", outcome.OK}, {"refused", outcome.Refused}} {
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
	if err := os.WriteFile(filepath.Join(s.dir, "resp-start.json"), []byte(`{"version":4,"ok":true,"op":"start","report":{"images":[],"fenced":0,"errors":0,"new":1},"new_field":"x","versions":`+currentVersions+`}`), 0o644); err != nil {
		t.Fatal(err)
	}
	req := &hoststep.Request{Op: hoststep.OpStart, VM: 42, Seq: 3, Host: "node1", Run: "r", Source: "frontend"}
	resp, err := s.env.hostStep(t.Context(), "node1", req, onHost)
	if err != nil || !resp.OK || resp.Version != 4 {
		t.Fatalf("%+v %v", resp, err)
	}
	if n := strings.Count(strings.TrimSpace(s.read("requests")), "\n") + 1; n != 1 {
		t.Fatalf("%d requests", n)
	}
}

// TestHostStepOldHostStart: a start is refused (exit 3, final, the fix)
// on a host whose host step is older than the claim format: one that
// rejects the claim format flag (0300e58's) and one that answers without
// versions (a version 1 host ignores the flag here: the stand-in).
func TestHostStepOldHostStart(t *testing.T) {
	req := &hoststep.Request{Op: hoststep.OpStart, VM: 42, Seq: 3, Host: "node1", Run: "r", Source: "frontend"}
	for _, tc := range []struct {
		name, answer string
		code         int
	}{
		{"rejects the flag", `{"ok":false,"kind":"usage","error":"host: flag provided but not defined: -min-claim-format (try: rbdfence help)"}`, 2},
		{"no versions", `{"version":3,"ok":true,"op":"start"}`, 0},
	} {
		s := newStub(t, "premigrate", false)
		if err := os.WriteFile(filepath.Join(s.dir, "resp-start.json"), []byte(tc.answer), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.dir, "code-start"), []byte(fmt.Sprint(tc.code)), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := s.env.hostStep(t.Context(), "node1", req, onHost)
		var fe *Error
		if !errors.As(err, &fe) || fe.Kind != outcome.Unavailable || !fe.Final || !strings.HasPrefix(fe.Msg, "rbdfence: refused, nothing fenced: node1's rbdfence is too old; upgrade, onehost sync | start: host node1's rbdfence host step reports no versions") ||
			!strings.Contains(fe.Msg, "fix: upgrade the rbdfence and rbdfence-host packages on node1") {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !strings.Contains(s.read("ssh-argv"), "--min-claim-format") {
			t.Errorf("%s: the start did not pass the claim format: %s", tc.name, s.read("ssh-argv"))
		}
	}
}
