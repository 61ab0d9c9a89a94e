package oned

import (
	"flag"
	"os"
	"testing"
)

// TestMain runs the suite's tests all at once unless -test.parallel is
// given: they spend their time waiting on oned, its drivers and QEMU, each
// test on its own VMs (the host-failure tests on the stack's victim host,
// one after the other), so go test's default of GOMAXPROCS (2 here) would
// only line them up.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "16")
	}
	os.Exit(m.Run())
}
