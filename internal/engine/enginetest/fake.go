// Package enginetest holds the conformance suite every engine.Cluster must
// pass (run on the in-memory Fake and on the real Ceph adapter) and the Fake
// itself, which serves fast unit tests of the engine's decision logic only.
package enginetest

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// Fake is an in-memory engine.Cluster with Ceph's semantics as rbdfence
// relies on them: a blocklisted client's watches vanish at once, its lock
// stays until broken; leases and object versions behave like cls_lock and
// RADOS versions.
type Fake struct {
	mu        sync.Mutex
	images    map[string]*fakeImage
	blocklist map[engine.Addr]time.Duration
	objects   map[string]*fakeObject
	nextNonce uint32
	// Fail injects errors: keys "blocklist", "wait", "break", "inspect".
	Fail map[string]error
	// Calls counts calls per method name.
	Calls map[string]int
}

type fakeImage struct {
	lockers  []engine.Locker
	watchers []engine.Watcher
}

type fakeObject struct {
	data    []byte
	version uint64
	lease   string
	until   time.Time
}

// NewFake returns an empty fake cluster.
func NewFake() *Fake {
	return &Fake{images: map[string]*fakeImage{}, blocklist: map[engine.Addr]time.Duration{},
		objects: map[string]*fakeObject{}, nextNonce: 1000, Fail: map[string]error{}, Calls: map[string]int{}}
}

var _ engine.Cluster = (*Fake)(nil)

// CreateImage adds an image.
func (f *Fake) CreateImage(img engine.Image) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.images[img.String()] = &fakeImage{}
}

// Open simulates a client at ip opening img (a watcher); with lock it also
// holds the exclusive lock. It returns the client's address.
func (f *Fake) Open(img engine.Image, ip string, lock bool) engine.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextNonce++
	a, err := engine.ParseAddr(fmt.Sprintf("%s/%d", netip.AddrPortFrom(netip.MustParseAddr(ip), 0), f.nextNonce))
	if err != nil {
		panic(err)
	}
	return f.attach(img, a, lock)
}

// Attach adds an existing client address to img.
func (f *Fake) Attach(img engine.Image, a engine.Addr, lock bool) engine.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attach(img, a, lock)
}

func (f *Fake) attach(img engine.Image, a engine.Addr, lock bool) engine.Addr {
	im := f.images[img.String()]
	gid := int64(a.Nonce)
	im.watchers = append(im.watchers, engine.Watcher{Addr: a, ID: gid, Cookie: uint64(gid)})
	if lock {
		im.lockers = append(im.lockers, engine.Locker{Client: fmt.Sprintf("client.%d", gid), Cookie: fmt.Sprintf("auto %d", gid), Addr: a})
	}
	return a
}

// Hide makes client a invisible on every image, as a zombie cut off from
// Ceph that holds no lock: its watches time out, nothing else shows it.
func (f *Fake) Hide(a engine.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, im := range f.images {
		var ws []engine.Watcher
		for _, w := range im.watchers {
			if w.Addr != a {
				ws = append(ws, w)
			}
		}
		var ls []engine.Locker
		for _, l := range im.lockers {
			if l.Addr != a {
				ls = append(ls, l)
			}
		}
		im.watchers, im.lockers = ws, ls
	}
}

// Blocklisted reports whether a is blocklisted and with which expiry.
func (f *Fake) Blocklisted(a engine.Addr) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.blocklist[a]
	return d, ok
}

func (f *Fake) call(name string) error {
	f.Calls[name]++
	return f.Fail[name]
}

// ImageClients implements engine.Cluster.
func (f *Fake) ImageClients(ctx context.Context, img engine.Image) (engine.Clients, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("inspect"); err != nil {
		return engine.Clients{}, err
	}
	im, ok := f.images[img.String()]
	if !ok {
		return engine.Clients{}, fmt.Errorf("%s: %w", img, engine.ErrImageNotFound)
	}
	var c engine.Clients
	c.Lockers = append(c.Lockers, im.lockers...)
	c.Watchers = append(c.Watchers, im.watchers...)
	return c, nil
}

// Blocklist implements engine.Cluster.
func (f *Fake) Blocklist(ctx context.Context, a engine.Addr, expire time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("blocklist"); err != nil {
		return err
	}
	if !a.Exact() {
		return fmt.Errorf("refusing to blocklist %s", a)
	}
	if _, ok := f.blocklist[a]; !ok {
		f.blocklist[a] = expire
	}
	for _, im := range f.images {
		var keep []engine.Watcher
		for _, w := range im.watchers {
			if w.Addr != a {
				keep = append(keep, w)
			}
		}
		im.watchers = keep
	}
	return nil
}

// WaitForLatestOSDMap implements engine.Cluster.
func (f *Fake) WaitForLatestOSDMap(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.call("wait")
}

// BreakLock implements engine.Cluster.
func (f *Fake) BreakLock(ctx context.Context, img engine.Image, l engine.Locker) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("break"); err != nil {
		return err
	}
	im, ok := f.images[img.String()]
	if !ok {
		return fmt.Errorf("%s: %w", img, engine.ErrImageNotFound)
	}
	var keep []engine.Locker
	for _, x := range im.lockers {
		if x.Client != l.Client || x.Cookie != l.Cookie {
			keep = append(keep, x)
		}
	}
	im.lockers = keep
	return nil
}

func (f *Fake) obj(pool, oid string, create bool) *fakeObject {
	k := pool + "/" + oid
	o, ok := f.objects[k]
	if !ok && create {
		o = &fakeObject{version: 1}
		f.objects[k] = o
	}
	return o
}

// AcquireLease implements engine.Cluster.
func (f *Fake) AcquireLease(ctx context.Context, pool, oid, cookie string, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.obj(pool, oid, true)
	if o.lease != "" && o.lease != cookie && time.Now().Before(o.until) {
		return &engine.LeaseHeldError{Object: pool + "/" + oid, Holder: o.lease}
	}
	o.lease, o.until = cookie, time.Now().Add(d)
	o.version++
	return nil
}

// ReleaseLease implements engine.Cluster.
func (f *Fake) ReleaseLease(ctx context.Context, pool, oid, cookie string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o := f.obj(pool, oid, false); o != nil && o.lease == cookie {
		o.lease = ""
		o.version++
	}
	return nil
}

// ReadObject implements engine.Cluster.
func (f *Fake) ReadObject(ctx context.Context, pool, oid string) ([]byte, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.obj(pool, oid, false)
	if o == nil {
		return nil, 0, engine.ErrObjectNotFound
	}
	return append([]byte(nil), o.data...), o.version, nil
}

// WriteObject implements engine.Cluster.
func (f *Fake) WriteObject(ctx context.Context, pool, oid string, data []byte, version uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.obj(pool, oid, false)
	switch {
	case o == nil && version == 0:
		o = f.obj(pool, oid, true)
	case o == nil || o.version != version:
		return engine.ErrStale
	}
	o.data = append([]byte(nil), data...)
	o.version++
	return nil
}

// ClearObject implements engine.Cluster.
func (f *Fake) ClearObject(ctx context.Context, pool, oid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o := f.obj(pool, oid, false); o != nil {
		o.data = nil
		o.version++
	}
	return nil
}
