package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/hoststep"
)

// TestHostAnswersInPeerVersion: `rbdfence host` reads a version 1
// front-end's request (hoststep/testdata) and answers with JSON that front-end
// accepts (no field it does not know); a current front-end gets the version.
// The requests name no disk, so no Ceph is needed.
func TestHostAnswersInPeerVersion(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rbdfence.yaml")
	if err := os.WriteFile(cfg, []byte("spool_dir: "+dir+"/spool\naudit_log: "+dir+"/audit.log\nopennebula:\n  auth_file: "+dir+"/none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../internal/hoststep/testdata/v1-request-postmigrate.json")
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m["disks"] = []any{}
	v1, _ := json.Marshal(m)
	m["version"], m["op"] = hoststep.Version+1, "scrub"
	future, _ := json.Marshal(m)
	m["version"], m["op"], m["hint"] = 2, "postmigrate", "a field this host does not know"
	v2, _ := json.Marshal(m)
	for _, tc := range []struct {
		name, in    string
		wantVersion bool
		wantErr     string
	}{
		{"version 1 front-end", string(v1), false, ""},
		{"version 2 front-end", string(v2), true, ""},
		{"newer front-end, unknown op", string(future), true, fmt.Sprintf("the front-end speaks version %d, this host's rbdfence speaks version %d", hoststep.Version+1, hoststep.Version)},
		{"unreadable request", "{", false, "not valid JSON"},
	} {
		var out, errb bytes.Buffer
		err := runHost(t.Context(), []string{"--config", cfg}, strings.NewReader(tc.in), &out, &errb)
		if (tc.wantErr == "") != (err == nil) {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(out.Bytes(), &raw); err != nil {
			t.Fatalf("%s: %q: %v", tc.name, out.String(), err)
		}
		if _, has := raw["version"]; has != tc.wantVersion {
			t.Fatalf("%s: answer %s: version field present %v, want %v", tc.name, out.String(), has, tc.wantVersion)
		}
		resp, rerr := hoststep.ReadResponse(&out)
		if rerr != nil || (tc.wantErr == "") != resp.OK || !strings.Contains(resp.Error, tc.wantErr) || strings.Contains(resp.Error, "\n") {
			t.Fatalf("%s: %+v %v", tc.name, resp, rerr)
		}
		if tc.wantErr != "" && exitCode(err, &errb) != 2 {
			t.Fatalf("%s: exit %d", tc.name, exitCode(err, &errb))
		}
	}
}
