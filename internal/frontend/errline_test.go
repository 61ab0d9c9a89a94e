package frontend

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// onedError is what oned keeps of a driver's message in the VM's ERROR:
// the first 100 characters of "<ACTION>: <message>" (src/vmm/
// VirtualMachineManagerProtocol.cc:43-58 and src/vm/VirtualMachine.cc:
// 3092-3097 of release-7.4.0).
func onedError(action, msg string) string {
	s := action + ": " + msg
	if len(s) > 100 {
		return s[:100]
	}
	return s
}

// TestStartRefusalHeadline: every refusal of a start (each engine
// refusal, as a host answers it, a host that gives no answer, a host too
// old) keeps in oned's ERROR "rbdfence: refused, <what was fenced>: " and
// the whole brief, what happened and what to run, and names no "VM <id>: ".
func TestStartRefusalHeadline(t *testing.T) {
	s := newStub(t, "premigrate", false)
	res := &StartResult{Host: "node1"}
	c := engine.Claim{Seq: 12, Host: "node2", Source: engine.SourceFrontend}
	answer := func(kind outcome.Kind, err error) *hoststep.Response {
		return &hoststep.Response{Op: "start", Kind: kind, Error: err.Error(), Brief: engine.BriefOf(err)}
	}
	type row struct {
		name    string
		restore bool
		resp    *hoststep.Response
		err     error
		want    string // what oned's ERROR must hold, after "DEPLOY: "
	}
	var rows []row
	for _, e := range []error{
		&engine.ClaimHeldError{VM: 42, Holder: "host=node2"},
		&engine.NewerDeployError{VM: 42, Ours: 11, Recorded: c},
		&engine.UnknownDeployError{VM: 42, Ours: 13, Recorded: c},
		&engine.ClaimedElsewhereError{VM: 42, Host: "node1", Recorded: c},
		&engine.AlreadyRunningError{VM: 42, Host: "node1", Domain: "one-42", State: "running"},
		&engine.DomainUnknownError{VM: 42, Host: "node1", Domain: "one-42", Said: "did not answer (timeout)"},
		&engine.MigrationOpenError{VM: 42, Host: "node1", Recorded: engine.Claim{Seq: 12, Host: "node2", Window: &engine.Window{Src: "node2", Dst: "node3", Seq: 12}}},
		&engine.UnknownClaimError{VM: 42, Recorded: c},
		&engine.OtherVMError{VM: 42, Recorded: c},
		&engine.LeaseHeldError{Object: "one/rbdfence.claim.42", Holder: "x"},
	} {
		rows = append(rows, row{name: fmt.Sprintf("%T", e), resp: answer(outcome.Refused, e), want: "rbdfence: refused, nothing fenced: " + engine.BriefOf(e)})
	}
	rows = append(rows,
		row{name: "restore refused", restore: true, resp: answer(outcome.Refused, &engine.AlreadyRunningError{VM: 42, Host: "node1", Domain: "one-42", State: "running"}),
			want: "rbdfence: refused, nothing fenced: runs on node1 already; use onevm recover --success"},
		row{name: "incomplete fence", resp: &hoststep.Response{Op: "start", Kind: outcome.Failure, Error: (&engine.IncompleteError{Problems: []string{"x"}}).Error(),
			Brief: (&engine.IncompleteError{Problems: []string{"x"}}).Brief(), Audit: []audit.Record{{Result: "ok"}}},
			want: "rbdfence: refused, 1 client fenced: fence incomplete (1 problems); see the VM log"},
		row{name: "no answer", err: briefErrorf(outcome.Unavailable, 42, "node1 did not answer in 35s; retry", "the start step on host node1 did not answer within timeouts.ssh + timeouts.total (35s)"),
			want: "rbdfence: refused, fencing unknown: node1 did not answer in 35s; retry"},
		row{name: "skew", err: skewError(42, "start", &hoststep.SkewError{Host: "node1",
			Why: "its libvirt hook /usr/lib/rbdfence/bin/rbdfence-hook (0300e58) reads claim format 1, older than claim format 2", Fix: "upgrade"}, nil),
			want: "rbdfence: refused, nothing fenced: node1's rbdfence is too old; upgrade, onehost sync"},
	)
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			req := &hoststep.Request{Op: hoststep.OpStart, VM: 42, Host: "node1", Restore: tc.restore}
			_, err := s.env.finishStart(res, req, tc.resp, tc.err)
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("error %v, want a refusal", err)
			}
			action := "DEPLOY"
			if tc.restore {
				action = "RESTORE"
			}
			if shown := onedError(action, fe.Msg); !strings.HasPrefix(shown, action+": "+tc.want) || strings.Contains(fe.Msg, "VM 42: ") ||
				strings.Count(fe.Msg, "refused") > 1 {
				t.Fatalf("oned's ERROR %q\nwant it to start with %q (and no \"VM 42: \", one \"refused\")\nline: %s", shown, action+": "+tc.want, fe.Msg)
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
	err := headed(briefErrorf(outcome.Unavailable, 42, "ssh to node1 failed; fix ssh, then retry", "ssh to host node1 failed"), fencingUnknown)
	var fe *Error
	if !errors.As(err, &fe) || fe.Msg != "rbdfence: refused, fencing unknown: ssh to node1 failed; fix ssh, then retry | ssh to host node1 failed" || fe.Kind != outcome.Unavailable {
		t.Fatalf("%v", err)
	}
	if again := headed(err, fencingUnknown); again.Error() != err.Error() {
		t.Fatalf("headed twice: %v", again)
	}
	plain := errors.New("x")
	if headed(plain, "h") != plain {
		t.Fatal("a non-*Error changed")
	}
}
