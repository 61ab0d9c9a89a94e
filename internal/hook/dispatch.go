// Package hook is rbdfence's libvirt qemu hook: what runs on every KVM host
// when libvirtd starts, migrates or stops a domain. libvirtd calls the hook
// as `<hook> <domain> <op> <subop> <extra>` with the full domain XML on
// stdin (libvirt docs/hooks.rst); a non-zero exit of `prepare begin` stops
// the start and libvirt shows the hook's stderr in its error.
//
// What each invocation does:
//
//	prepare begin   fence: claim the VM (domains one-<ID>) and fence every
//	                foreign client of its RBD disks, or fence without a claim
//	                (other domains). With a fresh incoming-migration mark it
//	                fences nothing only while the VM's claim still holds the
//	                window the mark was accepted in (other domains: while the
//	                mark is fresh); a stale mark is checked as a start
//	migrate begin   incoming migration: a VM's is accepted only when its
//	                claim holds the handover window the front-end's
//	                premigrate opened for the current deploy, from the
//	                claim's host to this one (refused otherwise); the
//	                domain's mark keeps that window
//	release end     remove the mark
//	stopped end     remove the mark
//	started begin   record the new QEMU's client addresses in the VM's claim;
//	                after an incoming migration in the claim's window, and
//	                remove the mark (postmigrate makes them the claim's)
//	anything else   nothing (stdin is drained, exit 0 at once)
//
// The hook never calls libvirt (libvirtd waits for it: a call back would
// deadlock), takes its Ceph access from rbdfence's configuration, never
// prints on stdout (libvirt reads stdout of some hooks as a new domain XML)
// and is bounded by timeouts.total on every path.
package hook

import (
	"fmt"
	"strings"
)

// Invocation is one call of the hook as libvirtd makes it.
type Invocation struct {
	// Domain is the libvirt domain name (OpenNebula: "one-<VMID>").
	Domain string
	// Op is the operation: prepare, start, started, stopped, release,
	// migrate, restore, reconnect, attach.
	Op string
	// SubOp is "begin" or "end" ("-" when libvirt has none).
	SubOp string
	// Extra is libvirt's extra argument ("-" when none).
	Extra string
}

// String renders the invocation as libvirt passes it.
func (i Invocation) String() string {
	return strings.Join([]string{i.Domain, i.Op, i.SubOp, i.Extra}, " ")
}

// ParseArgs reads the four arguments libvirtd passes to a qemu hook.
func ParseArgs(args []string) (Invocation, error) {
	if len(args) != 4 {
		return Invocation{}, fmt.Errorf("want 4 arguments <domain> <op> <subop> <extra> as libvirtd passes them, got %d", len(args))
	}
	inv := Invocation{Domain: args[0], Op: args[1], SubOp: args[2], Extra: args[3]}
	if inv.Domain == "" || inv.Op == "" {
		return Invocation{}, fmt.Errorf("empty domain name or operation in %q", strings.Join(args, " "))
	}
	return inv, nil
}

// Action is what the hook does for an invocation.
type Action int

// Actions.
const (
	// ActNone: exit 0 at once without touching Ceph.
	ActNone Action = iota
	// ActFence: claim and fence before QEMU starts (prepare begin).
	ActFence
	// ActMarkMigration: remember an incoming migration (migrate begin).
	ActMarkMigration
	// ActClearMark: forget it (release end, stopped end).
	ActClearMark
	// ActRecord: record the started QEMU's addresses (started begin).
	ActRecord
)

func (a Action) String() string {
	switch a {
	case ActFence:
		return "fence"
	case ActMarkMigration:
		return "mark-migration"
	case ActClearMark:
		return "clear-mark"
	case ActRecord:
		return "record"
	}
	return "none"
}

// Dispatch maps an invocation to its action.
func Dispatch(inv Invocation) Action {
	switch inv.Op + " " + inv.SubOp {
	case "prepare begin":
		return ActFence
	case "migrate begin":
		return ActMarkMigration
	case "release end", "stopped end":
		return ActClearMark
	case "started begin":
		return ActRecord
	}
	return ActNone
}
