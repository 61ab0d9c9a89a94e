package frontend

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// WarmSSH is the oned state hook that opens rbdfence's own ssh masters
// before an action needs them (stdin: the VM's base64 XML, as oned gives
// $TEMPLATE to a hook with ARGUMENTS_STDIN; `onehook create`):
//
//   - on PROLOG (packaging/files/prolog_ssh.hook) to the host oned deploys
//     the VM on, while PROLOG copies its disks, for the deploy action;
//   - on MIGRATE (packaging/files/migrate_ssh.hook, ON=CUSTOM: the live
//     migration, LifeCycleActions.cc:392-446 of release-7.4.0) to both the
//     destination (the last HISTORY record) and the source (the one before:
//     oned gives a hook two, VirtualMachine.h:977-980), while the driver's
//     tm premigrate runs, for the migrate action's sessions.
//
// The action that follows rides them instead of opening a connection each
// (a new connection costs 229-284 ms on the test stack; PROLOG's Ceph clone
// and tm premigrate take longer: docs/PERFORMANCE.md). It is only those
// connections: it fences nothing, reads and writes no claim, and where it
// fails the action opens its connections as it would have. It does nothing
// where rbdfence opens no master of its own (OwnMaster: oneadmin's ssh
// config names a ControlPath, as the packages' does, whose master the
// drivers' own ssh opens; opennebula.ssh_persist 0).
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
	hosts := warmHosts(vm)
	if len(hosts) == 0 {
		return errorf(outcome.Usage, vm.ID, "the VM has no host yet (no HISTORY record); no ssh connection opened")
	}
	for _, h := range hosts {
		if err := checkHost("host", h); err != nil {
			return errorf(outcome.Usage, vm.ID, "%v; no ssh connection opened", err)
		}
	}
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.warmHost(ctx, vm.ID, h)
		}()
	}
	wg.Wait()
	// The first failure is the hook's error; a second one is logged, not lost.
	var first error
	for _, err := range errs {
		switch {
		case err == nil:
		case first == nil:
			first = err
		default:
			e.Log.Error("%v", err)
		}
	}
	return first
}

// lcmMigrate is LCM_STATE MIGRATE: a live migration (VirtualMachine.h:80).
const lcmMigrate = 4

// warmHosts are the hosts the action after vm's state reaches: its host,
// and in a live migration the source too (the record before the last).
func warmHosts(vm *opennebula.VMInfo) []string {
	if vm.Host == "" {
		return nil
	}
	hosts := []string{vm.Host}
	if n := len(vm.History); vm.LCMState == lcmMigrate && n >= 2 && vm.History[n-2].Host != "" && vm.History[n-2].Host != vm.Host {
		hosts = append(hosts, vm.History[n-2].Host)
	}
	return hosts
}

// warmHost opens rbdfence's own master to host, unless there is none to
// open or it runs already.
func (e *Env) warmHost(ctx context.Context, vm int, host string) error {
	if !e.OwnMaster(host) {
		e.Log.Info("no ssh master of rbdfence's own to %s (the ssh config or $SSH_OPT_CONTROL_MASTER chooses the master, or opennebula.ssh_persist is 0): nothing to open", host)
		return nil
	}
	argv, err := e.sshArgv(host, []string{"true"})
	if err != nil {
		return errorf(outcome.Usage, vm, "%v", err)
	}
	timeout := time.Duration(e.Cfg.Timeouts.SSH) + 5*time.Second
	if pid, open := masterPID(ctx, argv, timeout); open {
		e.Log.Info("ssh master to %s already open (pid %s): nothing to open", host, pid)
		return nil
	}
	var out capBuffer
	out.max = 4096
	code, err := run(ctx, proc{argv: argv, stdout: io.Discard, stderr: &out, timeout: timeout})
	if err == nil && code != 0 {
		err = fmt.Errorf("ssh exited %d: %s", code, orDash(lastLine(out.buf.Bytes())))
	}
	if err != nil {
		return briefErrorf(outcome.Unavailable, vm, "ssh to "+host+" not opened; the action opens its own",
			"ssh master to %s not opened before the action (the action will open its own connection): %v", host, err)
	}
	pid, _ := masterPID(ctx, argv, timeout)
	e.Log.Info("ssh master to %s opened for the action (pid %s, kept %s)", host, orDash(pid), time.Duration(e.Cfg.OpenNebula.SSHPersist))
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
