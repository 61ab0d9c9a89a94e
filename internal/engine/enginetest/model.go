package enginetest

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// Helpers for the model-based test of the claim protocol
// (internal/engine/model_test.go): it explores many states of one Fake, so it
// needs to copy one, to let leases run out without waiting, and to compare
// two Fakes by what the engine can observe.

// Clone returns an independent copy of f (injected failures and call counts
// are not copied).
func (f *Fake) Clone() *Fake {
	f.mu.Lock()
	defer f.mu.Unlock()
	g := NewFake()
	g.nextNonce = f.nextNonce
	for k, im := range f.images {
		g.images[k] = &fakeImage{
			lockers:  append([]engine.Locker(nil), im.lockers...),
			watchers: append([]engine.Watcher(nil), im.watchers...),
		}
	}
	for a, d := range f.blocklist {
		g.blocklist[a] = d
	}
	for k, o := range f.objects {
		c := *o
		c.data = append([]byte(nil), o.data...)
		g.objects[k] = &c
	}
	return g
}

// ExpireLeases makes every lease run out now, as if its duration had passed
// (a holder that died never releases it).
func (f *Fake) ExpireLeases() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.objects {
		if o.lease != "" {
			o.until = time.Time{}
		}
	}
}

// LeaseHeld reports whether object oid in pool has a lease that has not run out.
func (f *Fake) LeaseHeld(pool, oid string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	o := f.obj(pool, oid, false)
	return o != nil && o.lease != "" && time.Now().Before(o.until)
}

// BlocklistedAddrs returns every blocklisted address, sorted.
func (f *Fake) BlocklistedAddrs() []engine.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]engine.Addr, 0, len(f.blocklist))
	for a := range f.blocklist {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Object returns the data of object oid in pool (nil when absent).
func (f *Fake) Object(pool, oid string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o := f.obj(pool, oid, false); o != nil {
		return append([]byte(nil), o.data...)
	}
	return nil
}

// Observable describes the images' clients and the blocklist in a canonical
// form (objects are left to the caller, who knows what in them matters).
func (f *Fake) Observable() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	keys := make([]string, 0, len(f.images))
	for k := range f.images {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		im := f.images[k]
		var ws, ls []string
		for _, w := range im.watchers {
			ws = append(ws, w.Addr.String())
		}
		for _, l := range im.lockers {
			ls = append(ls, l.Addr.String())
		}
		sort.Strings(ws)
		sort.Strings(ls)
		fmt.Fprintf(&b, "%s w%v l%v;", k, ws, ls)
	}
	var bl []string
	for a := range f.blocklist {
		bl = append(bl, a.String())
	}
	sort.Strings(bl)
	fmt.Fprintf(&b, "bl%v", bl)
	return b.String()
}

// Unwatch drops client a's watches on every image, as when it is cut off
// from Ceph: the watches time out, the locks it holds stay until broken.
func (f *Fake) Unwatch(a engine.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, im := range f.images {
		var ws []engine.Watcher
		for _, w := range im.watchers {
			if w.Addr != a {
				ws = append(ws, w)
			}
		}
		im.watchers = ws
	}
}

// ObjectVersion returns the version of object oid in pool (0 when absent).
func (f *Fake) ObjectVersion(pool, oid string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if o := f.obj(pool, oid, false); o != nil {
		return o.version
	}
	return 0
}
