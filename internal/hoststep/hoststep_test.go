package hoststep

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

func TestReadRequest(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{in: `{"op":"start","vm":42,"seq":3,"host":"node1","run":"r","source":"frontend","disks":[{"id":"0","pool":"one","name":"one-7"}]}`},
		{in: ``, err: "empty"},
		{in: `{"op":"start","vm":42}`, err: "no host"},
		{in: `{"version":4,"op":"versions","vm":0}`}, // what runs on the host: no VM, no host name needed
		{in: `{"op":"explode","vm":1,"host":"a"}`, err: "unknown op"},
		{in: `{"op":"start","vm":-3,"host":"a"}`, err: "bad VM id"},
		{in: `{"op":"premigrate","vm":1,"host":"a"}`, err: "src and dst"},
		{in: `{"op":"start","vm":1,"host":"a","disks":[{"id":"0","pool":"","name":"x"}]}`, err: "no pool"},
		{in: `{"op":"start","vm":1,"host":"a","extra":1,"disks":[{"id":"0","pool":"one","name":"x","new":true}]}`}, // unknown fields: ignored
		{in: `{"version":7,"op":"start","vm":1,"host":"a","extra":{"x":1}}`},                                       // a newer front-end, a known op
		{in: fmt.Sprintf(`{"version":%d,"op":"scrub","vm":1,"host":"a"}`, Version+1), err: fmt.Sprintf("the front-end speaks version %d, this host's rbdfence speaks version %d: this host does not know the step \"scrub\"; upgrade the rbdfence and rbdfence-host packages on the host where it has them, and run 'onehost sync --force'", Version+1, Version)},
		{in: `{"op":"scrub","vm":1,"host":"a"}`, err: "unknown op"}, // same version: a bad request, not a mismatch
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

// v1Request and v1Response are the messages as rbdfence wrote and read them
// before protocol versions (git history of this file): a version 1 peer
// decodes them with unknown fields rejected, as decodeV1 does.
type v1Request struct {
	Op     string          `json:"op"`
	VM     int             `json:"vm"`
	Seq    int             `json:"seq"`
	Host   string          `json:"host"`
	Src    string          `json:"src,omitempty"`
	Dst    string          `json:"dst,omitempty"`
	Run    string          `json:"run"`
	Source string          `json:"source"`
	Disks  json.RawMessage `json:"disks"`
	Local  bool            `json:"local,omitempty"`
}

type v1Response struct {
	OK       bool            `json:"ok"`
	Op       string          `json:"op"`
	Kind     string          `json:"kind,omitempty"`
	Error    string          `json:"error,omitempty"`
	Handover bool            `json:"handover,omitempty"`
	Claim    json.RawMessage `json:"claim,omitempty"`
	Report   json.RawMessage `json:"report,omitempty"`
	Audit    json.RawMessage `json:"audit,omitempty"`
	HostIPs  []string        `json:"host_ips,omitempty"`
}

// decodeV1 is a version 1 peer's decoder (hoststep.decode before versions).
func decodeV1(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimSpace(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not valid JSON: %v", err)
	}
	return nil
}

func readTestdata(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOldFrontendNewHost: a front-end still on version 1 talks to an
// upgraded host. The host reads the old requests, and its answers carry no
// field the old front-end would reject.
func TestOldFrontendNewHost(t *testing.T) {
	for _, name := range []string{"v1-request-start.json", "v1-request-postmigrate.json"} {
		req, err := ReadRequest(bytes.NewReader(readTestdata(t, name)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if req.PeerVersion() != 1 || req.VM != 42 || req.Seq != 3 || len(req.Disks) != 1 || req.Disks[0].Name != "one-7-42-0" {
			t.Fatalf("%s: read as %+v", name, req)
		}
		for _, resp := range []*Response{
			{OK: true, Op: req.Op, Report: &engine.Report{Images: []engine.ImageReport{{Image: "one/one-7-42-0"}}}, HostIPs: []string{"10.0.0.2"}},
			{Op: req.Op, Kind: outcome.Refused, Error: "VM 42: refused"},
			{Op: req.Op, Kind: outcome.Unavailable, Error: "cannot reach Ceph"},
		} {
			b, _ := json.Marshal(Reply(req, resp))
			var old v1Response
			if err := decodeV1(b, &old); err != nil {
				t.Fatalf("%s: the old front-end rejects the answer %s: %v", name, b, err)
			}
			if old.OK != resp.OK || old.Op != req.Op || old.Kind != resp.Kind.Name() {
				t.Fatalf("%s: the old front-end reads %+v from %s", name, old, b)
			}
		}
	}
}

// TestNewFrontendOldHost: an upgraded front-end talks to a host that missed
// `onehost sync`. It reads the old host's answers; the old host rejects the
// version field exactly as recorded in testdata, the front-end recognises
// that answer, and the same request without a version is one the old host
// accepts.
func TestNewFrontendOldHost(t *testing.T) {
	resp, err := ReadResponse(bytes.NewReader(readTestdata(t, "v1-response-start.json")))
	if err != nil || !resp.OK || resp.Report.Fenced != 1 || resp.Claim.Host != "node1" || len(resp.Audit) != 1 || resp.V1Rejected() {
		t.Fatalf("start response: %+v %v", resp, err)
	}
	resp, err = ReadResponse(bytes.NewReader(readTestdata(t, "v1-response-refused.json")))
	if err != nil || resp.OK || resp.Kind != outcome.Refused || resp.V1Rejected() {
		t.Fatalf("refused response: %+v %v", resp, err)
	}

	var req Request
	if err := json.Unmarshal(readTestdata(t, "v1-request-start.json"), &req); err != nil {
		t.Fatal(err)
	}
	req.Version = Version
	b, _ := json.Marshal(&req)
	var old v1Request
	oldErr := decodeV1(b, &old)
	if oldErr == nil {
		t.Fatalf("a version 1 host accepts %s", b)
	}
	recorded, err := ReadResponse(bytes.NewReader(readTestdata(t, "v1-response-unknown-field.json")))
	if err != nil || !recorded.V1Rejected() {
		t.Fatalf("the old host's refusal is not recognised: %+v %v", recorded, err)
	}
	if !strings.Contains(recorded.Error, oldErr.Error()) {
		t.Fatalf("testdata %q does not hold the old host's error %q", recorded.Error, oldErr)
	}
	req.Version = 0
	b, _ = json.Marshal(&req)
	if err := decodeV1(b, &old); err != nil || old.Op != OpStart || old.VM != 42 {
		t.Fatalf("a version 1 host rejects the version 1 request %s: %v", b, err)
	}
}

// TestIncompatible: only a real incompatibility is refused, in one line that
// names both versions and the fix.
func TestIncompatible(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"host too old for the front-end", checkPeer("host", "front-end", 1, 2), fmt.Sprintf("the host speaks version 1, this front-end's rbdfence speaks version %d: version 2 or later is needed; upgrade the rbdfence and rbdfence-host packages on the host where it has them, and run 'onehost sync --force'", Version)},
		{"front-end too old for the host", checkPeer("front-end", "host", 1, 2), fmt.Sprintf("the front-end speaks version 1, this host's rbdfence speaks version %d", Version)},
	} {
		var ie *IncompatibleError
		if !errors.As(tc.err, &ie) || !strings.Contains(tc.err.Error(), tc.want) || strings.Contains(tc.err.Error(), "\n") || outcome.Of(tc.err) != outcome.Usage {
			t.Errorf("%s: %v", tc.name, tc.err)
		}
	}
	if err := checkPeer("host", "front-end", 1, minVersion); err != nil {
		t.Errorf("version 1 hosts are refused: %v", err)
	}
	_, err := ReadResponse(strings.NewReader(`{"version":9,"ok":false,"op":"start","kind":"quota","error":"a kind of the future","hint":"x"}`))
	if err != nil {
		t.Errorf("a newer host's answer: %v", err)
	}
}
