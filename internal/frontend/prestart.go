package frontend

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/collision"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// StartInput says which start of which VM to check.
type StartInput struct {
	VM int
	// Host is where the VM is being started; "" means the host of the VM's
	// last HISTORY record.
	Host string
	// Seq is the deploy sequence (HISTORY SEQ); < 0 means the VM's.
	Seq int
	// Run names this run; "" makes a new id.
	Run string
	// Instance is the identity of the instance being started: the
	// deployment file's <one:deployment_time> (engine.Claim.Instance); 0
	// when unknown (a restore: the hook records the checkpoint's).
	Instance int64
	// Restore: the start is OpenNebula's restore (hoststep.Request.Restore).
	Restore bool
}

// StartResult is what a prestart did.
type StartResult struct {
	// VM is the VM as oned described it; nil only when oned could not be
	// read and fence.fail_open let the start go on.
	VM   *opennebula.VMInfo
	Host string
	Seq  int
	Run  string
	// Skipped: the VM opens no RBD image (or only through SSH-mode copies):
	// nothing was checked and no host was contacted.
	Skipped bool
	// FailedOpen: the check could not be done and fence.fail_open let the
	// start go on anyway.
	FailedOpen bool
	// Response is the host's answer (nil when skipped or failed open).
	Response *hoststep.Response
}

// readVM reads VM id from oned, mapping failures to kinds: an unknown VM is
// a usage error, oned out of reach or refusing our credentials means the
// check cannot be done.
func (e *Env) readVM(ctx context.Context, id int) (*opennebula.VMInfo, error) {
	o := e.Cfg.OpenNebula
	client, err := opennebula.New(o.Endpoint, o.AuthFile, time.Duration(e.Cfg.Timeouts.Oned))
	if err != nil {
		return nil, briefErrorf(outcome.Usage, id, "oned unreadable; check opennebula.endpoint",
			"cannot read the VM from oned: %v (check opennebula.endpoint and opennebula.auth_file)", err)
	}
	octx, cancel := context.WithTimeout(ctx, time.Duration(e.Cfg.Timeouts.Oned))
	defer cancel()
	vm, err := client.VM(octx, id)
	switch {
	case err == nil:
		return vm, nil
	case errors.Is(err, opennebula.ErrNotFound):
		return nil, errorf(outcome.Usage, id, "the VM does not exist in oned (%v)", err)
	case errors.Is(err, opennebula.ErrUnreachable), errors.Is(err, opennebula.ErrAuthentication), errors.Is(err, opennebula.ErrAuthorization):
		return nil, errorf(outcome.Unavailable, id, "cannot read the VM's disks from oned: %v", err)
	}
	return nil, errorf(outcome.Failure, id, "cannot read the VM's disks from oned: %v", err)
}

// Prestart claims VM in.VM for this start and fences every foreign client
// of its RBD images, on the target host (or locally with remote: local). It
// appends the fenced clients to the front-end audit log and publishes the
// collision events (oned, else the spool). A nil error lets the start go
// on. Refusals and incomplete fences are errors whatever fence.fail_open
// says; with fail_open a check that cannot be done is logged and passed.
func Prestart(ctx context.Context, e *Env, in StartInput) (*StartResult, error) {
	ctx, cancel := e.stepContext(ctx)
	defer cancel()
	res, req, err := e.prepareStart(ctx, in)
	if err != nil || req == nil {
		return res, err
	}
	resp, err := e.hostStep(ctx, res.Host, req, anywhere)
	return e.finishStart(res, req, resp, err)
}

// prepareStart reads the VM from oned (once) and returns the start step's
// request; req is nil when there is nothing to check (res.Skipped) or oned
// could not be read and fence.fail_open lets the start go on.
func (e *Env) prepareStart(ctx context.Context, in StartInput) (*StartResult, *hoststep.Request, error) {
	e.Log.SetVM(in.VM)
	res := &StartResult{Host: in.Host, Seq: in.Seq, Run: in.Run}
	if res.Run == "" {
		res.Run = audit.NewRunID()
	}
	if in.VM < 0 {
		return nil, nil, errorf(outcome.Usage, in.VM, "bad VM id %d", in.VM)
	}
	if in.Host != "" {
		if err := checkHost("host", in.Host); err != nil {
			return nil, nil, errorf(outcome.Usage, in.VM, "%v", err)
		}
	}
	if in.Host != "" {
		e.probeSSH(in.Host) // beside oned's answer
	}
	vm, err := e.readVM(ctx, in.VM)
	if err != nil {
		// No host was asked: nothing was fenced.
		res, err = e.failOpen(res, headed(err, "nothing fenced"))
		return res, nil, err
	}
	res.VM = vm
	if res.Host == "" {
		res.Host = vm.Host
	}
	if res.Host == "" {
		return nil, nil, errorf(outcome.Usage, in.VM, "the VM has no host yet (no HISTORY record) and none was given")
	}
	if err := checkHost("host", res.Host); err != nil {
		return nil, nil, errorf(outcome.Usage, in.VM, "%v", err)
	}
	if vm.Host != "" && vm.Host != res.Host {
		e.Log.Info("oned places VM %d on %s, the start is on %s: checking for %s", in.VM, vm.Host, res.Host, res.Host)
	}
	if res.Seq < 0 {
		res.Seq = vm.Seq
	} else if vm.Seq >= 0 && vm.Seq != res.Seq {
		e.Log.Info("deploy #%d requested, oned's last HISTORY is #%d: claiming #%d", res.Seq, vm.Seq, res.Seq)
	}
	if len(vm.Disks) == 0 {
		res.Skipped = true
		e.Log.Info("VM %d opens no RBD image%s: nothing to check", in.VM, skippedNote(vm))
		return res, nil, nil
	}

	req := &hoststep.Request{Op: hoststep.OpStart, VM: in.VM, Seq: res.Seq, Host: res.Host, Run: res.Run,
		Source: engine.SourceFrontend, Disks: vm.Disks, Instance: in.Instance, Restore: in.Restore}
	identify(req, vm)
	e.Log.Info("checking %d RBD image(s) of VM %d for deploy #%d on %s (run %s)", len(vm.Disks), in.VM, res.Seq, res.Host, res.Run)
	return res, req, nil
}

// identify names the VM in req as oned knows it (engine.Claim.Stime): its
// STIME, and its HISTORY records, by which a claim an older rbdfence wrote
// is adopted as this VM's.
func identify(req *hoststep.Request, vm *opennebula.VMInfo) {
	if vm == nil {
		return
	}
	req.Stime, req.History = vm.Stime, nil
	for _, p := range vm.History {
		req.History = append(req.History, engine.Placement{Seq: p.Seq, Host: p.Host, Stime: p.Stime})
	}
}

// finishStart takes the start step's answer (resp, or the error that no
// answer came): it logs and records what was fenced and returns the
// refusal, or res when the start may go on. The refusal's line starts
// with what happened and what was fenced: "rbdfence refused the start,
// nothing fenced: <the host's reason>" (the start's host is the VM's in
// oned; the host's reason names what it is about).
func (e *Env) finishStart(res *StartResult, req *hoststep.Request, resp *hoststep.Response, err error) (*StartResult, error) {
	if err != nil {
		// No answer: what the host did is not known here.
		return e.failOpen(res, headed(err, fencingUnknown))
	}
	res.Response = resp
	if resp.OK {
		e.summarize(resp)
	}
	e.record(resp, "prestart", e.local(anywhere))
	if !resp.OK {
		return e.failOpen(res, refusal(resp.Kind, req.VM, fencedNote(resp), resp.Brief, startWhat(req)+" on "+req.Host+": "+bare(req.VM, resp.Error)))
	}
	return res, nil
}

// failOpen returns err, unless it says the check could not be done and
// fence.fail_open is set: then it logs and lets the start go on.
func (e *Env) failOpen(res *StartResult, err error) (*StartResult, error) {
	var fe *Error
	if !errors.As(err, &fe) || fe.Kind != outcome.Unavailable || fe.Final || !e.Cfg.Fence.FailOpen {
		return nil, err
	}
	e.Log.Error("%s; starting anyway because fence.fail_open is set", fe.Msg)
	res.FailedOpen = true
	return res, nil
}

// startWhatIn is startWhat of a start not yet asked of a host.
func startWhatIn(in StartInput) string {
	return startWhat(&hoststep.Request{Restore: in.Restore})
}

// skippedNote lists why DISKs were not checked, for the log.
func skippedNote(vm *opennebula.VMInfo) string {
	if len(vm.Skipped) == 0 {
		return ""
	}
	var parts []string
	for _, s := range vm.Skipped {
		id := s.ID
		if id == "" {
			id = "?"
		}
		parts = append(parts, "disk "+id+": "+s.Reason)
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// record appends the response's audit records to the front-end audit log
// (the local host binary already wrote them to the same log when
// hostWroteAudit) and publishes one event per fenced client: to oned, or
// to the spool when oned does not answer. Neither stops the action: the
// fence is done; failures are logged loudly.
func (e *Env) record(resp *hoststep.Response, source string, hostWroteAudit bool) {
	if resp == nil {
		return
	}
	if len(resp.Audit) > 0 && !hostWroteAudit {
		if err := audit.Append(e.Cfg.AuditLog, resp.Audit); err != nil {
			e.Log.Error("fenced clients not written to the audit log: %v", err)
		}
	}
	evs := collision.Events(resp.Audit, source)
	// Publishing gets its own oned budget even when the run's is spent.
	r, err := collision.Publish(context.WithoutCancel(context.Background()), e.Cfg, evs)
	var de *events.DeferredError
	switch {
	case err == nil:
		if r.Delivered > 0 {
			e.Log.Info("%d collision event(s) recorded in the VM's user template (%s_*)", r.Delivered, opennebula.AttrEvent)
		}
	case errors.As(err, &de):
		e.Log.Info("oned did not take %d collision event(s) now (%v): kept in %s for the next run or 'rbdfence events flush'", r.Spooled, de.Cause, e.Cfg.SpoolDir)
	default:
		e.Log.Error("collision events LOST, only the audit log %s has them: %v", e.Cfg.AuditLog, err)
	}
}

// summarize logs what a successful step did.
func (e *Env) summarize(resp *hoststep.Response) {
	if resp.Handover {
		e.Log.Info("live-migration handover open: nothing fenced")
	}
	for _, r := range resp.Audit {
		if r.Result != "ok" {
			continue
		}
		exp := ""
		if !r.Expire.IsZero() {
			exp = ", blocklisted until " + r.Expire.UTC().Format(time.RFC3339)
		}
		what := r.Image
		if what == "" {
			what = "(address recorded for the previous instance)"
		}
		e.Log.Info("fenced %s %s on %s (%s%s)", orUnknown(r.Client), r.Address, what, r.Action, exp)
	}
	if resp.Report == nil {
		return
	}
	var shared []string
	for _, im := range resp.Report.Images {
		if im.Shareable {
			shared = append(shared, im.Image)
		}
	}
	sort.Strings(shared)
	if len(shared) > 0 {
		e.Log.Info("shareable image(s) not fenced: %s", strings.Join(shared, ", "))
	}
	e.Log.Info("%d image(s) checked, %d client(s) fenced", len(resp.Report.Images), fencedClients(resp))
}

func orUnknown(s string) string {
	if s == "" {
		return "client"
	}
	return s
}

// ParsePrestartArgs checks the prestart driver's arguments: <vmid> [<host>].
func ParsePrestartArgs(args []string) (StartInput, error) {
	const usage = "usage: prestart <vmid> [<host>]"
	if len(args) < 1 || len(args) > 2 {
		return StartInput{}, errorf(outcome.Usage, -1, "wrong number of arguments (%d); %s", len(args), usage)
	}
	vm, err := parseVMID(args[0])
	if err != nil {
		return StartInput{}, errorf(outcome.Usage, -1, "%v; %s", err, usage)
	}
	in := StartInput{VM: vm, Seq: -1}
	if len(args) == 2 {
		if err := checkHost("host", args[1]); err != nil {
			return StartInput{}, errorf(outcome.Usage, vm, "%v; %s", err, usage)
		}
		in.Host = args[1]
	}
	return in, nil
}
