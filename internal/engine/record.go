package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// ImageRecordObject is the RADOS object, in the image's pool, that keeps the
// last recorded writer of an image: the address follows the image, so that a
// persistent image that moves to another VM carries its last writer with it.
func ImageRecordObject(img Image) string {
	if img.Namespace != "" {
		return "rbdfence.image." + img.Namespace + "/" + img.Name
	}
	return "rbdfence.image." + img.Name
}

// ImageRecord is the content of an image's record object.
type ImageRecord struct {
	Image   string    `json:"image"`
	VM      int       `json:"vm"`
	Seq     int       `json:"seq"`
	Host    string    `json:"host"`
	Addrs   []Addr    `json:"addrs"`
	Updated time.Time `json:"updated"`
}

// exclusive reports whether the VM is the image's only writer: not a
// shareable disk and not a read-only one (a CD-ROM, a shared ISO), whose
// clients on this host may be other VMs'.
func (i Image) exclusive() bool { return !i.Shareable && !i.ReadOnly }

// LegacyImage is the Claim.Images key of addresses an older version
// recorded without their image.
const LegacyImage = "?"

// Record stores the client addresses of the instance that now runs on w.Host,
// marking the claim running: per image, the watchers in scope of each image
// the VM writes exclusively (never a shareable or read-only image's, which
// may be other VMs' clients), in the claim and with the image itself.
// For the destination of the incoming migration the claim's window is for
// (w.Incoming, see handover) it records them in the window instead: the
// source stays the claim's instance until postmigrate or failmigrate.
func (e *Engine) Record(ctx context.Context, w Who, imgs []Image, scope Scope) (*ClaimResult, error) {
	return e.apply(ctx, w, imgs, Event{Op: OpRecord}, func(ctx context.Context, ev *Event) (*Report, error) {
		r := e.inspect(ctx, imgs, scope, false)
		r.count()
		ev.Seen = onHostSeen(r, scope)
		return r, r.Err()
	})
}

// recordImages sets next's per-image addresses from seen (what Ceph shows
// on the step's images, on the instance's host): for every image the VM
// writes exclusively, its watchers there. Entries of images not seen (a
// detached disk, or disks reached through another Ceph access) are kept
// from prev. Addrs becomes the union of all entries. It returns the
// addresses of an older version's claim that it shows are not the VM's:
// clients of an image the VM does not write exclusively.
func recordImages(next, prev *Claim, seen []Seen) (disowned []Addr) {
	next.Images = map[string][]Addr{}
	if prev != nil {
		for k, v := range prev.Images {
			next.Images[k] = v
		}
		if prev.Images == nil && len(prev.Addrs) > 0 {
			// A claim of an older version: its addresses are not per image.
			// Those visible now are re-recorded below (or were another VM's
			// clients of a shared image); the others are kept, image unknown.
			visible, shared := map[Addr]bool{}, map[Addr]bool{}
			for _, s := range seen {
				for _, a := range s.Clients {
					visible[a] = true
					shared[a] = shared[a] || !s.Exclusive
				}
			}
			for _, a := range prev.Addrs {
				switch {
				case !visible[a]:
					next.Images[LegacyImage] = appendUnique(next.Images[LegacyImage], a)
				case shared[a]:
					disowned = append(disowned, a)
				}
			}
		}
	}
	for _, s := range seen {
		if !s.Exclusive {
			delete(next.Images, s.Image)
			continue
		}
		as := slices.Clone(s.Watchers)
		sortAddrs(as)
		if len(as) == 0 {
			delete(next.Images, s.Image)
			continue
		}
		next.Images[s.Image] = as
	}
	next.Addrs = nil
	for _, as := range next.Images {
		for _, a := range as {
			next.Addrs = appendUnique(next.Addrs, a)
		}
	}
	sortAddrs(next.Addrs)
	if len(next.Images) == 0 {
		next.Images = nil
	}
	return disowned
}

func sortAddrs(as []Addr) {
	sort.Slice(as, func(i, j int) bool { return as[i].String() < as[j].String() })
}

// writeImageRecords stores c's per-image addresses with their images (one
// object per exclusively written image of imgs). An image record that
// cannot be written is an error: the claim still has the addresses, but a
// later VM of the image would not see them.
func (e *Engine) writeImageRecords(ctx context.Context, w Who, c *Claim, imgs []Image) error {
	var errs []error
	for _, img := range imgs {
		as, ok := c.Images[img.String()]
		if !img.exclusive() || !ok {
			continue
		}
		rec := ImageRecord{Image: img.String(), VM: w.VM, Seq: c.Seq, Host: c.Host, Addrs: as, Updated: e.now().UTC()}
		if err := e.putImageRecord(ctx, img, rec); err != nil {
			errs = append(errs, fmt.Errorf("%s: cannot record its writer in %s/%s: %w", img, img.Pool, ImageRecordObject(img), err))
		}
	}
	return errors.Join(errs...)
}

func (e *Engine) putImageRecord(ctx context.Context, img Image, rec ImageRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	oid := ImageRecordObject(img)
	for attempt := 0; attempt < 5; attempt++ {
		_, ver, err := e.c.ReadObject(ctx, img.Pool, oid)
		if err != nil && !errors.Is(err, ErrObjectNotFound) {
			return err
		}
		err = e.c.WriteObject(ctx, img.Pool, oid, data, ver)
		if !errors.Is(err, ErrStale) {
			return err
		}
	}
	return fmt.Errorf("kept changing under us; retry")
}

// ReadImageRecord returns the image's record, or nil when it has none.
func (e *Engine) ReadImageRecord(ctx context.Context, img Image) (*ImageRecord, error) {
	data, _, err := e.c.ReadObject(ctx, img.Pool, ImageRecordObject(img))
	if errors.Is(err, ErrObjectNotFound) || (err == nil && len(data) == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec ImageRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%s: writer record %s/%s is corrupt (%v): remove it with 'rados -p %s rm %s'", img, img.Pool, ImageRecordObject(img), err, img.Pool, ImageRecordObject(img))
	}
	return &rec, nil
}

// recordedWriters returns the last recorded writers of the images the VM
// writes exclusively (their image records): a start or an attach fences
// them even when they are not visible (they may be another VM's: the image
// moved).
func (e *Engine) recordedWriters(ctx context.Context, imgs []Image) ([]Addr, error) {
	var out []Addr
	// One read per image, at most Concurrency at once (a start's latency).
	recs := make([]*ImageRecord, len(imgs))
	errs := make([]error, len(imgs))
	sem := make(chan struct{}, e.o.Concurrency)
	var wg sync.WaitGroup
	for i, img := range imgs {
		if !img.exclusive() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			recs[i], errs[i] = e.ReadImageRecord(ctx, img)
		}()
	}
	wg.Wait()
	for i, img := range imgs {
		if errs[i] != nil {
			return nil, fmt.Errorf("%s: cannot read its recorded writer: %w", img, errs[i])
		}
		if recs[i] != nil {
			for _, a := range recs[i].Addrs {
				out = appendUnique(out, a)
			}
		}
	}
	return out, nil
}
