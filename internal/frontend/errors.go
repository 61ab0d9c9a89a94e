package frontend

import (
	"fmt"
	"strings"

	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// Error is a front-end failure. Msg is one line meant for the VM's ERROR
// attribute: it says what happened and what to do, and holds no secrets.
// oned keeps only its first 100 characters there (src/vm/VirtualMachine.cc:
// 3092-3097 of release-7.4.0; the whole line is in the VM log) and shows it
// on the VM already, so Msg names no "VM <id>: " and a refusal starts with
// what happened and what was fenced ("rbdfence refused the start, nothing
// fenced: ..."), the reason after it.
type Error struct {
	Kind outcome.Kind
	VM   int // -1 when unknown
	Msg  string
	// Final: fence.fail_open never passes it, whatever its kind (a host
	// whose hook would misread the claim: hoststep.SkewError).
	Final bool
}

func (e *Error) Error() string { return e.Msg }

// Outcome is the error's kind (internal/outcome): the driver's exit code.
func (e *Error) Outcome() outcome.Kind { return e.Kind }

// errorf builds an *Error with a one-line message.
func errorf(kind outcome.Kind, vm int, format string, a ...any) *Error {
	return &Error{Kind: kind, VM: vm, Msg: oneLine(fmt.Sprintf(format, a...))}
}

// headed puts head before the message of a *Error that has no headline of
// its own yet (one that starts with "rbdfence "): "rbdfence could not
// check the start: " + what went wrong. Other errors are returned as they
// are.
func headed(err error, head string) error {
	fe, ok := err.(*Error)
	if !ok || strings.HasPrefix(fe.Msg, "rbdfence ") {
		return err
	}
	c := *fe
	c.Msg = oneLine(head + ": " + fe.Msg)
	return &c
}

// fencedClients counts the clients a host step's answer reports fenced
// (its audit records that succeeded; a failed step reports what it fenced
// before it stopped).
func fencedClients(resp *hoststep.Response) int {
	if resp == nil {
		return 0
	}
	n := 0
	for _, r := range resp.Audit {
		if r.Result == "ok" {
			n++
		}
	}
	return n
}

// fencedNote says what a host step's answer fenced, for a headline:
// "nothing fenced", "1 client fenced", "3 clients fenced".
func fencedNote(resp *hoststep.Response) string {
	switch n := fencedClients(resp); n {
	case 0:
		return "nothing fenced"
	case 1:
		return "1 client fenced"
	default:
		return fmt.Sprintf("%d clients fenced", n)
	}
}

// ExitError reports that the wrapped action (remote deploy/restore, the
// original TM script) exited non-zero. Its stderr was relayed as it came;
// the driver exits with Code.
type ExitError struct {
	What string
	Code int
}

func (e *ExitError) Error() string { return fmt.Sprintf("%s exited with code %d", e.What, e.Code) }

// oneLine flattens s to one line of at most 1000 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 1000 {
		s = s[:1000] + "..."
	}
	return s
}

// clip shortens s for messages and keeps it on one line.
func clip(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "no error output"
	}
	return s
}
