// Package hoststep is the JSON protocol between the front-end drivers (pure
// Go) and the host-side binary that does the Ceph work ("rbdfence host", run
// over ssh on the VM's host, or locally): one Request on stdin, one Response
// on stdout.
package hoststep

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// Ops.
const (
	OpCheck       = "check"       // dry run of start: what would be fenced
	OpStart       = "start"       // claim the VM and fence (prestart)
	OpRecord      = "record"      // record the started instance's addresses
	OpPremigrate  = "premigrate"  // open the handover window
	OpPostmigrate = "postmigrate" // close it; fence lock owners not on dst
	OpFailmigrate = "failmigrate" // close it; fence every client on dst
)

// Request asks the host for one step.
type Request struct {
	Op     string        `json:"op"`
	VM     int           `json:"vm"`
	Seq    int           `json:"seq"`
	Host   string        `json:"host"`
	Src    string        `json:"src,omitempty"`
	Dst    string        `json:"dst,omitempty"`
	Run    string        `json:"run"`
	Source string        `json:"source"`
	Disks  []vmdisk.Disk `json:"disks"`
	// Local is set when the step runs on the front-end instead of on Host
	// (opennebula.remote: local): its own addresses do not identify Host.
	Local bool `json:"local,omitempty"`
}

// Validate checks the request's shape.
func (r *Request) Validate() error {
	switch r.Op {
	case OpCheck, OpStart, OpRecord, OpPremigrate, OpPostmigrate, OpFailmigrate:
	default:
		return fmt.Errorf("unknown op %q", r.Op)
	}
	if r.VM < 0 {
		return fmt.Errorf("bad VM id %d", r.VM)
	}
	if r.Host == "" {
		return fmt.Errorf("no host given")
	}
	switch r.Op {
	case OpPremigrate, OpPostmigrate, OpFailmigrate:
		if r.Src == "" || r.Dst == "" {
			return fmt.Errorf("%s needs src and dst hosts", r.Op)
		}
	}
	for _, d := range r.Disks {
		if d.Pool == "" || d.Name == "" {
			return fmt.Errorf("disk %q: no pool or image name", d.ID)
		}
	}
	return nil
}

// Response is the host's answer.
type Response struct {
	OK       bool           `json:"ok"`
	Op       string         `json:"op"`
	Kind     outcome.Kind   `json:"kind,omitempty"` // how a failed step ended (internal/outcome)
	Error    string         `json:"error,omitempty"`
	Handover bool           `json:"handover,omitempty"`
	Claim    *engine.Claim  `json:"claim,omitempty"`
	Report   *engine.Report `json:"report,omitempty"`
	Audit    []audit.Record `json:"audit,omitempty"`
	HostIPs  []string       `json:"host_ips,omitempty"`
}

// MaxSize bounds what either side reads.
const MaxSize = 8 << 20

// ReadRequest decodes one request strictly.
func ReadRequest(r io.Reader) (*Request, error) {
	var req Request
	if err := decode(r, &req); err != nil {
		return nil, fmt.Errorf("host step request: %w", err)
	}
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("host step request: %w", err)
	}
	return &req, nil
}

// ReadResponse decodes one response.
func ReadResponse(r io.Reader) (*Response, error) {
	var resp Response
	if err := decode(r, &resp); err != nil {
		return nil, fmt.Errorf("host step response: %w", err)
	}
	if !resp.OK && resp.Error == "" {
		return nil, fmt.Errorf("host step response: neither ok nor an error")
	}
	return &resp, nil
}

func decode(r io.Reader, v any) error {
	b, err := io.ReadAll(io.LimitReader(r, MaxSize+1))
	if err != nil {
		return err
	}
	if len(b) > MaxSize {
		return fmt.Errorf("larger than %d bytes", MaxSize)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return fmt.Errorf("empty")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not valid JSON: %v", err)
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON object")
	}
	return nil
}
