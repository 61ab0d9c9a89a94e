package frontend

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// OrigSuffix named the original TM script an earlier rbdfence kept next
// to its tm/ceph wrapper; doctor and the installer look for leftovers.
const OrigSuffix = ".rbdfence-orig"

// MigrateArgs names one live migration: source, destination, VM and its
// system datastore.
type MigrateArgs struct {
	Src, Dst string
	VM       int
	DSID     int
}

// migration is one live migration of one VM, as the migrate action sees it.
type migration struct {
	a   MigrateArgs
	vm  *opennebula.VMInfo
	run string
	// window is the handover premigrate opened (nil when its answer had
	// none).
	window *engine.Window
	// protocol is each host's host step protocol version as it reported
	// it (the destination's "versions" before premigrate, the source's
	// premigrate answer): a failmigrate goes only to a host of
	// hoststep.FailmigrateVersion or later.
	protocol map[string]int
}

// noteProtocol records what host's host step reported of itself (nil
// Versions: older than version 4).
func (m *migration) noteProtocol(host string, v *hoststep.Versions) {
	if m.protocol == nil {
		m.protocol = map[string]int{}
	}
	p := 0
	if v != nil {
		p = v.Step.Protocol
	}
	m.protocol[host] = p
}

// step runs op (premigrate on the source, or the front-end with remote:
// local; postmigrate and failmigrate on the destination, where the host's
// own addresses tell its clients apart, after the source's libvirt was
// asked about the VM's job (sourceDomain); failmigrate on the source when
// the destination cannot be reached), records audit and events, and
// returns a *Error when the step did not succeed. A premigrate's error is
// the migration's refusal (nothing is fenced before the window opens):
// "rbdfence: refused, nothing fenced: <brief> | premigrate node1 -> node2
// on node1: ..." (refusal), also when the host could not be asked.
func (e *Env) step(ctx context.Context, m *migration, op string) error {
	a := m.a
	host, pl := a.Dst, onHost
	if op == hoststep.OpPremigrate {
		host, pl = a.Src, anywhere
	}
	req := &hoststep.Request{Op: op, VM: a.VM, Seq: m.vm.Seq, Host: host, Src: a.Src, Dst: a.Dst, Run: m.run,
		Source: engine.SourceFrontend, Disks: m.vm.Disks}
	identify(req, m.vm)
	ctx, cancel := e.stepContext(ctx)
	defer cancel()
	switch op {
	case hoststep.OpPremigrate:
		// The destination's hook will read the window: it must read this
		// front-end's claim format.
		v, err := e.requireVersions(ctx, a.VM, a.Dst, "migration")
		if err != nil {
			return headed(err, "nothing fenced")
		}
		m.noteProtocol(a.Dst, v)
	case hoststep.OpFailmigrate:
		if err := e.failmigrateProtocol(ctx, m, host); err != nil {
			return err
		}
		// The destination fences its copy only on the source's word that
		// the VM runs there with no job (engine.MigrationUnknownError).
		req.SrcDomain = e.sourceDomain(ctx, m)
	}
	resp, err := e.hostStep(ctx, host, req, pl)
	if err != nil && op == hoststep.OpFailmigrate && a.Src != a.Dst {
		// The destination cannot be reached (often the very partition that
		// made the migration "fail"): fence from the source every client of
		// the VM's images that is not on the source; that includes the copy.
		e.Log.Error("%s; fencing from the source %s every client that is not on it", trimVMPrefix(a.VM, err.Error()), a.Src)
		if perr := e.failmigrateProtocol(ctx, m, a.Src); perr != nil {
			return perr
		}
		req.Host = a.Src
		resp, err = e.hostStep(ctx, a.Src, req, onHost)
	}
	if err != nil {
		if op == hoststep.OpPremigrate {
			return headed(err, "nothing fenced")
		}
		return err
	}
	if op == hoststep.OpPremigrate && !e.local(pl) {
		m.noteProtocol(a.Src, resp.Versions)
	}
	if !resp.OK {
		e.record(resp, op, e.local(pl))
		if op == hoststep.OpPremigrate {
			return refusal(resp.Kind, a.VM, fencedNote(resp), resp.Brief, fmt.Sprintf("premigrate on %s: %s", host, bare(a.VM, resp.Error)))
		}
		// After the migration: logged beside its outcome, not the action's
		// error (migrate's exit is the migration's own).
		return errorf(resp.Kind, a.VM, "rbdfence %s (%s -> %s) failed: %s", op, a.Src, a.Dst, trimVMPrefix(a.VM, resp.Error))
	}
	defer e.record(resp, op, e.local(pl))
	switch op {
	case hoststep.OpPremigrate:
		until := ""
		if resp.Claim != nil && resp.Claim.Window != nil {
			m.window = resp.Claim.Window
			until = " until " + resp.Claim.Window.Expires.UTC().Format(time.RFC3339)
		}
		e.Log.Info("handover window %s -> %s open%s: the destination will not fence the source", a.Src, a.Dst, until)
	case hoststep.OpPostmigrate:
		e.Log.Info("migration %s -> %s done: handover window closed", a.Src, a.Dst)
		e.summarize(resp)
	case hoststep.OpFailmigrate:
		e.Log.Info("migration %s -> %s failed: handover window closed, the instance on %s is kept", a.Src, a.Dst, a.Src)
		e.summarize(resp)
	}
	return nil
}

// sourceDomain asks the migration's source, before a failmigrate on the
// destination, what libvirt there says about one-<VM> and its job (host
// step "domain", read-only: virsh domstate and domjobinfo within
// timeouts.connect). A failmigrate runs after the action's own virsh
// migrate failed, but a retried migration's (`onevm recover --retry` of a
// migration whose action oned abandoned, LifeCycleActions.cc:1796-1797 of
// release-7.4.0) runs while the first attempt's job may still complete
// onto the destination: only "active, no job" lets the destination fence
// its copy. The front-end asks, not the destination: it reaches every
// host over ssh already, the destination may not reach the source, and a
// step the source's own rbdfence answers needs no libvirt URI, key or
// credentials on the destination. Every failure is no answer (the
// destination's step then fences nothing).
func (e *Env) sourceDomain(ctx context.Context, m *migration) *engine.Domain {
	a := m.a
	req := &hoststep.Request{Op: hoststep.OpDomain, VM: a.VM, Seq: m.vm.Seq, Host: a.Src, Src: a.Src, Dst: a.Dst, Run: m.run, Source: engine.SourceFrontend}
	resp, err := e.hostStep(ctx, a.Src, req, onHost)
	switch {
	case err != nil:
		return &engine.Domain{Seen: engine.DomainNoAnswer, Said: "could not be asked (" + trimVMPrefix(a.VM, err.Error()) + ")"}
	case !resp.OK:
		return &engine.Domain{Seen: engine.DomainNoAnswer, Said: "could not be asked (the domain step on " + a.Src + " failed: " + trimVMPrefix(a.VM, resp.Error) + ")"}
	case resp.Domain == nil:
		return &engine.Domain{Seen: engine.DomainNoAnswer, Said: "could not be asked (the rbdfence host step on " + a.Src + " is older than the front-end's: " + hoststep.Fix + ")"}
	}
	return resp.Domain
}

// failmigrateProtocol refuses (exit 3, final, nothing fenced) a
// failmigrate on host when its host step is older than
// hoststep.FailmigrateVersion: such a step ignores the source's word
// (Request.SrcDomain) and fences the copy on the failure alone, even when
// the "failed" migration completed there and that copy is the only live
// one. What the host reported during the migration decides; a host not
// asked yet is asked ("versions").
func (e *Env) failmigrateProtocol(ctx context.Context, m *migration, host string) error {
	p, ok := m.protocol[host]
	if !ok {
		v, err := e.hostVersions(ctx, m.a.VM, host, true)
		if err != nil {
			return withSuffix(err, "; nothing was fenced")
		}
		m.noteProtocol(host, v)
		p = m.protocol[host]
	}
	if p >= hoststep.FailmigrateVersion {
		return nil
	}
	fe := refusal(outcome.Unavailable, m.a.VM, "nothing fenced", host+"'s rbdfence is too old; upgrade, onevm recover",
		fmt.Sprintf("the migration failed; failmigrate: %s's host step is too old (rbdfence host step protocol %d, older than %d): it would fence the copy there without asking %s whether the migration completed; fix: %s; then see where one-%d runs (virsh list --all on %s and %s) and run onevm recover",
			host, p, hoststep.FailmigrateVersion, m.a.Src, hoststep.Fix, m.a.VM, m.a.Src, m.a.Dst))
	fe.Final = true
	return fe
}

// trimVMPrefix drops a leading "VM <vm>: " from msg: host answers
// (internal/engine's errors) carry it, and the line that relays one names
// the VM already (oned shows the ERROR on the VM; a log line has its id).
func trimVMPrefix(vm int, msg string) string {
	p := "VM " + strconv.Itoa(vm) + ": "
	for strings.HasPrefix(msg, p) {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}

// SelfPath returns the path an action was started as (oned runs drivers by
// absolute path), made absolute; it falls back to the executable's path.
func SelfPath(argv0 string) string {
	if strings.Contains(argv0, "/") {
		if abs, err := filepath.Abs(argv0); err == nil {
			return abs
		}
	}
	if p, err := os.Executable(); err == nil {
		return p
	}
	return argv0
}
