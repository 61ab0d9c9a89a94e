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
