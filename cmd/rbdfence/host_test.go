package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/hostversions"
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

// TestHostVersionGate: every answer carries what runs on the host; a start
// is refused before anything is fenced (exit 3, one line with the fix) when
// the hook beside this host step reads an older claim format, here the
// answer of 0300e58's hook; the step "versions" answers without Ceph.
func TestHostVersionGate(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rbdfence.yaml")
	if err := os.WriteFile(cfg, []byte("spool_dir: "+dir+"/spool\naudit_log: "+dir+"/audit.log\nstate_dir: "+dir+"/state\nopennebula:\n  auth_file: "+dir+"/none\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	saved := hostRoot
	t.Cleanup(func() { hostRoot = saved })
	hostRoot = filepath.Join(dir, "root")
	hookBin := filepath.Join(hostRoot, "usr/lib/rbdfence/bin/rbdfence-hook")
	hook := func(line string) {
		for p, body := range map[string]string{
			filepath.Join(hostRoot, hostversions.Wrapper): "#!/bin/sh\nexec /usr/lib/rbdfence/bin/rbdfence-hook \"$@\"\n",
			hookBin: "#!/bin/sh\necho '" + line + "' >&2\n",
		} {
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.Remove(p) // a new file: the cached answer is not this one's
			if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	ask := func(req string, args ...string) (*hoststep.Response, error) {
		var out, errb bytes.Buffer
		err := runHost(t.Context(), append([]string{"--config", cfg}, args...), strings.NewReader(req), &out, &errb)
		resp, rerr := hoststep.ReadResponse(&out)
		if rerr != nil {
			t.Fatalf("%s: %v", req, rerr)
		}
		return resp, err
	}
	start := fmt.Sprintf(`{"version":%d,"op":"start","vm":42,"seq":1,"host":"h1","run":"r","source":"frontend","disks":[]}`, hoststep.Version)

	hook("rbdfence-hook 0300e58") // what 0300e58's hook prints
	resp, err := ask(start, "--"+hoststep.ClaimFormatFlag, "2")
	if err == nil || resp.OK || exitCode(err, io.Discard) != 3 || resp.Versions == nil || resp.Versions.Hook == nil || resp.Versions.Hook.Version != "0300e58" ||
		!strings.Contains(resp.Error, "its libvirt hook "+hookBin+" (0300e58) reads claim format 1, older than claim format 2") ||
		!strings.Contains(resp.Error, "fix: upgrade the rbdfence and rbdfence-host packages on h1") || strings.Contains(resp.Error, "\n") {
		t.Fatalf("old hook: %+v %v", resp, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "audit.log")); err == nil {
		t.Fatal("the refused start wrote the audit log")
	}
	// A front-end that needs a newer format than this step writes.
	hook(hoststep.HookVersionLine("new"))
	resp, _ = ask(start, "--"+hoststep.ClaimFormatFlag, fmt.Sprint(engine.ClaimFormat+1))
	if resp.OK || !strings.Contains(resp.Error, "its host step") {
		t.Fatalf("newer front-end: %+v", resp)
	}
	resp, err = ask(start, "--"+hoststep.ClaimFormatFlag, fmt.Sprint(engine.ClaimFormat))
	if err != nil || !resp.OK || resp.Versions.Step.ClaimFormat != engine.ClaimFormat || resp.Versions.Hook.ClaimFormat != engine.ClaimFormat {
		t.Fatalf("current hook: %+v %v", resp, err)
	}
	resp, err = ask(fmt.Sprintf(`{"version":%d,"op":"versions","vm":0,"host":"h1"}`, hoststep.Version))
	if err != nil || !resp.OK || resp.Versions == nil || resp.Versions.Platform == nil || resp.Versions.Platform.Glibc == "" || resp.Versions.Hook.Path != hookBin {
		t.Fatalf("versions: %+v %v", resp, err)
	}
	// What a start or a migration asks: the step and the hook, no package
	// or platform queries.
	resp, err = ask(fmt.Sprintf(`{"version":%d,"op":"versions","vm":0,"host":"h1","brief":true}`, hoststep.Version))
	if err != nil || !resp.OK || resp.Versions == nil || resp.Versions.Platform != nil || resp.Versions.Packages != nil ||
		resp.Versions.Hook == nil || resp.Versions.Hook.Path != hookBin || resp.Versions.Step.ClaimFormat != engine.ClaimFormat {
		t.Fatalf("brief versions: %+v %v", resp, err)
	}
}
