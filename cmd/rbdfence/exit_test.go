package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// TestExitCode: the CLI exits with the code of its error's kind: for every
// kind of internal/outcome, and for the typed errors it meets.
func TestExitCode(t *testing.T) {
	type tc struct {
		name string
		err  error
		want int
	}
	tests := []tc{
		{"nil", nil, 0},
		{"found, silent", errFound, 5},
		{"usage", usagef("check: no image"), 2},
		{"config", &configError{errors.New("fence.expire: bad")}, 2},
		{"ceph connect", fmt.Errorf("open: %w", &ceph.ConnectError{MonHost: "127.0.0.1:1", User: "libvirt", Err: errors.New("timed out")}), 3},
		{"ceph cap", &ceph.CapError{User: "libvirt", What: "remove blocklist entries", Need: ceph.RMCap}, 3},
		{"claim held", &engine.ClaimHeldError{VM: 1, Holder: "x"}, 4},
		{"incomplete", &engine.IncompleteError{Problems: []string{"one/x: gone"}}, 1},
		{"untyped", errors.New("boom"), 1},
	}
	for _, k := range outcome.All() {
		if k == outcome.OK {
			continue
		}
		tests = append(tests,
			tc{"kind " + k.String(), outcome.Errorf(k, "a %s error", k), k.Code()},
			tc{"host step " + k.String(), &hostStepError{&hoststep.Response{Op: "start", Kind: k, Error: "host says " + k.String()}}, k.Code()})
	}
	for _, tc := range tests {
		var stderr bytes.Buffer
		if got := exitCode(tc.err, &stderr); got != tc.want {
			t.Errorf("%s: exit %d, want %d", tc.name, got, tc.want)
		}
		lines := strings.Count(stderr.String(), "\n")
		if silent := tc.err == nil || tc.err == errFound; (silent && lines != 0) || (!silent && lines != 1) {
			t.Errorf("%s: stderr %q", tc.name, stderr.String())
		}
	}
}
