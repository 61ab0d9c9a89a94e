//go:build cgo

package ceph

import (
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// QuietLibrados keeps librados' own diagnostics (messenger banners, auth
// retries) off our stderr, which OpenNebula shows as the VM's error and
// libvirt as the hook's: file descriptor 2 is pointed at /dev/null and the
// returned file is the original stderr, for our own one-line messages. Go
// crash output still goes to the original stderr. With RBDFENCE_CEPH_STDERR=1
// nothing is changed (debugging). Call it once, first thing in a main.
func QuietLibrados() *os.File {
	if os.Getenv("RBDFENCE_CEPH_STDERR") == "1" {
		return os.Stderr
	}
	fd, err := unix.Dup(2)
	if err != nil {
		return os.Stderr
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		unix.Close(fd)
		return os.Stderr
	}
	defer null.Close()
	if err := unix.Dup3(int(null.Fd()), 2, 0); err != nil {
		unix.Close(fd)
		return os.Stderr
	}
	unix.CloseOnExec(fd)
	orig := os.NewFile(uintptr(fd), "/dev/stderr")
	_ = debug.SetCrashOutput(orig, debug.CrashOptions{})
	return orig
}
