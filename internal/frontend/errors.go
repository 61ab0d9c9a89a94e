package frontend

import (
	"fmt"
	"strings"

	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// Error is a front-end failure. Msg is one line meant for the VM's ERROR
// attribute: it says what happened and what to do, and holds no secrets.
// oned keeps only the first 100 characters of "DEPLOY: " (MIGRATE,
// RESTORE, ATTACHDISK) and the line there (src/vmm/
// VirtualMachineManagerProtocol.cc:43-58, src/vm/VirtualMachine.cc:
// 3092-3097 of release-7.4.0; the whole line is in the VM log) and shows
// it on the VM already, so Msg names no "VM <id>: ", and a refusal's line
// is "rbdfence: refused, nothing fenced: <brief> | <the whole reason>"
// (refusal): its brief says in few words what happened and what to run.
type Error struct {
	Kind outcome.Kind
	VM   int // -1 when unknown
	Msg  string
	// Brief is what happened and what to run in few words
	// (engine.Briefer), for a refusal's headline; "" when the message
	// starts with it.
	Brief string
	// Fenced is what the error knows was fenced, for headed ("nothing
	// fenced": the host binary could not start); "" leaves it to the caller.
	Fenced string
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

// briefErrorf is errorf with a brief for the headline refusal puts on it.
func briefErrorf(kind outcome.Kind, vm int, brief, format string, a ...any) *Error {
	e := errorf(kind, vm, format, a...)
	e.Brief = brief
	return e
}

// Headline starts every refusal's line.
const Headline = "rbdfence: refused, "

// refusal is the *Error of a step that did not let the action go on:
// "rbdfence: refused, <fenced>: <brief> | <detail>", or without the brief
// "rbdfence: refused, <fenced>: <detail>". fenced says what was fenced
// (fencedNote; "fencing unknown" when no answer says). The detail loses a
// host's "VM <vm>: " and "refused, nothing fenced: ", which the headline
// says already.
func refusal(kind outcome.Kind, vm int, fenced, brief, detail string) *Error {
	detail = bare(vm, detail)
	msg := Headline + fenced + ": " + detail
	if brief != "" {
		msg = Headline + fenced + ": " + brief + " | " + detail
	}
	return &Error{Kind: kind, VM: vm, Msg: oneLine(msg), Brief: brief}
}

// bare is a host's reason without what a refusal's headline says already:
// a leading "VM <vm>: " and "refused, nothing fenced: ".
func bare(vm int, msg string) string {
	return strings.TrimPrefix(trimVMPrefix(vm, msg), "refused, nothing fenced: ")
}

// headed is refusal of a *Error that has no headline yet (no answer from a
// host, oned unreadable): fenced says what was fenced. Other errors, and
// one that has its headline, are returned as they are.
func headed(err error, fenced string) error {
	fe, ok := err.(*Error)
	if !ok || strings.HasPrefix(fe.Msg, Headline) {
		return err
	}
	if fe.Fenced != "" {
		fenced = fe.Fenced
	}
	r := refusal(fe.Kind, fe.VM, fenced, fe.Brief, fe.Msg)
	r.Final = fe.Final
	return r
}

// fencingUnknown is the fenced note of a step that gave no answer: the
// host may have fenced before it went silent.
const fencingUnknown = "fencing unknown"

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
