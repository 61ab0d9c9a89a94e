package main

import (
	"debug/elf"
	"os"
	"strings"
	"testing"
)

// TestStartupLinksOnlyLibrados checks what every run of rbdfence pays before
// main: the dynamic libraries it needs. This test binary links the same
// packages as rbdfence. librbd (and, through it, libcryptsetup, libdevmapper,
// libssl, ...) is loaded only when a lock is broken, never at start-up.
func TestStartupLinksOnlyLibrados(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	var rados bool
	for _, l := range libs {
		if strings.HasPrefix(l, "librbd.") {
			t.Errorf("rbdfence needs %s at start-up (DT_NEEDED %v): librbd must be loaded only to break a lock", l, libs)
		}
		rados = rados || strings.HasPrefix(l, "librados.")
	}
	if !rados {
		t.Errorf("librados is not among the needed libraries %v: is this a cgo build?", libs)
	}
}
