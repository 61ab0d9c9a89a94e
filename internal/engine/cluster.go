package engine

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Image names an RBD image the engine inspects, with the VM's intent for it.
type Image struct {
	Pool      string `json:"pool"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Shareable images may have several writers: clients are reported, never fenced.
	Shareable bool `json:"shareable,omitempty"`
	// ReadOnly images are not written by the VM; their clients are reported
	// (decision "readonly"), never fenced.
	ReadOnly bool `json:"readonly,omitempty"`
}

// String returns "pool/name" or "pool/namespace/name".
func (i Image) String() string {
	if i.Namespace != "" {
		return i.Pool + "/" + i.Namespace + "/" + i.Name
	}
	return i.Pool + "/" + i.Name
}

// Locker is a holder of an image lock (for exclusive-lock: cookie "auto <handle>").
type Locker struct {
	Client string // "client.<gid>"
	Cookie string
	Addr   Addr
}

// Watcher is a client that has the image open (a watch on its header).
type Watcher struct {
	Addr   Addr
	ID     int64 // the client's global id (client.<ID>)
	Cookie uint64
}

// Clients are the lockers and watchers of one image, without our own client.
type Clients struct {
	Lockers  []Locker
	Watchers []Watcher
}

// Cluster is the narrow set of Ceph operations the engine needs. The real
// adapter (internal/ceph) satisfies it; every method is bounded in time by the
// adapter's configured timeouts and by ctx.
//
// Error contract: ImageClients returns ErrImageNotFound (wrapped) for a
// missing image; AcquireLease returns *LeaseHeldError when another cookie
// holds the lease; ReadObject returns ErrObjectNotFound for a missing object;
// WriteObject returns ErrStale when the object's version is not the one given.
type Cluster interface {
	// ImageClients lists the image's lockers and watchers, minus our own client.
	ImageClients(ctx context.Context, img Image) (Clients, error)
	// Blocklist adds the exact address to the OSD blocklist for expire.
	// Re-adding an existing entry succeeds and leaves its expiry unchanged.
	Blocklist(ctx context.Context, addr Addr, expire time.Duration) error
	// WaitForLatestOSDMap returns once our client has the newest OSD map.
	WaitForLatestOSDMap(ctx context.Context) error
	// BreakLock breaks one lock on the image; a lock already gone is not an error.
	BreakLock(ctx context.Context, img Image, l Locker) error

	// AcquireLease takes an exclusive lease on object oid in pool that lasts d
	// even if our process dies. Re-acquiring with the same cookie renews it.
	AcquireLease(ctx context.Context, pool, oid, cookie string, d time.Duration) error
	// ReleaseLease gives the lease up; a lease already gone is not an error.
	ReleaseLease(ctx context.Context, pool, oid, cookie string) error
	// ReadObject returns the object's data and version.
	ReadObject(ctx context.Context, pool, oid string) ([]byte, uint64, error)
	// WriteObject replaces the object's data if its version is still version.
	WriteObject(ctx context.Context, pool, oid string, data []byte, version uint64) error
	// ClearObject empties the object (it reads as no data afterwards); a
	// missing object is not an error. Callers hold its lease.
	ClearObject(ctx context.Context, pool, oid string) error
}

// ImagesLister is implemented by a Cluster that lists the clients of many
// images at once more cheaply than one by one (the Ceph adapter reads all
// images in two round trips). The engine uses it when present. The results
// are ImageClients' for each image, in order; concurrency bounds how many
// images are inspected at once.
type ImagesLister interface {
	ImagesClients(ctx context.Context, imgs []Image, concurrency int) ([]Clients, []error)
}

// Errors of the Cluster contract.
var (
	ErrImageNotFound  = errors.New("image not found")
	ErrObjectNotFound = errors.New("object not found")
	ErrStale          = errors.New("object changed since it was read")
)

// LeaseHeldError says who holds a lease we could not take.
type LeaseHeldError struct {
	Object string
	Holder string // the holder's cookie: "host=... run=... seq=..."
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("lease %s is held by %s", e.Object, e.Holder)
}
