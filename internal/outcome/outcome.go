// Package outcome names how a run of rbdfence ends, once for every binary:
// the CLI (cmd/rbdfence), the libvirt hook, the front-end drivers and the
// host-step JSON all map an error to a Kind here and exit with its code.
//
// Adding a kind is one change in this file: a constant and its row in
// table (wire name, exit code, meaning). Adding a typed error of an
// existing kind is one row in classes (or an Outcome method on the error).
// The README's exit table is Markdown() (a test keeps them equal).
//
// The package is pure Go (the front-end drivers use it without cgo).
package outcome

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// Kind is how a run ended.
type Kind int

// Kinds. The zero value is OK.
const (
	// OK: the start (or migration step) may go on; clean, or every foreign
	// client fenced.
	OK Kind = iota
	// Failure: a step did not complete (e.g. a foreign client could not be
	// fenced). Never overridden by fence.fail_open.
	Failure
	// Usage: bad arguments, input or configuration.
	Usage
	// Unavailable: the check could not be done (Ceph, ssh or oned
	// unreachable, credentials refused). fence.fail_open lets a start go on.
	Unavailable
	// Refused: the VM's claim refuses the start or migration step.
	Refused
	// Found: `rbdfence check` found foreign clients that fence would fence
	// (CLI only).
	Found
)

// info is one row of the outcome table.
type info struct {
	name    string // stable name: host-step JSON "kind", metrics label
	code    int    // exit code
	meaning string // the README's exit table
}

// table is the one outcome table, indexed by Kind.
var table = []info{
	OK:      {"", 0, "the start (or migration step) may go on; `check`: clean; `fence`: every foreign client fenced"},
	Failure: {"failure", 1, "a check, fence or step did not complete (the message names the image and client)"},
	Usage:   {"usage", 2, "bad arguments, input or configuration (unknown VM, malformed stdin, bad domain XML; the message names the key)"},
	// "ceph" is the name hosts and front-ends of every version exchange.
	Unavailable: {"ceph", 3, "the check could not be done: Ceph (or ssh, oned, libvirt) unreachable, credentials refused (`fence.fail_open: true` lets a start go on)"},
	Refused:     {"refused", 4, "refused by the VM's claim (another run holds it, a newer deploy, another host, no handover for an incoming migration) or because the VM already runs on the host; `fence-host`: the host is not failed (not ERROR/OFFLINE, or still reports)"},
	Found:       {"found", 5, "CLI `check` only: foreign clients found that `fence` would fence"},
}

// classes classify the typed errors that do not say their kind themselves
// (the engine and the oned client import nothing of ours). The first match
// wins.
var classes = []struct {
	kind  Kind
	match func(error) bool
}{
	{Refused, is[*engine.ClaimHeldError]},
	{Refused, is[*engine.NewerDeployError]},
	{Refused, is[*engine.ClaimedElsewhereError]},
	{Refused, is[*engine.StartedAgainError]},
	{Refused, is[*engine.NoHandoverError]},
	{Refused, is[*engine.AlreadyRunningError]},
	{Refused, is[*engine.MigrationOpenError]},
	// No answer from libvirt is no knowledge: retry once it answers.
	{Unavailable, is[*engine.DomainUnknownError]},
	{Unavailable, is[*engine.MigrationUnknownError]},
	// oned: an unknown VM or host is bad input; oned out of reach or
	// refusing our credentials means the check cannot be done.
	{Usage, isErr(opennebula.ErrNotFound)},
	{Unavailable, isErr(opennebula.ErrUnreachable)},
	{Unavailable, isErr(opennebula.ErrAuthentication)},
	{Unavailable, isErr(opennebula.ErrAuthorization)},
}

func isErr(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func is[T error](err error) bool {
	var t T
	return errors.As(err, &t)
}

// Kinder is an error that knows its kind (the binaries' own errors, the
// Ceph adapter's connection and capability errors).
type Kinder interface {
	Outcome() Kind
}

// Of classifies err: OK for nil; the kind of the outermost error in its
// chain that says its own (Kinder); else a typed error of classes; else
// Failure.
func Of(err error) Kind {
	if err == nil {
		return OK
	}
	var k Kinder
	if errors.As(err, &k) {
		return k.Outcome()
	}
	for _, c := range classes {
		if c.match(err) {
			return c.kind
		}
	}
	return Failure
}

// Code returns the exit code of err's kind.
func Code(err error) int { return Of(err).Code() }

func (k Kind) row() info {
	if k < 0 || int(k) >= len(table) {
		return table[Failure]
	}
	return table[k]
}

// Code is the kind's exit code.
func (k Kind) Code() int { return k.row().code }

// Name is the kind's stable name in the host-step JSON and the metrics
// ("" for OK).
func (k Kind) Name() string { return k.row().name }

// Meaning says what the kind means (the README's exit table).
func (k Kind) Meaning() string { return k.row().meaning }

// String names the kind ("ok" for OK).
func (k Kind) String() string {
	if k == OK {
		return "ok"
	}
	return k.Name()
}

// Parse returns the kind named name. A name this version does not know (a
// kind added by a newer peer) is a Failure: non-zero, and never let through
// by fence.fail_open.
func Parse(name string) Kind {
	for k, r := range table {
		if r.name == name {
			return Kind(k)
		}
	}
	return Failure
}

// MarshalText writes the stable name.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.Name()), nil }

// UnmarshalText reads a name with Parse: never an error.
func (k *Kind) UnmarshalText(b []byte) error {
	*k = Parse(string(b))
	return nil
}

// All returns every kind, in code order.
func All() []Kind {
	out := make([]Kind, len(table))
	for k := range table {
		out[k] = Kind(k)
	}
	return out
}

// Error is an error of a given kind.
type Error struct {
	Kind Kind
	Err  error
}

// Errorf returns an *Error of kind k with a formatted message (%w wraps).
func Errorf(k Kind, format string, a ...any) error {
	return &Error{Kind: k, Err: fmt.Errorf(format, a...)}
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }
func (e *Error) Outcome() Kind { return e.Kind }

// Text renders the exit table for a command's help, one line per code.
func Text() string {
	var b strings.Builder
	for _, k := range All() {
		fmt.Fprintf(&b, "  %d  %s\n", k.Code(), strings.ReplaceAll(k.Meaning(), "`", ""))
	}
	return b.String()
}

// Markdown renders the exit table as the README prints it.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| code | meaning |\n|---|---|\n")
	for _, k := range All() {
		fmt.Fprintf(&b, "| %d | %s |\n", k.Code(), k.Meaning())
	}
	b.WriteString("| other | the wrapped action's own code (drivers: remote deploy, restore, migrate, attach_disk) |\n")
	return b.String()
}
