package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// SystemLockPath orders the tests that install packages into the machine
// itself (test/packaging: the rbdfence-host package puts a libvirt hook that
// acts on every domain into /etc/libvirt/hooks/qemu.d) against the tests that
// start domains in the machine's libvirtd (test/libvirt's StartLibvirt). It
// is under /run/rbdfence-test, which test/machine.sh removes with the rest.
const SystemLockPath = "/run/rbdfence-test/system.lock"

// SystemLockWait bounds the wait for the system lock.
const SystemLockWait = 30 * time.Minute

var (
	sharedOnce sync.Once
	sharedErr  error
	sharedFile *os.File // held open, shared, until the process ends
)

// ShareSystem takes the system lock shared for the rest of the test process
// (every user of the machine's libvirtd): it waits while a package test holds
// it exclusively.
func ShareSystem(t T) {
	t.Helper()
	sharedOnce.Do(func() { sharedFile, sharedErr = lockSystem(syscall.LOCK_SH) })
	if sharedErr != nil {
		t.Fatalf("%s (shared): %v", SystemLockPath, sharedErr)
	}
}

// OwnSystem takes the system lock exclusively until t's cleanup: no test
// process uses the machine's libvirtd meanwhile.
func OwnSystem(t T) {
	t.Helper()
	f, err := lockSystem(syscall.LOCK_EX)
	if err != nil {
		t.Fatalf("%s (exclusive): %v", SystemLockPath, err)
	}
	t.Cleanup(func() { f.Close() })
}

func lockSystem(how int) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(SystemLockPath), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(SystemLockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(SystemLockWait)
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}
