package oned

import "testing"

// TestOpenNebula6 runs the 7.4.0 tests that OpenNebula 6.10.5 must pass
// too on a 6.10.5 front-end (fe610: oned, mm_sched, monitord and
// onehem-server built from release-6.10.5, test/oned/build.sh) with its own
// hosts (rbdo-c, rbdo-d) and Ceph cluster (10.78.0.1:16798): a deploy that
// fences a zombie, a deploy and live migration, a hot-attach that fences a
// zombie. The bodies are the 7.4.0 tests'; the subtests run one after the
// other.
//
// Not parallel: it runs after TestDeployAndLiveMigrate and before the
// parallel 7.4.0 tests, with fe74's oned idle. Beside the 7.4.0 tests (at
// ce2294d) 6.10.5's PROLOG took 1m45s on this 2-core machine and its images
// stayed LOCKED past the waits.
func TestOpenNebula6(t *testing.T) {
	s := Start(t, "fe610")
	// The oned that answers on fe610's port is 6.10.5's (one.system.version).
	if v, err := s.RPC("one.system.version"); err != nil || v != "6.10.5" {
		t.Fatalf("oned of fe610 (port %d) reports version %q (%v), want 6.10.5", s.Port0(), v, err)
	}
	for _, c := range []struct {
		name string
		fn   func(*testing.T, *Stack)
	}{
		{"DeployFencesZombie", testDeployFencesZombie},
		{"DeployAndLiveMigrate", testDeployAndLiveMigrate},
		{"AttachFencesZombie", testAttachFencesZombie},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, s) })
	}
}
