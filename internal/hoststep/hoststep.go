// Package hoststep is the JSON protocol between the front-end drivers (pure
// Go) and the host-side binary that does the Ceph work ("rbdfence host", run
// over ssh on the VM's host, or locally): one Request on stdin, one Response
// on stdout.
//
// The protocol survives a rolling upgrade (front-end first, then the hosts'
// packages and `onehost sync --force`; a host may miss that step for a
// while):
//
//   - Both messages carry the sender's protocol Version; a message without
//     one is version 1, the JSON of rbdfence before versions.
//   - Unknown fields are ignored both ways, and a kind the reader does not
//     know is a failure (outcome.Parse).
//   - The host answers in its peer's version: a version 1 front-end gets a
//     version 1 response (no field it would reject).
//   - Version 1 hosts reject any field they do not know, "version"
//     included: the front-end then asks again in version 1 (V1Rejected).
//   - Only a real incompatibility is refused: an op the host does not know,
//     or a peer older than minVersion. The *IncompatibleError names both
//     versions and the fix.
//   - Version 4 answers carry what runs on the host (Versions: the host
//     step and the hook beside it, their claim formats); a start or an
//     incoming migration on a host that reads an older claim format than
//     the front-end's is refused (CheckVersions, versions.go).
//   - A version 5 failmigrate fences the destination's copy only on the
//     source's word that the VM runs there with no job (Request.SrcDomain,
//     the step "domain"); an older host step ignores that field and would
//     fence on the failure alone, so the front-end sends it no failmigrate
//     (FailmigrateVersion).
package hoststep

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/events"
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
	OpAttach      = "attach"      // fence every client of disks being hot-attached
	// OpIncoming checks an incoming live migration against the claim (the
	// hook's migrate begin, in the hook's own process): fences nothing,
	// writes nothing.
	OpIncoming = "incoming"
	// OpVersions reports what runs on the host (Versions with its packages
	// and platform): touches neither Ceph nor a claim. Version 4.
	OpVersions = "versions"
	// OpDomain asks libvirt on the host, read-only, what the VM's domain
	// is there and whether a job of it runs (Response.Domain): the
	// front-end asks a migration's source before the failmigrate on the
	// destination, which it relays the answer to (Request.SrcDomain).
	// Touches neither Ceph nor a claim. A host that does not know it
	// answers "unknown op": no answer, the failmigrate then fences
	// nothing.
	OpDomain = "domain"
)

// Version is the host-step protocol version this code speaks. 1: the JSON
// of rbdfence before versions (strict: unknown fields rejected); 2: the
// version field, unknown fields ignored; 3: the step "attach" (a version 2
// host refuses it with the fix, see Validate); 4: the host's Versions in
// every response, the step "versions"; 5: the step "domain", and a
// failmigrate that fences only on the source's "active, no job"
// (Request.SrcDomain).
const Version = 5

// FailmigrateVersion is the oldest host step a failmigrate may be sent to:
// an older one ignores Request.SrcDomain and fences the destination's copy
// even when the "failed" migration completed there.
const FailmigrateVersion = 5

// minVersion is the oldest peer version this code still works with.
const minVersion = 1

// Fix is what an operator runs to bring the hosts' rbdfence up to the
// front-end's: the host step is the rbdfence package's where the host has
// it, else the synced one.
const Fix = "upgrade the rbdfence and rbdfence-host packages on the host where it has them, and run 'onehost sync --force' as oneadmin on the front-end (upgrade the front-end's rbdfence first if it is the older side)"

// IncompatibleError refuses a message this side cannot serve.
type IncompatibleError struct {
	Peer    string // who sent the message: "front-end" or "host"
	PeerVer int
	OurSide string // "host" or "front-end"
	OurVer  int
	Why     string // what cannot be done
}

func (e *IncompatibleError) Error() string {
	return fmt.Sprintf("host step protocol mismatch: the %s speaks version %d, this %s's rbdfence speaks version %d: %s; %s",
		e.Peer, e.PeerVer, e.OurSide, e.OurVer, e.Why, Fix)
}

// Outcome: a real incompatibility is an installation problem.
func (e *IncompatibleError) Outcome() outcome.Kind { return outcome.Usage }

// versionOf reads a message's version field (absent: 1).
func versionOf(v int) int {
	if v <= 0 {
		return 1
	}
	return v
}

// checkPeer refuses a peer older than min.
func checkPeer(peer, ourSide string, peerVer, min int) error {
	if peerVer >= min {
		return nil
	}
	return &IncompatibleError{Peer: peer, PeerVer: peerVer, OurVer: Version, OurSide: ourSide,
		Why: fmt.Sprintf("version %d or later is needed", min)}
}

// Request asks the host for one step.
type Request struct {
	// Version is the front-end's protocol version (absent: 1).
	Version int           `json:"version,omitempty"`
	Op      string        `json:"op"`
	VM      int           `json:"vm"`
	Seq     int           `json:"seq"`
	Host    string        `json:"host"`
	Src     string        `json:"src,omitempty"`
	Dst     string        `json:"dst,omitempty"`
	Run     string        `json:"run"`
	Source  string        `json:"source"`
	Disks   []vmdisk.Disk `json:"disks"`
	// Local is set when the step runs on the front-end instead of on Host
	// (opennebula.remote: local): its own addresses do not identify Host.
	Local bool `json:"local,omitempty"`
	// Incoming is the handover window the hook accepted at migrate begin
	// (from its incoming-migration mark) for the start or record of that
	// migration on the destination; absent otherwise.
	Incoming *engine.Window `json:"incoming,omitempty"`
	// Instance identifies the domain the step is about (engine.Who.Instance:
	// its `<one:deployment_time>`): the front-end's start sends the
	// deployment file's, the hook its domain XML's; absent when unknown. A
	// version 2 or 3 host ignores it (the claim then records no identity
	// until that host's own hook, upgraded, records one); a version 1 host
	// rejects it, so the front-end's version 1 retry leaves it out. No
	// version bump: nothing a peer must refuse depends on it.
	Instance int64 `json:"instance,omitempty"`
	// Restore is set on the start step of OpenNebula's restore (`onevm
	// resume` of a SUSPENDED VM): a guest that suspended itself to RAM is
	// only woken up there (engine.Who.Restore). Hosts that do not know the
	// field ignore it (version 2 and 3) and refuse the start of such a
	// guest as already running; a version 1 host rejects it, so the
	// front-end's version 1 retry leaves it out.
	Restore bool `json:"restore,omitempty"`
	// Stime is the VM's STIME (engine.Who.Stime): with the VM id it names
	// the VM among every OpenNebula installation sharing the claim pool.
	// The front-end sends oned's (or the deployment file's), the hook its
	// domain XML's. Absent: unknown (an older front-end), the VM's object is
	// used as before. Ignored by hosts that do not know it (version 2 and
	// 3); a version 1 host rejects it (the version 1 retry leaves it out).
	Stime int64 `json:"stime,omitempty"`
	// History is the VM's HISTORY records as oned has them (engine.Who.History):
	// a claim an older version wrote is adopted as the VM's when it holds
	// one of them. Only the front-end knows it.
	History []engine.Placement `json:"history,omitempty"`
	// SrcDomain is, for a failmigrate on the destination, what libvirt on
	// the migration's source said about the VM's domain and its job (the
	// front-end's OpDomain step there): the destination fences its copy
	// only when the VM runs on the source with no job (engine.Who.Domain).
	// Absent: not asked, nothing is fenced. Hosts that do not know the
	// field ignore it and fence as before.
	SrcDomain *engine.Domain `json:"src_domain,omitempty"`
	// Brief asks OpVersions for the host step and the hook only, without
	// the packages and the platform (what a start or a migration checks;
	// doctor asks for all). A host that does not know the field answers
	// in full.
	Brief bool `json:"brief,omitempty"`
}

// PeerVersion is the version the request was written in.
func (r *Request) PeerVersion() int { return versionOf(r.Version) }

// Validate checks the request's shape.
func (r *Request) Validate() error {
	switch r.Op {
	case OpCheck, OpStart, OpRecord, OpPremigrate, OpPostmigrate, OpFailmigrate, OpAttach, OpIncoming, OpVersions, OpDomain:
	default:
		if r.PeerVersion() > Version {
			return &IncompatibleError{Peer: "front-end", PeerVer: r.PeerVersion(), OurVer: Version, OurSide: "host",
				Why: fmt.Sprintf("this host does not know the step %q", clip(r.Op))}
		}
		return fmt.Errorf("unknown op %q", clip(r.Op))
	}
	if r.VM < 0 {
		return fmt.Errorf("bad VM id %d", r.VM)
	}
	if r.Host == "" && r.Op != OpVersions {
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
	// Version is the host's protocol version as its peer reads it: absent
	// in the answer to a version 1 request (see Reply).
	Version int          `json:"version,omitempty"`
	OK      bool         `json:"ok"`
	Op      string       `json:"op"`
	Kind    outcome.Kind `json:"kind,omitempty"` // how a failed step ended (internal/outcome)
	Error   string       `json:"error,omitempty"`
	// Brief is the failure in few words, what happened and what to run
	// (engine.Briefer), for the part of the message oned keeps in the
	// VM's ERROR; absent from older hosts and when the error has none.
	Brief    string         `json:"brief,omitempty"`
	Handover bool           `json:"handover,omitempty"`
	Claim    *engine.Claim  `json:"claim,omitempty"`
	Report   *engine.Report `json:"report,omitempty"`
	Audit    []audit.Record `json:"audit,omitempty"`
	HostIPs  []string       `json:"host_ips,omitempty"`
	// Versions is what runs on the answering host (version 4): absent from
	// older hosts and in the answer to a version 1 request.
	Versions *Versions `json:"versions,omitempty"`
	// Domain is the answer to OpDomain: what libvirt here said about the
	// VM's domain and its job.
	Domain *engine.Domain `json:"domain,omitempty"`
}

// MaxSize bounds what either side reads.
const MaxSize = 8 << 20

// ReadRequest decodes one request (the host's side). Unknown fields are
// ignored; an op this host does not know from a newer front-end, or a
// front-end older than minVersion, is an *IncompatibleError.
func ReadRequest(r io.Reader) (*Request, error) {
	var req Request
	if err := decode(r, &req); err != nil {
		return nil, fmt.Errorf("host step request: %w", err)
	}
	if err := checkPeer("front-end", "host", req.PeerVersion(), minVersion); err != nil {
		return &req, err
	}
	if err := req.Validate(); err != nil {
		var ie *IncompatibleError
		if errors.As(err, &ie) {
			return &req, err
		}
		return nil, fmt.Errorf("host step request: %w", err)
	}
	return &req, nil
}

// Reply stamps resp for the peer that sent req: the current Version for a
// peer that sends one, none for a version 1 peer (req nil: the request was
// unreadable), which rejects fields it does not know.
func Reply(req *Request, resp *Response) *Response {
	resp.Version = 0
	if req != nil && req.PeerVersion() >= 2 {
		resp.Version = Version
	}
	if req == nil || req.PeerVersion() < 4 {
		resp.Versions = nil // a version 1 peer rejects the field; 2 and 3 ignore it
	}
	return resp
}

// ReadResponse decodes one response (the front-end's side). Unknown fields
// are ignored; a host older than minVersion is an *IncompatibleError.
func ReadResponse(r io.Reader) (*Response, error) {
	var resp Response
	if err := decode(r, &resp); err != nil {
		return nil, fmt.Errorf("host step response: %w", err)
	}
	if !resp.OK && resp.Error == "" {
		return nil, fmt.Errorf("host step response: neither ok nor an error")
	}
	if err := checkPeer("host", "front-end", versionOf(resp.Version), minVersion); err != nil {
		return &resp, err
	}
	return &resp, nil
}

// V1Rejected reports that resp is a version 1 host's refusal of a request
// that carried a version: version 1 hosts reject every field they do not
// know. The front-end then sends the same request without one.
func (r *Response) V1Rejected() bool {
	return r.Version == 0 && !r.OK && r.Kind == outcome.Usage &&
		strings.Contains(r.Error, `unknown field "version"`)
}

// clip keeps outside input short in messages.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

func decode(r io.Reader, v any) error { return DecodeJSON(r, MaxSize, v) }

// DecodeJSON reads exactly one JSON object of at most max bytes from r into
// v (surrounding white space allowed, nothing else): the one decoder of the
// messages the front-end and the hosts exchange over ssh, the host steps
// here and the spool collection (internal/hostspool). Its errors are one
// line.
func DecodeJSON(r io.Reader, max int, v any) error {
	b, err := io.ReadAll(io.LimitReader(r, int64(max)+1))
	if err != nil {
		return err
	}
	if len(b) > max {
		return fmt.Errorf("larger than %d bytes", max)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return errors.New("empty")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not valid JSON: %s", events.OneLine(err.Error()))
	}
	if dec.More() {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}
