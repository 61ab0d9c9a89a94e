package frontend

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/opennebula"
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
}

// step runs op (premigrate on the source, or the front-end with remote:
// local; postmigrate and failmigrate on the destination, where the host's
// own addresses tell its clients apart, after the source's libvirt was
// asked about the VM's job (sourceDomain); failmigrate on the source when
// the destination cannot be reached), records audit and events, and
// returns a *Error when the step did not succeed.
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
	if op == hoststep.OpFailmigrate {
		// The destination fences its copy only on the source's word that
		// the VM runs there with no job (engine.MigrationUnknownError).
		req.SrcDomain = e.sourceDomain(ctx, m)
	}
	resp, err := e.hostStep(ctx, host, req, pl)
	if err != nil && op == hoststep.OpFailmigrate && a.Src != a.Dst {
		// The destination cannot be reached (often the very partition that
		// made the migration "fail"): fence from the source every client of
		// the VM's images that is not on the source; that includes the copy.
		e.Log.Error("VM %d: %s; fencing from the source %s every client that is not on it", a.VM, trimVMPrefix(a.VM, err.Error()), a.Src)
		req.Host = a.Src
		resp, err = e.hostStep(ctx, a.Src, req, onHost)
	}
	if err != nil {
		return err
	}
	if !resp.OK {
		e.record(resp, op, e.local(pl))
		return errorf(resp.Kind, a.VM, "VM %d: rbdfence %s (%s -> %s) failed: %s", a.VM, op, a.Src, a.Dst, trimVMPrefix(a.VM, resp.Error))
	}
	defer e.record(resp, op, e.local(pl))
	switch op {
	case hoststep.OpPremigrate:
		until := ""
		if resp.Claim != nil && resp.Claim.Window != nil {
			m.window = resp.Claim.Window
			until = " until " + resp.Claim.Window.Expires.UTC().Format(time.RFC3339)
		}
		e.Log.Info("VM %d: handover window %s -> %s open%s: the destination will not fence the source", a.VM, a.Src, a.Dst, until)
	case hoststep.OpPostmigrate:
		e.Log.Info("VM %d: migration %s -> %s done: handover window closed", a.VM, a.Src, a.Dst)
		e.summarize(resp, a.VM)
	case hoststep.OpFailmigrate:
		e.Log.Info("VM %d: migration %s -> %s failed: handover window closed, the instance on %s is kept", a.VM, a.Src, a.Dst, a.Src)
		e.summarize(resp, a.VM)
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

// trimVMPrefix drops a leading "VM <vm>: " from msg (host answers and
// nested errors carry it already; one is enough).
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
