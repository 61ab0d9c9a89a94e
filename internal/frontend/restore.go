package frontend

import (
	"context"
	"io"
	"path"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rbdfence/rbdfence/internal/outcome"
)

// RestoreArgs is the local restore action's command line as oned passes
// it: <checkpoint> <host> <deploy_id> <vmid> <host>.
type RestoreArgs struct {
	Checkpoint string
	Host       string
	DeployID   string
	VM         int
}

// ParseRestoreArgs checks the restore action's arguments.
func ParseRestoreArgs(args []string) (RestoreArgs, error) {
	const usage = "usage: restore-rbdfence <checkpoint> <host> <deploy_id> <vmid> <host> (base64 driver action XML on stdin), as oned runs a local restore action"
	if len(args) != 5 && len(args) != 4 {
		return RestoreArgs{}, errorf(outcome.Usage, -1, "wrong number of arguments (%d); %s", len(args), usage)
	}
	a := RestoreArgs{Checkpoint: args[0], Host: args[1], DeployID: args[2]}
	vm, err := parseVMID(args[3])
	if err != nil {
		return a, errorf(outcome.Usage, -1, "%v; %s", err, usage)
	}
	a.VM = vm
	if err := checkHost("host", a.Host); err != nil {
		return a, errorf(outcome.Usage, vm, "%v; %s", err, usage)
	}
	if len(args) == 5 && args[4] != a.Host {
		return a, errorf(outcome.Usage, vm, "hosts %q and %q differ; %s", clip(args[1]), clip(args[4]), usage)
	}
	if !filepath.IsAbs(a.Checkpoint) {
		return a, errorf(outcome.Usage, vm, "checkpoint %q is not an absolute path; %s", clip(a.Checkpoint), usage)
	}
	return a, nil
}

// Restore is the local restore action: prestart, then the remote restore
// with the driver action XML on stdin, relaying its output and exit code.
func Restore(ctx context.Context, e *Env, args []string, stdin io.Reader) error {
	a, err := ParseRestoreArgs(args)
	if err != nil {
		return err
	}
	msg, err := readActionStdin(e, a.VM, stdin, "driver action XML", "nothing was restored")
	if err != nil {
		return err
	}
	root, err := xmlRoot(msg)
	if err != nil {
		return errorf(outcome.Usage, a.VM, "driver action on stdin: %v; nothing was restored", err)
	}
	if root != "VMM_DRIVER_ACTION_DATA" {
		return errorf(outcome.Usage, a.VM, "stdin is a <%s> document, want <VMM_DRIVER_ACTION_DATA>; nothing was restored", clip(root))
	}
	pctx, cancel := context.WithTimeout(ctx, time.Duration(e.Cfg.Timeouts.Oned))
	res, req, err := e.prepareStart(pctx, StartInput{VM: a.VM, Host: a.Host, Seq: -1, Restore: true})
	cancel()
	if err != nil {
		return err
	}
	script := path.Join(e.Cfg.OpenNebula.RemoteDir, "vmm/kvm/restore")
	code, err := e.startThenRun(ctx, res, req, remoteStart{vm: a.VM, what: "restore",
		argv:  []string{script, a.Checkpoint, a.Host, a.DeployID, strconv.Itoa(a.VM), a.Host},
		stdin: msg, stdout: e.Stdout})
	if err != nil {
		return err
	}
	if code != 0 {
		return &ExitError{What: "remote restore on " + a.Host, Code: code}
	}
	e.Log.Info("VM %d restored on %s", a.VM, a.Host)
	return nil
}
