//go:build cgo

package ceph

// #include <stdlib.h>
// #include "breaklock.h"
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"github.com/ceph/go-ceph/rados"
)

// errLockGone is breakLock's error when the image opened but the lock was
// not there (rbd_break_lock returned ENOENT).
var errLockGone = errors.New("lock already gone")

// breakLock breaks one rbd_lock of an image with librbd's rbd_open and
// rbd_break_lock (the cls lock break plus librbd's header update
// notification), loading librbd on first use: start-up pays for librados
// only. A lock already gone is errLockGone.
// Similar To: rbd lock rm POOL/IMAGE COOKIE CLIENT
func breakLock(io *rados.IOContext, image, client, cookie string) error {
	ci, ccl, cck := C.CString(image), C.CString(client), C.CString(cookie)
	defer C.free(unsafe.Pointer(ci))
	defer C.free(unsafe.Pointer(ccl))
	defer C.free(unsafe.Pointer(cck))
	var loadErr *C.char
	var opened C.int
	ret := C.rbdfence_break_lock(C.rados_ioctx_t(io.Pointer()), ci, ccl, cck, &loadErr, &opened)
	switch {
	case ret == 0:
		return nil
	case ret == -C.int(syscall.ENOSYS) && loadErr != nil:
		return fmt.Errorf("loading librbd to break the lock: %s (install librbd1)", C.GoString(loadErr))
	case opened == 0:
		return fmt.Errorf("opening image %s: %w", image, syscall.Errno(-ret))
	case ret == -C.int(syscall.ENOENT):
		return errLockGone
	}
	return fmt.Errorf("breaking the lock of %s %q on %s: %w", client, cookie, image, syscall.Errno(-ret))
}

// librbdLoaded reports whether librbd is loaded in this process.
func librbdLoaded() bool { return C.rbdfence_librbd_loaded() != 0 }
