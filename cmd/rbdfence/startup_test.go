package main

import (
	"debug/elf"
	"os"
	"os/exec"
	"strconv"
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

// TestStartupPackages checks that no package with a costly init is linked into
// rbdfence (the Prometheus client registry registers Go and process collectors
// at init, on every run, metrics configured or not).
func TestStartupPackages(t *testing.T) {
	out, err := exec.Command("go", "list", "-tags", "pacific", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "github.com/prometheus/client_golang/prometheus" {
			t.Errorf("rbdfence links %s: its init runs on every start (write the textfile with prometheus/common/expfmt)", p)
		}
	}
}

// TestStartupInitWork bounds the work every package's init does before main,
// on every run of rbdfence (GODEBUG=inittrace=1 on this test binary, which
// links the same packages): no init may allocate more than 500 objects
// (compile a regexp or build a registry on first use instead). The count of
// allocations is deterministic, unlike the time.
func TestStartupInitWork(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		// init PKG @T ms, T ms clock, B bytes, N allocs
		f := strings.Fields(line)
		if len(f) != 11 || f[0] != "init" || f[10] != "allocs" {
			continue
		}
		n++
		if allocs, err := strconv.Atoi(f[9]); err != nil || allocs > 500 {
			t.Errorf("package %s: init does %s allocations (%s bytes) on every start", f[1], f[9], f[7])
		}
	}
	if n < 20 {
		t.Fatalf("only %d init lines in the trace:\n%s", n, out)
	}
}
