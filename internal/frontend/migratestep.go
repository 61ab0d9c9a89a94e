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
// own addresses tell its clients apart; failmigrate on the source when the
// destination cannot be reached), records audit and events, and returns a
// *Error when the step did not succeed.
func (e *Env) step(ctx context.Context, m *migration, op string) error {
	a := m.a
	host, pl := a.Dst, onHost
	if op == hoststep.OpPremigrate {
		host, pl = a.Src, anywhere
	}
	req := &hoststep.Request{Op: op, VM: a.VM, Seq: m.vm.Seq, Host: host, Src: a.Src, Dst: a.Dst, Run: m.run,
		Source: engine.SourceFrontend, Disks: m.vm.Disks}
	ctx, cancel := e.stepContext(ctx)
	defer cancel()
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
