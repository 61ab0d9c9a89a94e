//go:build cgo

package ceph

// #cgo LDFLAGS: -lrados -lstdc++
// #cgo CXXFLAGS: -std=c++17
// #include <stdlib.h>
// #include "watchers.h"
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

// rawLocker is one cls_lock holder as librados prints it.
type rawLocker struct{ client, cookie, addr string }

// headerClients returns the holders of lock on oid and its watchers, read
// together in one cgo call and one round trip (rados lock list + rados
// listwatchers).
func headerClients(io *rados.IOContext, oid, lock string) ([]rawLocker, []engine.Watcher, error) {
	coid, clock := C.CString(oid), C.CString(lock)
	defer C.free(unsafe.Pointer(coid))
	defer C.free(unsafe.Pointer(clock))
	size := 4096
	for {
		buf := make([]byte, size)
		var needed C.size_t
		ret := C.rbdfence_header_clients(C.rados_ioctx_t(io.Pointer()), coid, clock, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &needed)
		if ret == -C.int(syscall.ERANGE) && int(needed) > size {
			size = int(needed)
			continue
		}
		if ret < 0 {
			return nil, nil, fmt.Errorf("lockers and watchers of %s: %w", oid, syscall.Errno(-ret))
		}
		return parseHeaderClients(string(buf[:needed]))
	}
}

// parseHeaderClients reads the shim's "L\tclient\tcookie\taddr" and
// "W\taddr\tgid\tcookie" lines.
func parseHeaderClients(s string) ([]rawLocker, []engine.Watcher, error) {
	var ls []rawLocker
	var ws strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		kind, rest, _ := strings.Cut(line, "\t")
		switch kind {
		case "":
			continue
		case "L":
			f := strings.Split(rest, "\t")
			if len(f) != 3 {
				return nil, nil, fmt.Errorf("locker line %q", line)
			}
			ls = append(ls, rawLocker{client: f[0], cookie: f[1], addr: f[2]})
		case "W":
			ws.WriteString(rest + "\n")
		default:
			return nil, nil, fmt.Errorf("header client line %q", line)
		}
	}
	w, err := parseWatchers(ws.String())
	return ls, w, err
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
