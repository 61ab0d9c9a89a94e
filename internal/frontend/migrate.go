package frontend

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// OrigSuffix names the original TM script kept next to its wrapper.
const OrigSuffix = ".rbdfence-orig"

// MigrateArgs is a TM migrate action's command line as oned passes it:
// <src_host> <dst_host> <remote_system_dir> <vmid> <sys_dsid> [caller_tm].
// caller_tm is set when another TM's migrate_other calls this one.
type MigrateArgs struct {
	Src, Dst string
	Dir      string
	VM       int
	DSID     int
	Caller   string
}

// ParseMigrateArgs checks a TM migrate action's arguments.
func ParseMigrateArgs(op string, args []string) (MigrateArgs, error) {
	usage := "usage: " + op + " <src_host> <dst_host> <remote_system_dir> <vmid> <sys_dsid> [caller_tm] (base64 VM XML on stdin), as oned runs a TM " + op + " action"
	if len(args) < 5 || len(args) > 6 {
		return MigrateArgs{}, errorf(outcome.Usage, -1, "wrong number of arguments (%d); %s", len(args), usage)
	}
	a := MigrateArgs{Src: args[0], Dst: args[1], Dir: args[2], VM: -1}
	vm, err := parseVMID(args[3])
	if err != nil {
		return a, errorf(outcome.Usage, -1, "%v; %s", err, usage)
	}
	a.VM = vm
	ds, err := parseVMID(args[4])
	if err != nil {
		return a, errorf(outcome.Usage, vm, "system datastore id %q is not a non-negative integer; %s", clip(args[4]), usage)
	}
	a.DSID = ds
	if len(args) == 6 {
		a.Caller = args[5]
	}
	if err := checkHost("source host", a.Src); err != nil {
		return a, errorf(outcome.Usage, vm, "%v; %s", err, usage)
	}
	if err := checkHost("destination host", a.Dst); err != nil {
		return a, errorf(outcome.Usage, vm, "%v; %s", err, usage)
	}
	return a, nil
}

// migration is one live migration of one VM, as a TM wrapper sees it.
type migration struct {
	a   MigrateArgs
	vm  *opennebula.VMInfo
	run string
}

// loadMigration parses the arguments and the VM XML on stdin (oned sends
// the full VM, base64; an empty stdin, as from older OpenNebula, means: ask
// oned). It returns nil and no error when there is nothing to do.
func (e *Env) loadMigration(ctx context.Context, op string, args []string, stdin []byte) (*migration, error) {
	a, err := ParseMigrateArgs(op, args)
	if err != nil {
		return nil, err
	}
	e.Log.SetVM(a.VM)
	if a.Src == a.Dst {
		e.Log.Info("%s: source and destination are both %s: nothing to do", op, a.Src)
		return nil, nil
	}
	var vm *opennebula.VMInfo
	if len(bytes.TrimSpace(stdin)) == 0 {
		octx, cancel := context.WithTimeout(ctx, time.Duration(e.Cfg.Timeouts.Total))
		defer cancel()
		if vm, err = e.readVM(octx, a.VM); err != nil {
			return nil, err
		}
	} else {
		doc, err := DecodeBase64("VM XML", stdin)
		if err != nil {
			return nil, errorf(outcome.Usage, a.VM, "VM %d: %s: %v", a.VM, op, err)
		}
		if vm, err = opennebula.ParseVM(doc); err != nil {
			return nil, errorf(outcome.Usage, a.VM, "VM %d: %s: the VM XML on stdin: %v", a.VM, op, err)
		}
		if vm.ID != a.VM {
			return nil, errorf(outcome.Usage, a.VM, "VM %d: %s: the VM XML on stdin is VM %d's", a.VM, op, vm.ID)
		}
	}
	if len(vm.Disks) == 0 {
		e.Log.Info("%s: VM %d opens no RBD image%s: nothing to do", op, a.VM, skippedNote(vm))
		return nil, nil
	}
	return &migration{a: a, vm: vm, run: audit.NewRunID()}, nil
}

// step runs op (premigrate on the source, or the front-end with remote:
// local; postmigrate and failmigrate on the destination, where the host's
// own addresses tell its clients apart; failmigrate on the source when the
// destination cannot be reached), records audit and events, and returns a
// *Error when the step did not succeed.
func (e *Env) step(ctx context.Context, m *migration, op string) error {
	a := m.a
	host, pl := a.Dst, onHost
	if op == hoststep.OpPremigrate {
		host, pl = a.Src, anywhere
	}
	req := &hoststep.Request{Op: op, VM: a.VM, Seq: m.vm.Seq, Host: host, Src: a.Src, Dst: a.Dst, Run: m.run,
		Source: engine.SourceFrontend, Disks: m.vm.Disks}
	ctx, cancel := e.stepContext(ctx)
	defer cancel()
	resp, err := e.hostStep(ctx, host, req, pl)
	if err != nil && op == hoststep.OpFailmigrate && a.Src != a.Dst {
		// The destination cannot be reached (often the very partition that
		// made the migration "fail"): fence from the source every client of
		// the VM's images that is not on the source; that includes the copy.
		e.Log.Error("VM %d: %v; fencing from the source %s every client that is not on it", a.VM, err, a.Src)
		req.Host = a.Src
		resp, err = e.hostStep(ctx, a.Src, req, onHost)
	}
	if err != nil {
		return err
	}
	if !resp.OK {
		e.record(resp, op, e.local(pl))
		return errorf(resp.Kind, a.VM, "VM %d: rbdfence %s (%s -> %s) failed: %s", a.VM, op, a.Src, a.Dst, resp.Error)
	}
	defer e.record(resp, op, e.local(pl))
	switch op {
	case hoststep.OpPremigrate:
		until := ""
		if resp.Claim != nil && resp.Claim.Window != nil {
			until = " until " + resp.Claim.Window.Expires.UTC().Format(time.RFC3339)
		}
		e.Log.Info("VM %d: handover window %s -> %s open%s: the destination will not fence the source", a.VM, a.Src, a.Dst, until)
	case hoststep.OpPostmigrate:
		e.Log.Info("VM %d: migration %s -> %s done: handover window closed", a.VM, a.Src, a.Dst)
		e.summarize(resp, a.VM)
	case hoststep.OpFailmigrate:
		e.Log.Info("VM %d: migration %s -> %s failed: handover window closed, the instance on %s is kept", a.VM, a.Src, a.Dst, a.Src)
		e.summarize(resp, a.VM)
	}
	return nil
}

// Migrate is the TM wrapper for op (premigrate, postmigrate or
// failmigrate): it runs rbdfence's step, then ALWAYS the original script
// self+OrigSuffix with the same arguments and stdin, relaying its output.
// The error decides the exit code with the policy of the package
// documentation; *ExitError carries the original's own code.
func Migrate(ctx context.Context, e *Env, op, self string, args []string, stdinR io.Reader) error {
	switch op {
	case hoststep.OpPremigrate, hoststep.OpPostmigrate, hoststep.OpFailmigrate:
	default:
		return errorf(outcome.Usage, -1, "unknown TM action %q", op)
	}
	stdin, err := ReadStdin(stdinR)
	if err != nil {
		return err // the original cannot get the same stdin either
	}
	var m *migration
	stepErr := e.Broken
	if stepErr == nil {
		m, stepErr = e.loadMigration(ctx, op, args, stdin)
	}
	if stepErr == nil && m != nil {
		stepErr = e.step(ctx, m, op)
	}
	origErr := e.runOriginal(ctx, op, self, args, stdin)
	if op == hoststep.OpPremigrate && stepErr == nil && m != nil && origErr != nil {
		// The migration will not happen: close the window again.
		if err := e.step(ctx, m, hoststep.OpFailmigrate); err != nil {
			e.Log.Error("the original premigrate failed and the handover window could not be closed (it expires after fence.migration_window): %v", err)
		}
	}
	var oe *Error
	switch op {
	case hoststep.OpPremigrate:
		if stepErr != nil {
			if errors.As(origErr, &oe) {
				e.Log.Error("%s", oe.Msg)
			}
			return stepErr // abort the migration: see the package documentation
		}
		return origErr
	case hoststep.OpPostmigrate:
		if stepErr != nil {
			e.Log.Error("%v", stepErr)
		}
		return origErr
	default: // failmigrate
		if origErr != nil {
			if stepErr != nil {
				e.Log.Error("%v", stepErr)
			}
			return origErr
		}
		return stepErr
	}
}

// bashShebang matches "#!/bin/bash", "#!/usr/bin/bash", "#!/usr/bin/env bash".
var bashShebang = regexp.MustCompile(`^#!\s*(\S*/)?(env\s+)?bash(\s|$)`)

// runOriginal runs the original TM script with the wrapper's arguments
// and stdin. OpenNebula's scripts find their siblings through $0
// (migrate_other calls tm/<other>/${0##*/} in $(dirname $0)/..), so a bash
// original is sourced by "bash -c" with $0 set to the wrapper's own path;
// other originals are executed directly.
func (e *Env) runOriginal(ctx context.Context, op, self string, args []string, stdin []byte) error {
	orig := self + OrigSuffix
	st, err := os.Stat(orig)
	if err != nil || st.IsDir() {
		return errorf(outcome.Failure, -1, "the original TM %s script %s is missing: reinstall rbdfence (install.sh frontend) or restore it", op, orig)
	}
	argv := append([]string{orig}, args...)
	if isBash(orig) {
		bash, lerr := exec.LookPath("bash")
		if lerr != nil {
			bash = "/bin/bash"
		}
		argv = append([]string{bash, "-c", ". " + shellQuote(orig), self}, args...)
	}
	code, err := run(ctx, proc{argv: argv, stdin: bytes.NewReader(stdin), stdout: e.Stdout, stderr: e.Stderr,
		timeout: time.Duration(e.Cfg.Timeouts.Action)})
	if err != nil {
		return errorf(outcome.Failure, -1, "the original TM %s script %s: %v", op, orig, err)
	}
	if code != 0 {
		return &ExitError{What: "original " + op, Code: code}
	}
	return nil
}

// isBash reports whether the script at p starts with a bash shebang.
func isBash(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil && line == "" {
		return false
	}
	return bashShebang.MatchString(strings.TrimRight(line, "\r\n"))
}

// SelfPath returns the path a wrapper was started as (oned runs drivers by
// absolute path), made absolute; it falls back to the executable's path.
func SelfPath(argv0 string) string {
	if strings.Contains(argv0, "/") {
		if abs, err := filepath.Abs(argv0); err == nil {
			return abs
		}
	}
	if p, err := os.Executable(); err == nil {
		return p
	}
	return argv0
}
