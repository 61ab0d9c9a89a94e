// Package collision turns the fences of one run into lock-collision events
// and publishes them: to oned (the VM's user template, through goca) when it
// answers, to the durable local spool when it does not. On a KVM host, which
// holds no oned credentials, PublishHost only spools them, and the front-end
// collects host spools over ssh (internal/frontend Collect). Pure Go: the
// front-end drivers and the libvirt hook both use it.
package collision

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// eventID is the id of the event for one audit record. It is derived from the
// run, image and address, so a run that is retried after a crash re-creates
// the same id and oned counts the collision once.
func eventID(r audit.Record) string {
	vm := -1 // the id's input before Record.VM became optional: ids stay as they were
	if r.VM != nil {
		vm = *r.VM
	}
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s|%d|%s|%s", r.Run, vm, r.Image, r.Address)))
	return hex.EncodeToString(sum[:16])
}

// Events returns one event per audit record of a VM (records of no VM, a
// CLI fence or a domain that is not an OpenNebula VM, stay in the audit log
// only).
func Events(recs []audit.Record, source string) []events.Event {
	var out []events.Event
	for _, r := range recs {
		if r.VM == nil {
			continue
		}
		action := r.Action
		if r.Error != "" {
			action = "fence-failed"
		}
		out = append(out, events.Event{
			ID: eventID(r), Time: r.Time, VM: *r.VM, Host: r.Host, Image: r.Image, Client: r.Client,
			Address: r.Address, Cookie: r.Cookie, Action: action, Expire: r.Expire, Source: source,
		})
	}
	return out
}

// Result says where the events went.
type Result struct {
	Delivered int
	Spooled   int
	// ForCollection: this machine holds no oned credentials, so the events
	// were spooled for the front-end to collect over ssh (`rbdfence events
	// flush`, and its timer). The normal case on a KVM host; not an error.
	ForCollection bool
}

// PublishHost is Publish for the host side (the libvirt hook): a KVM host
// normally holds no oned credentials (docs/SECURITY.md), and then the
// events only go to the spool, from which the front-end collects them; no
// oned call is tried. Only when the admin has put a credentials file at
// opennebula.auth_file on the host (discouraged: it is oneadmin's password
// on a machine that should not hold it) does the host deliver directly, as
// Publish.
func PublishHost(ctx context.Context, cfg *config.Config, evs []events.Event) (Result, error) {
	if _, err := os.Stat(cfg.OpenNebula.AuthFile); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return Publish(ctx, cfg, evs)
	}
	if len(evs) == 0 {
		return Result{ForCollection: true}, nil
	}
	spool, err := events.OpenSpool(cfg.SpoolDir)
	if err != nil {
		return Result{}, fmt.Errorf("%d event(s) lost: cannot open the spool for the front-end's collection: %w", len(evs), err)
	}
	_, n, err := events.Deliver(ctx, nil, spool, evs)
	var deferred *events.DeferredError
	if errors.As(err, &deferred) {
		err = nil // spooled for collection is where they belong here
	}
	return Result{Spooled: n, ForCollection: true}, err
}

// Publish offers evs (and older spooled events first) to oned within the
// configured oned timeout and keeps the rest in the spool. The error is nil
// or *events.DeferredError when nothing was lost; any other error means an
// event could not even be spooled and must be reported loudly.
func Publish(ctx context.Context, cfg *config.Config, evs []events.Event) (Result, error) {
	if _, err := os.Lstat(cfg.SpoolDir); len(evs) == 0 && errors.Is(err, fs.ErrNotExist) {
		return Result{}, nil // nothing new, and no spool: nothing older either (none is made)
	}
	spool, serr := events.OpenSpool(cfg.SpoolDir)
	if serr != nil {
		spool = nil
	}
	var sink events.Sink
	client, cerr := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	if cerr == nil {
		sink = client
	}
	if len(evs) == 0 && (sink == nil || spool == nil) {
		return Result{}, nil
	}
	octx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeouts.Oned))
	defer cancel()
	d, s, err := events.Deliver(octx, sink, spool, evs)
	if err != nil && serr != nil {
		err = fmt.Errorf("%w (spool %s: %v)", err, cfg.SpoolDir, serr)
	}
	if err != nil && cerr != nil {
		err = fmt.Errorf("%w (oned client: %v)", err, cerr)
	}
	return Result{Delivered: d, Spooled: s}, err
}
