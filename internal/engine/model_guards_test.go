package engine_test

// The guards as the mains run them around their engine calls: the
// front-end's host step "start" (internal/frontend/prestart.go,
// internal/fencer/step.go) and the libvirt hook's `migrate begin`, `prepare
// begin` and `started begin` (internal/hook/run.go, mark.go). This is the
// one file to adapt when the mains' logic changes; the steps, the
// invariants and the exploration stay as they are. Since issue 11's fixes
// the hook asks the claim at `migrate begin` (AcceptIncoming) and keeps the
// accepted window in its mark, and the host step asks libvirt whether the
// domain runs (internal/fencer/running.go) before a front-end start.

import (
	"errors"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// hookMigrateBegin is the hook's `migrate begin` (internal/hook/run.go, runner.migrate): host step "incoming" asks the
// claim (engine.AcceptIncoming); an incoming migration the front-end did
// not open for the current deploy is refused before QEMU starts. The
// accepted window is kept in the mark. Ceph unreachable: fail closed.
func (w *world) hookMigrateBegin(o *stepOut, h int) error {
	if w.hosts[h].cut {
		o.sayf("Ceph unreachable: refused (fail closed)")
		return errCrashed
	}
	who := w.who(h, -1, engine.SourceHook)
	who.Instance = w.hookInstance(h)
	var win *engine.Window
	_, err := w.call(o, -1, engine.SourceHook, "incoming", func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error) {
		got, err := e.AcceptIncoming(ctx, who)
		if c == 0 {
			win = got // the hook's mark keeps the first cluster's (fencer mergeClaim)
		}
		return nil, err
	})
	if err != nil {
		return err
	}
	w.hosts[h].mark, w.hosts[h].markAt, w.hosts[h].markWin, w.hosts[h].markUsed = true, w.clock, win, false
	o.sayf("incoming migration accepted; mark set")
	return nil
}

// hookInstance is the identity the hook passes for the domain on h: its
// XML's <one:deployment_time> (domxml.Domain.Instance, internal/hook/run.go).
// The mutant "no-instance-check" passes the one the claim's window expects,
// as if the engine did not compare them.
func (w *world) hookInstance(h int) int64 {
	if mutant("no-instance-check") {
		if c := w.claim(); c != nil && c.Window != nil {
			return c.Window.Instance
		}
	}
	return w.hosts[h].dom.ident
}

// domainActive is what the host step learns from libvirt
// (internal/domstate): the VM's domain runs (or is paused) on h.
func (w *world) domainActive(h int) bool {
	switch w.hosts[h].dom.phase {
	case phOpen, phIncoming, phStarted, phRunning:
		return true
	}
	return false
}

// libvirtAnswer is what the host step learns from libvirt about one-42 on
// h (internal/fencer/running.go domainAnswer, internal/domstate).
// libvirtd that does not answer is no answer (an error or a timeout of
// virsh); the mutant libvirt-silence-absent takes it for "no such domain",
// as the host step did before issue 18 (fencer.refuseRunning let the start
// go on when virsh failed).
func (w *world) libvirtAnswer(h int) engine.Domain {
	switch {
	case w.hosts[h].silent && !mutant("libvirt-silence-absent"):
		return engine.Domain{Seen: engine.DomainNoAnswer, Said: "did not answer (virsh domstate one-42: no answer within 10s)"}
	case w.hosts[h].silent:
		return engine.Domain{Seen: engine.DomainAbsent, Said: "shut off"}
	case w.domainActive(h) && w.hosts[h].dom.asleep:
		return engine.Domain{Seen: engine.DomainAsleep, Said: "pmsuspended"}
	case w.domainActive(h):
		return engine.Domain{Seen: engine.DomainActive, Said: "running"}
	}
	return engine.Domain{Seen: engine.DomainAbsent, Said: "shut off"}
}

// sourceJobAnswer is what the host step of a failmigrate on the source
// learns from libvirt there (internal/fencer/running.go jobAnswer): the
// state of one-42 and, when it is active, whether a job of it runs (`virsh
// domjobinfo`): a migration job runs while the domain it brings to another
// host has not switched over. The mutant failmigrate-no-job-check answers
// "running, no job" whatever libvirt has, as the failmigrate from the
// source fenced without asking before (model-C).
func (w *world) sourceJobAnswer(src int) engine.Domain {
	if mutant("failmigrate-no-job-check") {
		return engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobNone, JobSaid: "Job type: None"}
	}
	d := w.libvirtAnswer(src)
	if d.Seen != engine.DomainActive {
		return d
	}
	for h := range w.hosts {
		if h == src || w.hosts[h].dom.from != src {
			continue
		}
		switch w.hosts[h].dom.phase {
		case phMigBegin, phPrepare, phOpen, phIncoming, phStarted:
			d.Job, d.JobSaid = engine.JobRunning, "Job type: Unbounded, Operation: Outgoing migration"
			return d
		}
	}
	d.Job, d.JobSaid = engine.JobNone, "Job type: None"
	return d
}

// feStart is the front-end's prestart: host step "start" on the chosen host
// with the HISTORY SEQ; the step refuses without fencing when libvirt runs
// the VM's domain there (wt-lifecycle internal/fencer/running.go).
func (w *world) feStart(o *stepOut, crash int, h, seq int, file int64) error {
	return w.feStartAs(o, crash, h, seq, file, false)
}

// feStartAs is feStart; restore is the restore action's prestart (its
// request says so, internal/frontend/restore.go; the mutant no-wake leaves
// it out, as before issue 18). It sets o.woken when the start is only the
// wake-up of a sleeping guest.
func (w *world) feStartAs(o *stepOut, crash int, h, seq int, file int64, restore bool) error {
	o.startSeq, o.startHost, o.startSource, o.startFile = seq, h, engine.SourceFrontend, file
	if w.hosts[h].cut {
		o.sayf("host step cannot reach Ceph: refused (fence.fail_open false)")
		return errCrashed
	}
	who := w.who(h, seq, engine.SourceFrontend)
	who.Instance = file // Deploy passes the deployment file's (internal/frontend/deploy.go)
	who.Domain = w.libvirtAnswer(h)
	who.Restore = restore && !mutant("no-wake")
	res, err := w.call(o, crash, engine.SourceFrontend, "prestart", func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error) {
		return e.Start(ctx, who, w.imgsOf(c), dry)
	})
	switch {
	case err == nil && res != nil && res.Wake:
		o.woken = true
		o.sayf("admitted: the guest is only woken up, nothing fenced")
	case err == nil:
		o.sayf("admitted")
	}
	return err
}

// hookStart is the hook's `prepare begin`: a fresh mark makes the start a
// handover candidate (Who.Incoming = the mark's window); the engine decides.
func (w *world) hookStart(o *stepOut, crash int, h int) (how string, err error) {
	var incoming *engine.Window
	switch {
	case w.markFresh(h) && !w.hosts[h].markUsed:
		// The mark serves this one prepare (internal/hook/mark.go Use),
		// recorded before any Ceph call.
		w.hosts[h].markUsed = true
		incoming = w.hosts[h].markWin
		if incoming == nil {
			incoming = &engine.Window{}
		}
	case w.markFresh(h):
		o.sayf("the mark was used by an earlier prepare: judged as a start")
	default:
		w.hosts[h].mark, w.hosts[h].markWin = false, nil
	}
	o.startSeq, o.startHost, o.startSource = -1, h, engine.SourceHook
	if w.hosts[h].cut {
		o.sayf("Ceph unreachable: refused (fail closed)")
		return "", errCrashed
	}
	who := w.who(h, -1, engine.SourceHook)
	who.Incoming = incoming
	who.Instance = w.hookInstance(h)
	res, err := w.call(o, crash, engine.SourceHook, "start", func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error) {
		return e.Start(ctx, who, w.imgsOf(c), dry)
	})
	if err != nil {
		return "", err
	}
	o.sayf("admitted")
	switch {
	case incoming != nil && res.Handover:
		return "mark", nil // the migration's handover, as the claim holds it
	case res.Handover:
		return "claim+handover", nil
	}
	return "claim", nil
}

// hookRecord is the hook's `started begin`: a fresh mark is cleared; with a
// window, the instance is recorded in the claim's window (Who.Incoming). It
// reports whether the hook fails the start (internal/hook/run.go, record):
// the claim refuses the instance (a newer deploy or another host claimed the
// VM since its prepare), or, failing closed, the instance cannot be recorded.
func (w *world) hookRecord(o *stepOut, crash int, h int) (refused bool) {
	var incoming *engine.Window
	if w.markFresh(h) {
		incoming = w.hosts[h].markWin
		w.hosts[h].mark, w.hosts[h].markWin = false, nil
		if incoming == nil {
			o.sayf("fresh mark without a window: cleared, not recording")
			return false
		}
	}
	w.hosts[h].mark, w.hosts[h].markWin = false, nil
	if w.hosts[h].cut {
		// fence.fail_open false (the default): an instance whose addresses
		// cannot be recorded does not start (a later start elsewhere could
		// not fence it once it is invisible).
		o.sayf("Ceph unreachable: not recorded; fail closed: libvirt stops the domain")
		return !mutant("ignore-started-refusal")
	}
	who := w.who(h, -1, engine.SourceHook)
	who.Incoming = incoming
	who.Instance = w.hookInstance(h)
	_, err := w.call(o, crash, engine.SourceHook, "record", func(e *engine.Engine, c int, dry bool) (*engine.ClaimResult, error) {
		if mutant("started-fences") {
			return e.Start(ctx, who, w.imgsOf(c), dry)
		}
		return e.Record(ctx, who, w.imgsOf(c), engine.Scope{Kind: engine.ScopeOnHost, HostIPs: w.scope(h)})
	})
	if err == nil {
		o.sayf("recorded")
	}
	switch {
	case mutant("ignore-started-refusal"):
	case outcome.Of(err) == outcome.Refused:
		o.sayf("refused: the hook fails, libvirt stops the domain")
		return true
	case errors.Is(err, errCrashed):
		// A hook that dies exits non-zero: libvirt fails the start.
		o.sayf("the hook died: libvirt stops the domain")
		return true
	}
	return false
}
