//go:build cgo

package ceph

// #cgo LDFLAGS: -lrados -lstdc++
// #cgo CXXFLAGS: -std=c++17
// #include <stdlib.h>
// #include "clients.h"
import "C"

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/ceph/go-ceph/rados"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// cArgs holds C copies of ioctx pointers and object names for one batch call.
type cArgs struct {
	ios  *C.rados_ioctx_t
	oids **C.char
	rc   *C.int
	n    int
}

func newCArgs(ios []*rados.IOContext, oids []string) *cArgs {
	n := len(oids)
	a := &cArgs{n: n}
	a.ios = (*C.rados_ioctx_t)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.rados_ioctx_t(nil)))))
	a.oids = (**C.char)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	a.rc = (*C.int)(C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(C.int(0)))))
	cios, coids := unsafe.Slice(a.ios, n), unsafe.Slice(a.oids, n)
	for i := range oids {
		cios[i] = C.rados_ioctx_t(ios[i].Pointer())
		coids[i] = C.CString(oids[i])
	}
	return a
}

func (a *cArgs) free() {
	for _, p := range unsafe.Slice(a.oids, a.n) {
		C.free(unsafe.Pointer(p))
	}
	C.free(unsafe.Pointer(a.ios))
	C.free(unsafe.Pointer(a.oids))
	C.free(unsafe.Pointer(a.rc))
}

// results returns the shim's per-object results (rc).
func (a *cArgs) results() []int {
	out := make([]int, a.n)
	for i, r := range unsafe.Slice(a.rc, a.n) {
		out[i] = int(r)
	}
	return out
}

// takeOut copies and frees a buffer the shim malloc'd.
func takeOut(p *C.char, n C.size_t) string {
	if p == nil {
		return ""
	}
	defer C.free(unsafe.Pointer(p))
	return C.GoStringN(p, C.int(n))
}

// readObjects reads up to maxlen bytes of every oids[i] in ios[i], window
// at once (one round trip when all fit): data[i], or errs[i] (a
// syscall.Errno).
func readObjects(ios []*rados.IOContext, oids []string, window, maxlen int) (data [][]byte, errs []error) {
	if len(oids) == 0 {
		return nil, nil
	}
	a := newCArgs(ios, oids)
	defer a.free()
	var out *C.char
	var outlen C.size_t
	if r := C.rbdfence_read_objects(a.ios, a.oids, C.int(a.n), C.int(max(window, 1)), C.size_t(maxlen), a.rc, &out, &outlen); r < 0 {
		return nil, repeat(fmt.Errorf("reading %d objects: %w", a.n, syscall.Errno(-r)), a.n)
	}
	all := takeOut(out, outlen)
	data, errs = make([][]byte, a.n), make([]error, a.n)
	for i, r := range a.results() {
		if r < 0 {
			errs[i] = syscall.Errno(-r)
			continue
		}
		if r > len(all) {
			errs[i] = fmt.Errorf("reading %s: short result", oids[i])
			continue
		}
		data[i], all = []byte(all[:r]), all[r:]
	}
	return data, errs
}

// headersClients returns the holders of lock on every oids[i] in ios[i] and
// their watchers (rados lock info + rados listwatchers): one compound read
// per object, window at once (one round trip when all fit).
func headersClients(ios []*rados.IOContext, oids []string, lock string, window int) (ls [][]rawLocker, ws [][]engine.Watcher, errs []error) {
	if len(oids) == 0 {
		return nil, nil, nil
	}
	a := newCArgs(ios, oids)
	defer a.free()
	clock := C.CString(lock)
	defer C.free(unsafe.Pointer(clock))
	lens := (*C.int)(C.calloc(C.size_t(a.n), C.size_t(unsafe.Sizeof(C.int(0)))))
	defer C.free(unsafe.Pointer(lens))
	var out, locks *C.char
	var outlen, lockslen C.size_t
	if r := C.rbdfence_headers_clients(a.ios, a.oids, clock, C.int(a.n), C.int(max(window, 1)), a.rc, lens, &out, &outlen, &locks, &lockslen); r < 0 {
		return nil, nil, repeat(fmt.Errorf("lockers and watchers of %d objects: %w", a.n, syscall.Errno(-r)), a.n)
	}
	text, bin := takeOut(out, outlen), takeOut(locks, lockslen)
	ws, werr := parseIndexedWatchers(text, a.n)
	ls, errs = make([][]rawLocker, a.n), make([]error, a.n)
	for i, r := range a.results() {
		n := int(unsafe.Slice(lens, a.n)[i])
		if n < 0 || n > len(bin) {
			errs[i] = fmt.Errorf("lock info of %s: bad length %d", oids[i], n)
			continue
		}
		info := bin[:n]
		bin = bin[n:]
		switch {
		case r < 0:
			errs[i] = syscall.Errno(-r)
		case werr != nil:
			errs[i] = werr
		default:
			ls[i], errs[i] = decodeLockInfo([]byte(info))
		}
	}
	return ls, ws, errs
}

func repeat(err error, n int) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// rawLocker is one cls_lock holder as librados prints it.
type rawLocker struct{ client, cookie, addr string }

// parseIndexedWatchers reads the shim's "I\taddr\tgid\tcookie" lines for n
// objects.
func parseIndexedWatchers(s string, n int) ([][]engine.Watcher, error) {
	ws := make([][]engine.Watcher, n)
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		idx, rest, _ := strings.Cut(line, "\t")
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 || i >= n {
			return nil, fmt.Errorf("watcher line %q: bad index", line)
		}
		w, err := parseWatchers(rest)
		if err != nil {
			return nil, err
		}
		ws[i] = append(ws[i], w...)
	}
	return ws, nil
}

// parseWatchers reads the shim's "addr\tgid\tcookie" lines.
func parseWatchers(s string) ([]engine.Watcher, error) {
	var out []engine.Watcher
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("watcher line %q", line)
		}
		a, err := engine.ParseAddr(f[0])
		if err != nil {
			return nil, err
		}
		id, err1 := strconv.ParseInt(f[1], 10, 64)
		cookie, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("watcher line %q", line)
		}
		out = append(out, engine.Watcher{Addr: a, ID: id, Cookie: cookie})
	}
	return out, nil
}
