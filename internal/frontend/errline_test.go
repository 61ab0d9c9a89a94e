package frontend

import (
	"errors"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// onedError is what oned keeps of a driver's message in the VM's ERROR:
// its first 100 characters (src/vm/VirtualMachine.cc:3092-3097 of
// release-7.4.0).
func onedError(msg string) string {
	if len(msg) > 100 {
		return msg[:100]
	}
	return msg
}

// TestStartRefusalHeadline: a refused start's plain line names no "VM
// <id>: " (oned shows it on the VM), and its first 100 characters say what
// happened, what was fenced and the host's reason, without the host's own
// "VM <id>: ".
func TestStartRefusalHeadline(t *testing.T) {
	s := newStub(t, "premigrate", false)
	res := &StartResult{Host: "node1"}
	for _, tc := range []struct {
		name    string
		restore bool
		resp    *hoststep.Response
		err     error
		want    string // the start of the line, within oned's 100 characters
	}{
		{name: "claimed elsewhere", resp: &hoststep.Response{Op: "start", Kind: outcome.Refused,
			Error: "VM 42: deploy #3 was claimed by host node2 (10.0.0.2) at 2025-01-02T03:04:05Z, not by node1; refusing a second copy"},
			want: "rbdfence refused the start, nothing fenced: deploy #3 was claimed by host node2"},
		{name: "libvirt silent", resp: &hoststep.Response{Op: "start", Kind: outcome.Unavailable,
			Error: "VM 42: cannot tell whether one-42 still runs on node1: libvirt did not answer (timeout); not fencing its recorded instance"},
			want: "rbdfence could not check the start, nothing fenced: cannot tell whether one-42 still runs on node1"},
		{name: "restore refused", restore: true, resp: &hoststep.Response{Op: "start", Kind: outcome.Refused,
			Error: "VM 42: domain one-42 is already running on host node1; not fencing it and not starting a second copy"},
			want: "rbdfence refused the restore, nothing fenced: domain one-42 is already running on host node1"},
		{name: "no answer", err: errorf(outcome.Unavailable, 42, "the start step on host node1 did not answer within timeouts.ssh + timeouts.total (35s)"),
			want: "rbdfence could not check the start: the start step on host node1 did not answer within"},
		{name: "skew", err: skewError(42, "start", &hoststep.SkewError{Host: "node1",
			Why: "its libvirt hook /usr/lib/rbdfence/bin/rbdfence-hook (0300e58) reads claim format 1, older than claim format 2", Fix: "upgrade"}, nil),
			want: "rbdfence refused the start, nothing fenced: host node1's libvirt hook /usr/lib/rbdfence/bin/rbdfence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &hoststep.Request{Op: hoststep.OpStart, VM: 42, Host: "node1", Restore: tc.restore}
			_, err := s.env.finishStart(res, req, tc.resp, tc.err)
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a refusal", err)
			}
			if len(tc.want) > 100 || !strings.HasPrefix(onedError(fe.Msg), tc.want) || strings.Contains(fe.Msg, "VM 42: ") {
				t.Fatalf("plain line %q\nwant it to start with %q (and no \"VM 42: \")", fe.Msg, tc.want)
			}
		})
	}
}

// TestFencedNote: the headline says what the answer reports fenced.
func TestFencedNote(t *testing.T) {
	rec := func(result string) audit.Record { return audit.Record{Result: result} }
	for _, tc := range []struct {
		resp *hoststep.Response
		want string
	}{
		{nil, "nothing fenced"},
		{&hoststep.Response{Audit: []audit.Record{rec("error")}}, "nothing fenced"},
		{&hoststep.Response{Audit: []audit.Record{rec("ok"), rec("error")}}, "1 client fenced"},
		{&hoststep.Response{Audit: []audit.Record{rec("ok"), rec("ok")}}, "2 clients fenced"},
	} {
		if got := fencedNote(tc.resp); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.resp, got, tc.want)
		}
	}
}

// TestHeaded: a headline goes before a message that has none, once.
func TestHeaded(t *testing.T) {
	err := headed(errorf(outcome.Unavailable, 42, "ssh to host node1 failed"), "rbdfence could not check the start")
	var fe *Error
	if !errors.As(err, &fe) || fe.Msg != "rbdfence could not check the start: ssh to host node1 failed" || fe.Kind != outcome.Unavailable {
		t.Fatalf("%v", err)
	}
	if again := headed(err, "rbdfence could not check the start"); again.Error() != err.Error() {
		t.Fatalf("headed twice: %v", again)
	}
	plain := errors.New("x")
	if headed(plain, "h") != plain {
		t.Fatal("a non-*Error changed")
	}
}
