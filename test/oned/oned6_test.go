package oned

import "testing"

// TestOpenNebula6 runs the 7.4.0 suite's tests that OpenNebula 6.10.5 must
// pass too, on a 6.10.5 front-end (oned, mm_sched, monitord, onehem-server
// built from its own tarball, test/oned/build.sh) with its own hosts
// (rbdo-c, rbdo-d; rbdo-f as the failing host): deploy with a zombie, live
// migration, hot-attach and the HA hook. The bodies are the 7.4.0 tests';
// one after the other on this stack, beside the 7.4.0 tests.
func TestOpenNebula6(t *testing.T) {
	t.Parallel()
	s := Start(t, "fe610")
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *Stack)
	}{
		{"DeployAndLiveMigrate", testDeployAndLiveMigrate},
		{"DeployFencesZombie", testDeployFencesZombie},
		{"AttachFencesZombie", testAttachFencesZombie},
		{"HostErrorHookFencesAndReschedules", testHostErrorHookFencesAndReschedules},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, s) })
	}
}
