// Package checkjson is the --json output of `rbdfence check` and `rbdfence
// fence`, written once: the types the CLI prints and docs/CLI.md documents
// (a test keeps the two equal). Every field is always printed, false, zero,
// empty or null included; fields are only ever added, never renamed or
// dropped.
package checkjson

import (
	"encoding/json"
	"io"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// Check is what `check --image ... --json` and `fence --json` print,
// and the report of each VM of `check --vm/--all --json`.
type Check struct {
	// DryRun is true for check (nothing changed), false for fence.
	DryRun bool    `json:"dry_run"`
	Images []Image `json:"images"`
	// Recorded are addresses a VM's claim recorded for an earlier
	// instance, visible on no image (check --vm of a stopped VM, starts).
	Recorded   []Client `json:"recorded"`
	WouldFence int      `json:"would_fence"`
	Fenced     int      `json:"fenced"`
	Errors     int      `json:"errors"`
}

// Image is one image and its clients.
type Image struct {
	Image     string   `json:"image"`
	Shareable bool     `json:"shareable"`
	ReadOnly  bool     `json:"readonly"`
	Missing   bool     `json:"missing"`
	Clients   []Client `json:"clients"`
	Error     string   `json:"error"`
}

// Client is one client of an image (a locker, a watcher or both).
type Client struct {
	Address  string          `json:"address"`
	Client   string          `json:"client"`
	Cookie   string          `json:"cookie"`
	Locker   bool            `json:"locker"`
	Watcher  bool            `json:"watcher"`
	Decision engine.Decision `json:"decision"`
	Action   engine.Action   `json:"action"`
	// Expire is when its blocklist entry ends; null when none was added.
	Expire *time.Time `json:"expire"`
	Error  string     `json:"error"`
}

// VMs is what `check --vm ID --json` and `check --all --json`
// print.
type VMs struct {
	DryRun     bool `json:"dry_run"`
	VMs        []VM `json:"vms"`
	WouldFence int  `json:"would_fence"`
	Errors     int  `json:"errors"`
}

// VM is one VM of check --vm/--all.
type VM struct {
	VM   int    `json:"vm"`
	Name string `json:"name"`
	Host string `json:"host"`
	Seq  int    `json:"seq"`
	// Running: its recorded instance is kept; else checked as a start on
	// Host.
	Running bool `json:"running"`
	// Claim is the VM's claim record as `claim show` prints it; null when
	// it has none.
	Claim  *engine.Claim `json:"claim"`
	Report Check         `json:"report"`
	Error  string        `json:"error"`
}

// FromReport converts an engine report (nil: nothing was checked).
func FromReport(r *engine.Report, dryRun bool) Check {
	out := Check{DryRun: dryRun, Images: []Image{}, Recorded: []Client{}}
	if r == nil {
		return out
	}
	out.DryRun, out.Fenced, out.Errors = r.DryRun, r.Fenced, r.Errors
	for _, im := range r.Images {
		j := Image{Image: im.Image, Shareable: im.Shareable, ReadOnly: im.ReadOnly, Missing: im.Missing, Clients: []Client{}, Error: im.Error}
		for _, c := range im.Clients {
			j.Clients = append(j.Clients, client(c))
			if c.Action == engine.ActWouldFence {
				out.WouldFence++
			}
		}
		out.Images = append(out.Images, j)
	}
	for _, c := range r.Recorded {
		out.Recorded = append(out.Recorded, client(c))
		if c.Action == engine.ActWouldFence {
			out.WouldFence++
		}
	}
	return out
}

func client(c engine.ClientReport) Client {
	j := Client{Address: c.Address, Client: c.Client, Cookie: c.Cookie, Locker: c.Locker, Watcher: c.Watcher,
		Decision: c.Decision, Action: c.Action, Error: c.Error}
	if !c.Expire.IsZero() {
		t := c.Expire.UTC()
		j.Expire = &t
	}
	return j
}

// Write prints v indented, as every --json of the CLI.
func Write(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
