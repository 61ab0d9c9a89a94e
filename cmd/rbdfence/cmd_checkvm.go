package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/checkjson"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// vmCheck is the result of checking one VM.
type vmCheck struct {
	VM      int
	Name    string
	Host    string
	Seq     int
	Running bool
	Claim   *engine.Claim
	Report  *engine.Report
	Error   string
}

// lcmRunning is OpenNebula's LCM state RUNNING (with STATE ACTIVE).
const (
	stateActive = 3
	lcmRunning  = 3
)

// runCheckVMs is "check --vm ID" / "check --all": the VMs' disks come from
// oned; a running VM's recorded instance is kept, every other client is what
// a start would fence; a stopped VM is checked as a start on its last host.
func runCheckVMs(ctx context.Context, cfg *config.Config, vmID int, all, asJSON bool, stdout, stderr io.Writer) error {
	one, err := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	if err != nil {
		return &configError{fmt.Errorf("check --vm/--all reads the VMs from oned: %w (check opennebula.endpoint and opennebula.auth_file)", err)}
	}
	var vms []*opennebula.VMInfo
	if all {
		vms, err = one.VMs(ctx)
	} else {
		var vm *opennebula.VMInfo
		vm, err = one.VM(ctx, vmID)
		vms = []*opennebula.VMInfo{vm}
	}
	if err != nil {
		what := "check --all: listing the VMs"
		if !all {
			what = fmt.Sprintf("check --vm %d", vmID)
		}
		return onedError(what, err)
	}
	progress := isTerminal(stderr)
	var results []vmCheck
	found, failed := false, 0
	for i, vm := range vms {
		if progress {
			fmt.Fprintf(stderr, "\rchecking VM %d (%d/%d)...", vm.ID, i+1, len(vms))
		}
		if len(vm.Disks) == 0 && all {
			continue
		}
		r := checkVM(ctx, cfg, vm)
		if r.Error != "" {
			failed++
		}
		if r.Report != nil {
			for _, im := range r.Report.Images {
				for _, c := range im.Clients {
					found = found || c.Action == engine.ActWouldFence
				}
			}
		}
		results = append(results, r)
	}
	if progress {
		fmt.Fprintf(stderr, "\r%s\r", "                                        ")
	}
	if asJSON {
		out := checkjson.VMs{DryRun: true, VMs: []checkjson.VM{}, Errors: failed}
		for _, r := range results {
			v := checkjson.VM{VM: r.VM, Name: r.Name, Host: r.Host, Seq: r.Seq, Running: r.Running, Claim: r.Claim, Report: checkjson.FromReport(r.Report, true), Error: r.Error}
			out.WouldFence += v.Report.WouldFence
			out.VMs = append(out.VMs, v)
		}
		if err := checkjson.Write(stdout, out); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			state := "stopped: checked as a start on its last host"
			if r.Running {
				state = "running: its recorded instance is kept"
			}
			fmt.Fprintf(stdout, "VM %d %s on %s (%s, %s)\n", r.VM, r.Name, r.Host, deploy(r.Seq), state)
			if r.Error != "" {
				fmt.Fprintf(stdout, "  error: %s\n", r.Error)
			}
			if r.Report != nil {
				printReport(stdout, r.Report)
			}
			fmt.Fprintln(stdout)
		}
	}
	switch {
	case failed > 0:
		return fmt.Errorf("check: %d VM(s) could not be checked", failed)
	case found:
		return errFound
	}
	return nil
}

func checkVM(ctx context.Context, cfg *config.Config, vm *opennebula.VMInfo) vmCheck {
	r := vmCheck{VM: vm.ID, Name: vm.Name, Host: vm.Host, Seq: vm.Seq, Running: vm.State == stateActive && vm.LCMState == lcmRunning}
	groups := fencer.Groups(cfg, vm.Disks)
	if len(groups) == 0 {
		r.Report = &engine.Report{DryRun: true, Images: []engine.ImageReport{}}
		return r
	}
	opts, err := fencer.EngineOptions(cfg)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	opts.MissingOK = true
	s, err := fencer.Open(ctx, groups[0].Access, opts)
	if err != nil {
		r.Error = err.Error()
		return r
	}
	defer s.Close()
	pool := fencer.ClaimPool(cfg)
	var res *engine.ClaimResult
	if r.Running {
		res, err = s.Engine.CheckRunning(ctx, pool, vm.ID, groups[0].Images)
	} else {
		res, err = s.Engine.Start(ctx, engine.Who{VM: vm.ID, Seq: vm.Seq, Host: vm.Host, Source: engine.SourceCLI, Run: audit.NewRunID(), Pool: pool}, groups[0].Images, true)
	}
	if res != nil {
		r.Report = res.Report
		if res.Previous != nil {
			r.Claim = res.Previous
		}
	}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}
