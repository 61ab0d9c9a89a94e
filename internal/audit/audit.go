// Package audit keeps rbdfence's append-only JSON audit log: one line per
// client fenced (or whose fence failed), written before any event is sent.
package audit

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// NewRunID returns a short random id naming one run in logs, audit
// records, claims and events: the one run-id function of every binary.
func NewRunID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Record is one audit line: the audit log's schema. docs/CONFIGURATION.md
// ("Audit log") documents it from this type's field comments
// (TestSchemaDocumented). A field that does not apply to a record is absent
// from its line, never a placeholder.
type Record struct {
	// Time is when the run wrote the line (UTC).
	Time time.Time `json:"time"`
	// Run is the run id, also in the run's log lines, claims and events.
	Run string `json:"run"`
	// Op is what ran: a host step (start, record, postmigrate, failmigrate, attach, incoming) or a CLI verb (fence, unfence, fence-host, claim-reset, claim-gc).
	Op string `json:"op"`
	// VM is the OpenNebula VM id; absent for a fence of no VM (a CLI fence or unfence, a fence-host of a whole address).
	VM *int `json:"vm,omitempty"`
	// Host is the host the run acted for (absent when it names none).
	Host string `json:"host,omitempty"`
	// Image is the RBD image, pool/name (absent for a fence of a whole address).
	Image string `json:"image,omitempty"`
	// Client is the Ceph client fenced, client.ID (absent when the line is about no client).
	Client string `json:"client,omitempty"`
	// Address is the client instance's address as Ceph blocklists it, IP:port/nonce.
	Address string `json:"address,omitempty"`
	// Cookie is the lock cookie broken (absent when the client held no lock).
	Cookie string `json:"cookie,omitempty"`
	// Action is what was done: blocklisted, blocklisted+unlocked, blocklisted-whole-address, failed, unblocklisted, claim-reset, none.
	Action string `json:"action"`
	// Expire is when the blocklist entry expires (absent when nothing was blocklisted).
	Expire time.Time `json:"expire,omitzero"`
	// Result is ok or error.
	Result string `json:"result"`
	// Error is what failed, when Result is error.
	Error string `json:"error,omitempty"`
}

// UnmarshalJSON reads a record as written now or by an older rbdfence, whose
// lines (and hosts' answers) said "vm":-1 for no VM: that is no VM here.
func (r *Record) UnmarshalJSON(b []byte) error {
	type plain Record
	if err := json.Unmarshal(b, (*plain)(r)); err != nil {
		return err
	}
	if r.VM != nil && *r.VM < 0 {
		r.VM = nil
	}
	return nil
}

// VMOf is the Record.VM (and Meta.VM) of a VM id that is negative when the
// run is for no VM (a libvirt domain that is not an OpenNebula VM): nil then.
func VMOf(id int) *int {
	if id < 0 {
		return nil
	}
	return &id
}

// Meta is what a run knows about itself.
type Meta struct {
	Run  string
	Op   string
	VM   *int // nil: the run is for no VM
	Host string
}

// FromReport returns one record per client this run fenced or failed to fence.
func FromReport(r *engine.Report, m Meta, now time.Time) []Record {
	var out []Record
	add := func(image string, c engine.ClientReport) {
		if !c.Fenced() && c.Action != engine.ActFailed {
			return
		}
		res := "ok"
		if c.Error != "" {
			res = "error"
		}
		out = append(out, Record{Time: now.UTC(), Run: m.Run, Op: m.Op, VM: m.VM, Host: m.Host, Image: image,
			Client: c.Client, Address: c.Address, Cookie: c.Cookie, Action: string(c.Action), Expire: c.Expire, Result: res, Error: c.Error})
	}
	if r == nil {
		return nil
	}
	for _, im := range r.Images {
		for _, c := range im.Clients {
			add(im.Image, c)
		}
	}
	for _, c := range r.Recorded {
		add("", c)
	}
	return out
}

// Append writes recs to the log at path in one O_APPEND write and syncs it.
// The file is created 0640 and its directory 0750.
func Append(path string, recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	var buf []byte
	for _, r := range recs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		buf = append(append(buf, b...), '\n')
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("audit log %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return fmt.Errorf("audit log %s: %w", path, err)
	}
	if _, err := f.Write(buf); err != nil {
		f.Close()
		return fmt.Errorf("audit log %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("audit log %s: %w", path, err)
	}
	return f.Close()
}

// Read returns every record in the log; a missing log is empty. Lines that do
// not parse (a torn last line after a crash) are skipped and counted.
func Read(path string) (recs []Record, bad int, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r Record
		if json.Unmarshal(sc.Bytes(), &r) != nil {
			bad++
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad, sc.Err()
}
