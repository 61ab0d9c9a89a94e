//go:build cgo

package fencer

import (
	"context"
	"strconv"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/domstate"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
)

// refuseRunning refuses the front-end's start step on the VM's host when
// libvirt already runs the VM's domain there: `onevm resume` of a VM in
// UNKNOWN that in fact runs, `onevm recover --retry` of a deploy that did
// start. The deploy would fail ("domain already exists"); fencing first
// would leave the running VM I/O-dead. Only the host step asks libvirt (the
// libvirt hook never does: libvirtd waits for it), read-only and within
// timeouts.connect; when libvirt cannot be asked the start goes on as before.
func refuseRunning(ctx context.Context, cfg *config.Config, req *hoststep.Request) error {
	if req.Op != hoststep.OpStart || req.Source != engine.SourceFrontend || req.Local {
		return nil
	}
	dom := "one-" + strconv.Itoa(req.VM)
	st, err := domstate.Query(ctx, dom, time.Duration(cfg.Timeouts.Connect))
	if err != nil || !st.Active() {
		return nil
	}
	return &engine.AlreadyRunningError{VM: req.VM, Host: req.Host, Domain: dom, State: string(st)}
}

// learnInstance gives the front-end's premigrate, run on the source host,
// the identity of the domain it is about to migrate: the `<one:deployment_time>`
// of `one-<VM>`'s live XML as libvirt has it (read-only, within
// timeouts.connect). OpenWindow uses it when the claim does not know its
// instance's identity (a VM started before this version): the window is
// then bound to it as well. When the step does not run on the source
// (opennebula.remote: local) or libvirt cannot be asked, the request is
// left as it is.
func learnInstance(ctx context.Context, cfg *config.Config, req *hoststep.Request) {
	if req.Op != hoststep.OpPremigrate || req.Source != engine.SourceFrontend || req.Local || req.Instance != 0 || req.Host != req.Src {
		return
	}
	if t, err := domstate.Instance(ctx, "one-"+strconv.Itoa(req.VM), time.Duration(cfg.Timeouts.Connect)); err == nil {
		req.Instance = t
	}
}
