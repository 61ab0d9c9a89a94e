package frontend

import (
	"fmt"
	"strings"

	"github.com/rbdfence/rbdfence/internal/hoststep"
)

// Exit codes of the front-end drivers (see the package documentation).
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitUnavailable = 3
	ExitRefused     = 4
)

// Kind classifies a front-end failure; the drivers map it to an exit code.
type Kind int

// Kinds of failure.
const (
	// KindFailure: a step did not complete (e.g. a foreign client could not
	// be fenced). Never overridden by fence.fail_open.
	KindFailure Kind = iota
	// KindUsage: bad arguments, input or configuration.
	KindUsage
	// KindUnavailable: the check could not be done (Ceph, ssh or oned
	// unreachable, credentials refused). fence.fail_open lets a start go on.
	KindUnavailable
	// KindRefused: the VM's claim refuses the start or migration step.
	KindRefused
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case KindUsage:
		return "usage"
	case KindUnavailable:
		return "unavailable"
	case KindRefused:
		return "refused"
	}
	return "failure"
}

// ExitCode returns the documented exit code of the kind.
func (k Kind) ExitCode() int {
	switch k {
	case KindUsage:
		return ExitUsage
	case KindUnavailable:
		return ExitUnavailable
	case KindRefused:
		return ExitRefused
	}
	return ExitFailure
}

// Error is a front-end failure. Msg is one line meant for the VM's ERROR
// attribute: it says what happened and what to do, and holds no secrets.
type Error struct {
	Kind Kind
	VM   int // -1 when unknown
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// errorf builds an *Error with a one-line message.
func errorf(kind Kind, vm int, format string, a ...any) *Error {
	return &Error{Kind: kind, VM: vm, Msg: oneLine(fmt.Sprintf(format, a...))}
}

// ExitError reports that the wrapped action (remote deploy/restore, the
// original TM script) exited non-zero. Its stderr was relayed as it came;
// the driver exits with Code.
type ExitError struct {
	What string
	Code int
}

func (e *ExitError) Error() string { return fmt.Sprintf("%s exited with code %d", e.What, e.Code) }

// kindOf maps a host-step response kind to a Kind.
func kindOf(k string) Kind {
	switch k {
	case hoststep.KindRefused:
		return KindRefused
	case hoststep.KindCeph:
		return KindUnavailable
	case hoststep.KindUsage:
		return KindUsage
	}
	return KindFailure
}

// oneLine flattens s to one line of at most 1000 bytes.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 1000 {
		s = s[:1000] + "..."
	}
	return s
}
