package ceph

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// TestBriefsFit: the Ceph errors a host step refuses with say in at most
// engine.BriefMax characters what happened and what to check.
func TestBriefsFit(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{&ConnectError{User: "libvirt", Errno: int(syscall.EACCES)}, "key and caps"},
		{&ConnectError{User: "libvirt", Err: &UnresolvedError{Name: "mon1", Err: errors.New("no such host")}}, "mon_host"},
		{&ConnectError{User: "libvirt", Err: context.DeadlineExceeded}, "network"},
		{&ConnectError{User: "libvirt", Err: errors.New("x")}, "mon_host"},
		{&CapError{User: "libvirt", What: "blocklist", Need: RMCap}, "grant"},
	} {
		b := engine.BriefOf(c.err)
		if b == "" || len(b) > engine.BriefMax || !strings.Contains(b, c.want) {
			t.Errorf("%v: brief %q (%d characters), want at most %d naming %q", c.err, b, len(b), engine.BriefMax, c.want)
		}
	}
}
