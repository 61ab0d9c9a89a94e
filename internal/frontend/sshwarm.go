package frontend

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// WarmSSH is the oned state hook on PROLOG (packaging/files/prolog_ssh.hook,
// `onehook create`; stdin: the VM's base64 XML, as oned gives $TEMPLATE to
// a hook with ARGUMENTS_STDIN). It opens rbdfence's own ssh master to the
// host oned deploys the VM on while PROLOG copies its disks, so that the
// deploy action that follows rides it instead of opening a connection then
// (a new connection costs 229-284 ms on the test stack; PROLOG's Ceph clone
// takes longer: docs/PERFORMANCE.md). It is only that connection: it fences
// nothing, reads and writes no claim, and where it fails the deploy opens
// its connection as it would have. It does nothing where rbdfence opens no
// master of its own (control.opts: oneadmin's ssh config names a
// ControlPath, as the packages' does, whose master the drivers' own ssh of
// PROLOG opens; opennebula.ssh_persist 0).
func WarmSSH(ctx context.Context, e *Env, args []string, stdin io.Reader) error {
	if len(args) != 0 {
		return errorf(outcome.Usage, -1, "usage: sshwarm-rbdfence takes no arguments (stdin: the VM's base64 XML, as oned runs a state hook with ARGUMENTS=\"$TEMPLATE\" and ARGUMENTS_STDIN=yes)")
	}
	raw, err := ReadStdin(stdin)
	if err != nil {
		return err
	}
	doc, err := DecodeBase64("VM XML", raw)
	if err != nil {
		return errorf(outcome.Usage, -1, "%v; no ssh connection opened", err)
	}
	vm, err := opennebula.ParseVM(doc)
	if err != nil {
		return errorf(outcome.Usage, -1, "the VM XML on stdin: %v; no ssh connection opened", err)
	}
	e.Log.SetVM(vm.ID)
	if vm.Host == "" {
		return errorf(outcome.Usage, vm.ID, "the VM has no host yet (no HISTORY record); no ssh connection opened")
	}
	if err := checkHost("host", vm.Host); err != nil {
		return errorf(outcome.Usage, vm.ID, "%v; no ssh connection opened", err)
	}
	if !e.masterAsked() || len(e.control.opts(e.Cfg, vm.Host)) == 0 {
		e.Log.Info("no ssh master of rbdfence's own to %s (the ssh config or $SSH_OPT_CONTROL_MASTER chooses the master, or opennebula.ssh_persist is 0): nothing to open", vm.Host)
		return nil
	}
	argv, err := e.sshArgv(vm.Host, []string{"true"})
	if err != nil {
		return errorf(outcome.Usage, vm.ID, "%v", err)
	}
	timeout := time.Duration(e.Cfg.Timeouts.SSH) + 5*time.Second
	if pid, open := masterPID(ctx, argv, timeout); open {
		e.Log.Info("ssh master to %s already open (pid %s): nothing to open", vm.Host, pid)
		return nil
	}
	var out capBuffer
	out.max = 4096
	code, err := run(ctx, proc{argv: argv, stdout: io.Discard, stderr: &out, timeout: timeout})
	if err == nil && code != 0 {
		err = fmt.Errorf("ssh exited %d: %s", code, orDash(lastLine(out.buf.Bytes())))
	}
	if err != nil {
		return briefErrorf(outcome.Unavailable, vm.ID, "ssh to "+vm.Host+" not opened; the deploy opens its own",
			"ssh master to %s not opened while PROLOG runs (the deploy will open its own connection): %v", vm.Host, err)
	}
	pid, _ := masterPID(ctx, argv, timeout)
	e.Log.Info("ssh master to %s opened for the deploy (pid %s, kept %s)", vm.Host, orDash(pid), time.Duration(e.Cfg.OpenNebula.SSHPersist))
	return nil
}

// masterPID asks the master of argv's connection (an sshArgv command line:
// options, host, command) whether it runs (`ssh -O check`) and returns its
// pid as ssh prints it ("Master running (pid=N)").
func masterPID(ctx context.Context, argv []string, timeout time.Duration) (string, bool) {
	check := append(append(slices.Clone(argv[:len(argv)-2]), "-O", "check"), argv[len(argv)-2])
	var out capBuffer
	out.max = 4096
	code, err := run(ctx, proc{argv: check, stdout: &out, stderr: &out, timeout: timeout})
	if err != nil || code != 0 {
		return "", false
	}
	_, pid, _ := strings.Cut(out.buf.String(), "pid=")
	pid, _, _ = strings.Cut(pid, ")")
	return pid, true
}
