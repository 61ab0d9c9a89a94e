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
	"net/netip"

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
	_, err := w.call(o, -1, engine.SourceHook, "incoming", func(e *engine.Engine) (*engine.ClaimResult, error) {
		var err error
		win, err = e.AcceptIncoming(ctx, who)
		return nil, err
	})
	if err != nil {
		return err
	}
	w.hosts[h].mark, w.hosts[h].markAt, w.hosts[h].markWin = true, w.clock, win
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

// feStart is the front-end's prestart: host step "start" on the chosen host
// with the HISTORY SEQ; the step refuses without fencing when libvirt runs
// the VM's domain there (wt-lifecycle internal/fencer/running.go).
func (w *world) feStart(o *stepOut, crash int, h, seq int, file int64) error {
	o.startSeq, o.startHost, o.startSource, o.startFile = seq, h, engine.SourceFrontend, file
	if w.hosts[h].cut {
		o.sayf("host step cannot reach Ceph: refused (fence.fail_open false)")
		return errCrashed
	}
	if w.domainActive(h) {
		o.sayf("one-42 already runs on %s: refused without fencing", mHosts[h])
		return errCrashed
	}
	who := w.who(h, seq, engine.SourceFrontend)
	who.Instance = file // Deploy passes the deployment file's (internal/frontend/deploy.go)
	_, err := w.call(o, crash, engine.SourceFrontend, "prestart", func(e *engine.Engine) (*engine.ClaimResult, error) {
		return e.Start(ctx, who, mImgs, false)
	})
	if err == nil {
		o.sayf("admitted")
	}
	return err
}

// hookStart is the hook's `prepare begin`: a fresh mark makes the start a
// handover candidate (Who.Incoming = the mark's window); the engine decides.
func (w *world) hookStart(o *stepOut, crash int, h int) (how string, err error) {
	var incoming *engine.Window
	if w.markFresh(h) {
		incoming = w.hosts[h].markWin
		if incoming == nil {
			incoming = &engine.Window{}
		}
	} else {
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
	res, err := w.call(o, crash, engine.SourceHook, "start", func(e *engine.Engine) (*engine.ClaimResult, error) {
		return e.Start(ctx, who, mImgs, false)
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
	_, err := w.call(o, crash, engine.SourceHook, "record", func(e *engine.Engine) (*engine.ClaimResult, error) {
		if mutant("started-fences") {
			return e.Start(ctx, who, mImgs, false)
		}
		return e.Record(ctx, who, mImgs, engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{mIP(h)}})
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
