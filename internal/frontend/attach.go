package frontend

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// AttachArgs is the attach_disk action's command line as oned runs it
// (one_vmm_exec.rb, release-7.4.0, src/vmm_mad/exec/one_vmm_exec.rb:730-736:
// deploy_id, disk_target_path, target, target_index, drv_message; then
// OpenNebulaDriver#do_action appends the VM id and the host,
// src/mad/ruby/OpenNebulaDriver.rb:98). A local action gets the driver
// action XML base64-encoded on stdin (OpenNebulaDriver.rb:103-108).
type AttachArgs struct {
	DeployID    string
	TargetPath  string
	Target      string
	TargetIndex string
	DrvMessage  string
	VM          int
	Host        string
	// Raw are the arguments as given, passed on unchanged to the remote
	// attach_disk.
	Raw []string
}

// ParseAttachArgs checks the attach_disk action's arguments.
func ParseAttachArgs(args []string) (AttachArgs, error) {
	const usage = "usage: attach-rbdfence <deploy_id> <disk_target_path> <target> <target_index> <drv_message> <vmid> <host> (base64 driver action XML on stdin), as oned runs a local attach_disk action"
	if len(args) != 7 {
		return AttachArgs{}, errorf(outcome.Usage, -1, "wrong number of arguments (%d); %s", len(args), usage)
	}
	a := AttachArgs{DeployID: args[0], TargetPath: args[1], Target: args[2], TargetIndex: args[3], DrvMessage: args[4], Host: args[6], Raw: args}
	vm, err := parseVMID(args[5])
	if err != nil {
		return a, errorf(outcome.Usage, -1, "%v; %s", err, usage)
	}
	a.VM = vm
	if err := checkHost("host", a.Host); err != nil {
		return a, errorf(outcome.Usage, vm, "%v; %s", err, usage)
	}
	if a.Target == "" {
		return a, errorf(outcome.Usage, vm, "no disk target; %s", usage)
	}
	return a, nil
}

// attachedIDs returns the DISK_IDs of the VM's DISKs marked ATTACH=YES (the
// disk being hot-attached: one_vmm_exec.rb:712, DISK[ATTACH='YES']).
func attachedIDs(vmDoc []byte) ([]string, error) {
	var v struct {
		Disks []struct {
			ID     string `xml:"DISK_ID"`
			Attach string `xml:"ATTACH"`
		} `xml:"TEMPLATE>DISK"`
	}
	if err := xml.Unmarshal(vmDoc, &v); err != nil {
		return nil, fmt.Errorf("<VM>: %s", clip(err.Error()))
	}
	var ids []string
	for _, d := range v.Disks {
		if strings.EqualFold(strings.TrimSpace(d.Attach), "YES") {
			ids = append(ids, strings.TrimSpace(d.ID))
		}
	}
	if len(ids) == 0 {
		return nil, errors.New("no DISK with ATTACH=YES in the VM")
	}
	return ids, nil
}

// Attach is the local attach_disk action: before the disk reaches the
// host it fences every foreign client of the attached RBD image (and its
// recorded last writer) under the VM's claim, then runs the remote
// <remote_dir>/vmm/kvm/attach_disk with the same arguments and the driver
// action XML on stdin, relaying its output and exit code, and finally
// records the VM's new client of the image (best effort). A refusal or an
// incomplete fence stops the attach; a check that cannot be done stops it
// too unless fence.fail_open is set.
func Attach(ctx context.Context, e *Env, args []string, stdin io.Reader) error {
	a, err := ParseAttachArgs(args)
	if err != nil {
		return err
	}
	msg, err := readActionStdin(e, a.VM, stdin, "driver action XML", "nothing was attached")
	if err != nil {
		return err
	}
	disks, vm, err := attachedDisks(msg, a.VM)
	if err != nil {
		return errorf(outcome.Usage, a.VM, "%v; nothing was attached", err)
	}
	run := audit.NewRunID()
	checked := false
	if len(disks) > 0 {
		checked, err = e.checkAttach(ctx, a, vm, disks, run)
		if err != nil {
			return err
		}
	} else {
		e.Log.Info("the attached disk %s opens no RBD image: nothing to check", a.Target)
	}

	script := path.Join(e.Cfg.OpenNebula.RemoteDir, "vmm/kvm/attach_disk")
	code, err := e.remoteAction(ctx, a.Host, append([]string{script}, a.Raw...), msg, e.Stdout, e.Stderr)
	if err != nil {
		return errorf(outcome.Failure, a.VM, "remote attach_disk on %s: %v", a.Host, err)
	}
	if code != 0 {
		return &ExitError{What: "remote attach_disk on " + a.Host, Code: code}
	}
	e.Log.Info("disk %s attached on %s", a.Target, a.Host)
	if checked {
		e.recordAttached(ctx, a, vm, disks, run)
	}
	return nil
}

// attachedDisks returns the RBD images of the disks being attached and the
// VM as the driver action describes it.
func attachedDisks(msg []byte, id int) ([]vmdisk.Disk, *opennebula.VMInfo, error) {
	vmDoc, err := actionVM(msg)
	if err != nil {
		return nil, nil, err
	}
	vm, err := opennebula.ParseVM(vmDoc)
	if err != nil {
		return nil, nil, fmt.Errorf("the driver action's VM: %v", err)
	}
	if vm.ID != id {
		return nil, nil, fmt.Errorf("the driver action is for VM %d, not %d", vm.ID, id)
	}
	ids, err := attachedIDs(vmDoc)
	if err != nil {
		return nil, nil, err
	}
	var out []vmdisk.Disk
	for _, d := range vm.Disks {
		for _, i := range ids {
			if d.ID == i {
				out = append(out, d)
			}
		}
	}
	return out, vm, nil
}

// checkAttach runs the attach host step; it reports whether the check was
// done (false: it could not be, and fence.fail_open let the attach go on).
// A refusal's line is a start's (refusal): "rbdfence: refused, nothing
// fenced: <brief> | hot-attach of disk vdb on node1: <the host's reason>".
func (e *Env) checkAttach(ctx context.Context, a AttachArgs, vm *opennebula.VMInfo, disks []vmdisk.Disk, run string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(e.Cfg.Timeouts.Total))
	defer cancel()
	req := &hoststep.Request{Op: hoststep.OpAttach, VM: a.VM, Seq: vm.Seq, Host: a.Host, Run: run, Source: engine.SourceFrontend, Disks: disks}
	identify(req, vm)
	e.Log.Info("checking %d hot-attached RBD image(s) of VM %d on %s (run %s)", len(disks), a.VM, a.Host, run)
	resp, err := e.hostStep(ctx, a.Host, req, anywhere)
	if err != nil {
		// No answer: what the host did is not known here.
		err = headed(err, fencingUnknown)
		if _, ferr := e.failOpen(&StartResult{}, err); ferr != nil {
			return false, ferr
		}
		return false, nil
	}
	if resp.OK {
		e.summarize(resp)
	}
	e.record(resp, "attach", e.local(anywhere))
	if !resp.OK {
		r := refusal(resp.Kind, a.VM, fencedNote(resp), resp.Brief, "hot-attach of disk "+a.Target+" on "+a.Host+": "+bare(a.VM, resp.Error))
		if _, ferr := e.failOpen(&StartResult{}, r); ferr == nil {
			return false, nil
		}
		return false, r
	}
	return true, nil
}

// recordAttached records the VM's new client of the attached images in its
// claim and with the images (the other disks' entries stay). Best effort:
// the attach has succeeded.
func (e *Env) recordAttached(ctx context.Context, a AttachArgs, vm *opennebula.VMInfo, disks []vmdisk.Disk, run string) {
	req := &hoststep.Request{Op: hoststep.OpRecord, VM: a.VM, Seq: vm.Seq, Host: a.Host, Run: run, Source: engine.SourceFrontend, Disks: disks}
	identify(req, vm)
	resp, err := e.hostStep(ctx, a.Host, req, onHost)
	if err == nil && !resp.OK {
		err = errors.New(resp.Error)
	}
	if err != nil {
		e.Log.Error("disk %s attached, but its client address was not recorded (a later start elsewhere only fences what it sees): %v", a.Target, err)
		return
	}
	n := 0
	if resp.Claim != nil {
		for _, d := range disks {
			n += len(resp.Claim.Images[d.Image()])
		}
	}
	e.Log.Info("recorded %d client address(es) of the attached disk %s on %s", n, a.Target, a.Host)
}
