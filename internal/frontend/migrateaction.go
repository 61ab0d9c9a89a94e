package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// MigrateSuffix ends the name of the VMM local migrate action: the action
// "migrate-rbdfence" runs the remote vmm/kvm/migrate over ssh; any other
// "<script>-rbdfence" wraps the admin's own local migrate script <script>
// next to it (OpenNebula ships migrate_local: -l migrate=migrate_local
// becomes -l migrate=migrate_local-rbdfence).
const MigrateSuffix = "-rbdfence"

// VMMMigrateArgs is the VMM migrate step's command line as the driver
// builds it: [:deploy_id, :dest_host, :host] (one_vmm_exec.rb:632-635 of
// release-7.4.0) and do_action's "<vmid> <host>" (OpenNebulaDriver.rb:98),
// so <deploy_id> <dst> <src> <vmid> <src>.
type VMMMigrateArgs struct {
	DeployID string
	Dst, Src string
	VM       int
}

// ParseVMMMigrateArgs checks the VMM migrate action's arguments.
func ParseVMMMigrateArgs(args []string) (VMMMigrateArgs, error) {
	const usage = "usage: migrate-rbdfence <deploy_id> <dst_host> <src_host> <vmid> <src_host> (base64 driver action XML on stdin), as oned runs a local migrate action"
	if len(args) != 5 && len(args) != 4 {
		return VMMMigrateArgs{}, errorf(outcome.Usage, -1, "wrong number of arguments (%d); %s", len(args), usage)
	}
	a := VMMMigrateArgs{DeployID: args[0], Dst: args[1], Src: args[2], VM: -1}
	vm, err := parseVMID(args[3])
	if err != nil {
		return a, errorf(outcome.Usage, -1, "%v; %s", err, usage)
	}
	a.VM = vm
	if a.DeployID == "" {
		return a, errorf(outcome.Usage, vm, "empty deploy id; %s", usage)
	}
	if err := checkHost("destination host", a.Dst); err != nil {
		return a, errorf(outcome.Usage, vm, "%v; %s", err, usage)
	}
	if err := checkHost("source host", a.Src); err != nil {
		return a, errorf(outcome.Usage, vm, "%v; %s", err, usage)
	}
	if len(args) == 5 && args[4] != a.Src {
		return a, errorf(outcome.Usage, vm, "source hosts %q and %q differ; %s", clip(args[2]), clip(args[4]), usage)
	}
	return a, nil
}

// MigrateVMM is the VMM local migrate action, which protects a live
// migration whatever the system datastore's TM (the TM migrate scripts
// can stop or see a migration only when the system datastore is ceph:
// migrate_other ignores the status of what it calls, tm_common.sh:175,
// and the ssh/shared failmigrate is common/failmigrate, exit 0, of
// release-7.4.0). In the driver it runs after tm premigrate and vnm pre
// and before vnm clean/post and tm postmigrate; a failure runs the TM's
// failmigrate (one_vmm_exec.rb:598-673).
//
//  1. open the handover window (premigrate step on the source); if it
//     cannot be opened, fail: nothing was started, the VM keeps running on
//     the source, and oned rolls the migration back;
//  2. run the real migration: the remote <remote_dir>/vmm/kvm/migrate on
//     the source over ssh with the driver action XML on stdin and agent
//     forwarding, as the driver runs a delegated action (ssh_stream.rb:
//     191-192), or the admin's own local migrate script (self names it);
//  3. if it failed, fence the destination's copy and close the window
//     (failmigrate step), and exit with the migration's own code (3, and
//     nothing fenced, when the host that would fence runs a host step
//     older than hoststep.FailmigrateVersion);
//  4. if it succeeded, close the window and fence lock owners not on the
//     destination (postmigrate step); a failure there is logged, never
//     turned into a failed migration (the VM runs on the destination).
func MigrateVMM(ctx context.Context, e *Env, self string, args []string, stdinR io.Reader) error {
	a, err := ParseVMMMigrateArgs(args)
	if err != nil {
		return err
	}
	e.Log.SetVM(a.VM)
	raw, err := ReadStdin(stdinR) // relayed as it came to the real migrate
	if err != nil {
		return err
	}
	msg, err := DecodeBase64("driver action XML", raw)
	if err != nil {
		return errorf(outcome.Usage, a.VM, "%v; the migration was not started", err)
	}
	vmDoc, err := actionVM(msg)
	if err != nil {
		return errorf(outcome.Usage, a.VM, "%v; the migration was not started", err)
	}
	vm, err := opennebula.ParseVM(vmDoc)
	if err != nil {
		return errorf(outcome.Usage, a.VM, "the VM in the driver action: %v; the migration was not started", err)
	}
	if vm.ID != a.VM {
		return errorf(outcome.Usage, a.VM, "the driver action on stdin is VM %d's, not VM %d's; the migration was not started", vm.ID, a.VM)
	}
	local, err := localMigrateScript(self)
	if err != nil {
		return errorf(outcome.Usage, a.VM, "%v; the migration was not started", err)
	}

	var m *migration
	switch {
	case a.Src == a.Dst:
		e.Log.Info("source and destination are both %s: no handover window", a.Src)
	case len(vm.Disks) == 0:
		e.Log.Info("VM %d opens no RBD image%s: no handover window", a.VM, skippedNote(vm))
	default:
		m = &migration{a: MigrateArgs{Src: a.Src, Dst: a.Dst, VM: a.VM, DSID: vm.SystemDSID}, vm: vm, run: audit.NewRunID()}
	}
	if m != nil {
		e.probeSSH(a.Dst, a.Src) // both at once: the source's beside the destination's first session
		if e.Broken != nil {
			return errorf(outcome.Usage, a.VM, "%v; the migration was not started", e.Broken)
		}
		if err := e.step(ctx, m, hoststep.OpPremigrate); err != nil {
			return withSuffix(err, "; the migration was not started, the VM keeps running on "+a.Src)
		}
	}

	code, runErr := e.runMigrate(ctx, a, local, raw, msg)
	if unknown := migrationUnknown(code, runErr); unknown != "" && m != nil {
		// The job may still run (virsh migrate goes on without our ssh):
		// neither copy is known to be the stale one. Fence nothing; the
		// window stays open, so the destination's hook keeps the handover
		// and a later start fences whatever is not it.
		until := ""
		if m.window != nil {
			until = " until " + m.window.Expires.UTC().Format(time.RFC3339)
		}
		return refusal(outcome.Unavailable, a.VM, "nothing fenced", "migration may still run; see virsh domjobinfo",
			fmt.Sprintf("cannot tell whether the migration %s -> %s still runs: %s; the handover window stays open%s (a later start of the VM fences whatever is not it); see where one-%d runs with virsh list --all on both hosts and virsh domjobinfo one-%d on %s",
				a.Src, a.Dst, unknown, until, a.VM, a.VM, a.Src))
	}
	if runErr == nil && code == 0 {
		if m != nil {
			if err := e.step(ctx, m, hoststep.OpPostmigrate); err != nil {
				e.Log.Error("the migration succeeded, but: %v (the window expires after fence.migration_window)", err)
			}
		}
		e.Log.Info("VM %d migrated %s -> %s", a.VM, a.Src, a.Dst)
		return nil
	}
	if m != nil {
		if err := e.step(ctx, m, hoststep.OpFailmigrate); err != nil {
			var fe *Error
			if errors.As(err, &fe) && fe.Final {
				// Refused before anything was fenced: the operator has to
				// upgrade the host and look (exit 3, whatever the migration's
				// own code was).
				why := fmt.Sprintf("exit %d", code)
				if runErr != nil {
					why = trimVMPrefix(a.VM, runErr.Error())
				}
				e.Log.Error("the migration %s -> %s failed (%s)", a.Src, a.Dst, why)
				return err
			}
			e.Log.Error("the migration failed and its copy on %s may not be fenced: %v", a.Dst, err)
		}
	}
	if errors.Is(runErr, errMigrationCut) {
		return errorf(outcome.Failure, a.VM, "%v", runErr)
	}
	if runErr != nil {
		return runErr
	}
	return &ExitError{What: "migrate " + a.Src + " -> " + a.Dst, Code: code}
}

// localMigrateScript returns the admin's local migrate script this action
// wraps ("" for the remote vmm/kvm/migrate): self is
// <dir>/<script>-rbdfence, <dir>/<script> must exist.
func localMigrateScript(self string) (string, error) {
	base := filepath.Base(self)
	name, ok := strings.CutSuffix(base, MigrateSuffix)
	if !ok || name == "" {
		return "", fmt.Errorf("the migrate action is named %q; want migrate-rbdfence or <local migrate script>-rbdfence", clip(base))
	}
	if name == "migrate" {
		return "", nil
	}
	p := filepath.Join(filepath.Dir(self), name)
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("the local migrate script %s that %s wraps is missing or not executable: reinstall rbdfence (install.sh frontend)", p, base)
	}
	return p, nil
}

// errMigrationCut marks a real migration whose process rbdfence ended
// (the action was cancelled: SIGTERM from oned's action timeout, -w,
// CommandManager.rb:171-186 of release-7.4.0, or from an operator).
var errMigrationCut = errors.New("the migration's process was stopped")

// migrationUnknown says why the real migration's outcome is unknown, or
// "" when it is known: it ended on its own with its exit code (0: done;
// any other but 255: failed, e.g. kvm/migrate's exit(1) after its own
// cleanup, src/vmm_mad/remotes/kvm/migrate:373-377 of release-7.4.0) or it
// never started. Unknown: its process was stopped before it ended, or
// ssh to the source gave up (255) while virsh migrate there may go on
// (started without a tty it outlives our ssh).
func migrationUnknown(code int, err error) string {
	switch {
	case errors.Is(err, errMigrationCut):
		return "the action was stopped while the migration ran"
	case err == nil && code == 255:
		return "the ssh session to the source ended with exit 255: the connection, or ssh itself, failed"
	}
	return ""
}

// runMigrate runs the real migration and returns its exit code; its
// output is relayed. raw is the base64 stdin as oned gave it (a local
// script gets it unchanged), msg the decoded driver action XML.
//
// It has no time limit of its own: OpenNebula's driver sets none for the
// migrate step (one_vmm_exec.rb:598-674 of release-7.4.0), a large busy VM
// may take hours, and a limit could only end in not knowing: the job on
// the source goes on when our ssh is killed, and fencing the destination
// then leaves the only copy of the guest I/O-dead if it completes there.
// Only the action's own end (its context: a signal) stops it, and that is
// reported as unknown (errMigrationCut): nothing is fenced.
func (e *Env) runMigrate(ctx context.Context, a VMMMigrateArgs, local string, raw, msg []byte) (int, error) {
	argv := []string{a.DeployID, a.Dst, a.Src, strconv.Itoa(a.VM), a.Src}
	cut := func(what string, err error) (int, error) {
		if ctx.Err() != nil {
			return -1, fmt.Errorf("%w: %s: %v", errMigrationCut, what, err)
		}
		// It could not be started: nothing ran.
		return -1, errorf(outcome.Failure, a.VM, "%s: %v", what, err)
	}
	if local != "" {
		code, err := run(ctx, proc{argv: append([]string{local}, argv...), stdin: bytes.NewReader(raw), stdout: e.Stdout, stderr: e.Stderr})
		if err != nil {
			return cut("local migrate "+local, err)
		}
		return code, nil
	}
	script := path.Join(e.Cfg.OpenNebula.RemoteDir, "vmm/kvm/migrate")
	sshArgv, err := e.sshArgvOpts(a.Src, append([]string{script}, argv...),
		// A delegated action (migrate is, unless -d says otherwise:
		// one_vmm_exec.rb:1544) forwards the agent on its own connection.
		"-o", "ForwardAgent=yes", "-o", "ControlMaster=no", "-o", "ControlPath=none")
	if err != nil {
		return -1, errorf(outcome.Usage, a.VM, "%v", err)
	}
	code, err := run(ctx, proc{argv: sshArgv, stdin: bytes.NewReader(msg), stdout: e.Stdout, stderr: e.Stderr})
	if err != nil {
		return cut("remote migrate on "+a.Src, err)
	}
	return code, nil
}

// withSuffix appends s to the message of a *Error (other errors as they are).
func withSuffix(err error, s string) error {
	if fe, ok := err.(*Error); ok {
		c := *fe
		c.Msg += s
		return &c
	}
	return err
}
