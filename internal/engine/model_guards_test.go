//go:build !model_lifecycle

package engine_test

// The guards as the mains run them around their engine calls: the
// front-end's host step "start" (internal/frontend/prestart.go,
// internal/fencer/do.go) and the libvirt hook's `migrate begin`, `prepare
// begin` and `started begin` (internal/hook/run.go, mark.go). This is the
// one file to adapt when the mains' logic changes (issue 11's fixes move
// part of it: the hook asks the claim at `migrate begin`, the host step asks
// libvirt whether the domain runs); the steps, the invariants and the
// exploration stay as they are.
//
// This version follows the code before issue 11's fixes;
// model_guards_lifecycle_test.go (build tag model_lifecycle) follows the
// fixed mains on branch wt-lifecycle. Once that branch is merged, replace
// this file with that one and drop both build tags.

import (
	"net/netip"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// hookMigrateBegin is the hook's `migrate begin` (internal/hook/run.go:
// 294-312): set the mark, admit.
func (w *world) hookMigrateBegin(o *stepOut, h int) error {
	w.hosts[h].mark, w.hosts[h].markAt = true, w.clock
	o.sayf("mark set")
	return nil
}

// feStart is the front-end's prestart: host step "start" on the chosen
// host with the HISTORY SEQ (internal/frontend/prestart.go:132-152, remote
// mode: the step runs on the host, so its address is known). A host cut
// off cannot check: refused, fail closed.
func (w *world) feStart(o *stepOut, crash int, h, seq int) error {
	o.startSeq, o.startHost, o.startSource = seq, h, engine.SourceFrontend
	if w.hosts[h].cut {
		o.sayf("host step cannot reach Ceph: refused (fence.fail_open false)")
		return errCrashed
	}
	who := w.who(h, seq, engine.SourceFrontend)
	res, err := w.call(o, crash, engine.SourceFrontend, "prestart", func(e *engine.Engine) (*engine.ClaimResult, error) {
		return e.Start(ctx, who, mImgs, false)
	})
	if err == nil {
		o.sayf("admitted")
		_ = res
	}
	return err
}

// hookStart is the hook's `prepare begin` (internal/hook/run.go:159-226):
// a fresh mark admits without the engine (:173-179), an expired one is
// removed (mark.go:113-118), then host step "start" with SEQ -1.
func (w *world) hookStart(o *stepOut, crash int, h int) (how string, err error) {
	if w.markFresh(h) {
		o.sayf("fresh incoming-migration mark: admitted without the claim")
		return "mark", nil
	}
	w.hosts[h].mark = false
	o.startSeq, o.startHost, o.startSource = -1, h, engine.SourceHook
	if w.hosts[h].cut {
		o.sayf("Ceph unreachable: refused (fail closed)")
		return "", errCrashed
	}
	who := w.who(h, -1, engine.SourceHook)
	res, err := w.call(o, crash, engine.SourceHook, "start", func(e *engine.Engine) (*engine.ClaimResult, error) {
		return e.Start(ctx, who, mImgs, false)
	})
	if err != nil {
		return "", err
	}
	o.sayf("admitted")
	if res.Handover {
		return "claim+handover", nil
	}
	return "claim", nil
}

// hookRecord is the hook's `started begin` (internal/hook/run.go:332-375):
// a fresh mark is cleared and nothing recorded; else host step "record".
// A failure is only logged.
func (w *world) hookRecord(o *stepOut, crash int, h int) {
	if w.markFresh(h) {
		w.hosts[h].mark = false
		o.sayf("fresh mark: cleared, not recording")
		return
	}
	w.hosts[h].mark = false
	if w.hosts[h].cut {
		o.sayf("Ceph unreachable: not recorded (logged)")
		return
	}
	who := w.who(h, -1, engine.SourceHook)
	_, err := w.call(o, crash, engine.SourceHook, "record", func(e *engine.Engine) (*engine.ClaimResult, error) {
		if mutant("started-fences") {
			return e.Start(ctx, who, mImgs, false)
		}
		return e.Record(ctx, who, mImgs, engine.Scope{Kind: engine.ScopeOnHost, HostIPs: []netip.Addr{mIP(h)}})
	})
	if err == nil {
		o.sayf("recorded")
	}
}
