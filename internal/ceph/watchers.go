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

// listWatchers returns the watchers of one object (rados listwatchers).
func listWatchers(io *rados.IOContext, oid string) ([]engine.Watcher, error) {
	coid := C.CString(oid)
	defer C.free(unsafe.Pointer(coid))
	size := 4096
	for {
		buf := make([]byte, size)
		var needed C.size_t
		ret := C.rbdfence_list_watchers(C.rados_ioctx_t(io.Pointer()), coid, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &needed)
		if ret == -C.int(syscall.ERANGE) && int(needed) > size {
			size = int(needed)
			continue
		}
		if ret < 0 {
			return nil, fmt.Errorf("list watchers of %s: %w", oid, syscall.Errno(-ret))
		}
		return parseWatchers(string(buf[:needed]))
	}
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
