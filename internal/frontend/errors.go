package frontend

import (
	"fmt"
	"strings"

	"github.com/rbdfence/rbdfence/internal/outcome"
)

// Error is a front-end failure. Msg is one line meant for the VM's ERROR
// attribute: it says what happened and what to do, and holds no secrets.
type Error struct {
	Kind outcome.Kind
	VM   int // -1 when unknown
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Outcome is the error's kind (internal/outcome): the driver's exit code.
func (e *Error) Outcome() outcome.Kind { return e.Kind }

// errorf builds an *Error with a one-line message.
func errorf(kind outcome.Kind, vm int, format string, a ...any) *Error {
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
