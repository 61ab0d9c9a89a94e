package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/collision"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

const claimUsage = "claim: want 'claim show --vm ID', 'claim reset --vm ID [--stime T | --legacy]' or 'claim gc [--apply]' (each with --pool POOL, default one)"

// stateDone is OpenNebula's VM STATE DONE (include/VirtualMachine.h).
const stateDone = 6

// runClaim shows, resets or garbage-collects VM claims.
func runClaim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("%s", claimUsage)
	}
	verb := args[0]
	switch verb {
	case "show", "reset", "gc":
	default:
		return usagef("%s", claimUsage)
	}
	fs := flag.NewFlagSet("claim "+verb, flag.ContinueOnError)
	var c common
	c.register(fs)
	vm := fs.Int("vm", -1, "the VM's `ID`")
	pool := fs.String("pool", "one", "`POOL` holding the claim")
	apply := fs.Bool("apply", false, "gc: reset the claims listed (default: only list them)")
	stime := fs.Int64("stime", 0, "the VM's `STIME` (when oned created it): names the VM among installations sharing the pool (default: oned's)")
	legacy := fs.Bool("legacy", false, "reset: the claim an older rbdfence wrote in the VM's object (no STIME), which is this installation's")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *stime < 0 || (*stime != 0 && *legacy) || (verb == "gc" && (*stime != 0 || *legacy)) || (verb == "show" && *legacy) {
		return usagef("%s", claimUsage)
	}
	if verb != "gc" && *vm < 0 {
		return usagef("claim %s: give --vm ID", verb)
	}
	if verb == "gc" && *vm >= 0 {
		return usagef("claim gc: takes no --vm (it looks at every claim in the pool)")
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	ctx, cancel := bounded(ctx, cfg)
	defer cancel()
	opts, err := fencer.EngineOptions(cfg)
	if err != nil {
		return &configError{err}
	}
	s, err := fencer.Open(ctx, fencer.Access(cfg, vmdisk.Disk{}), opts)
	if err != nil {
		return err
	}
	defer s.Close()
	if verb == "gc" {
		return claimGC(ctx, cfg, s, *pool, *apply, c.json, stdout)
	}
	var who engine.Who
	switch {
	case *legacy:
		who = cliWho(*vm, *pool) // the VM's object, whatever it holds
	default:
		if who, err = vmWho(ctx, cfg, *vm, *pool, *stime); err != nil && verb == "reset" {
			return err
		}
	}
	if verb == "reset" {
		return claimReset(ctx, cfg, s, who, *legacy, c.json, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rbdfence: %v; showing VM %d's object %s\n", err, *vm, engine.ClaimObject(*vm))
		who = cliWho(*vm, *pool)
	}
	cl, _, err := s.Engine.ClaimOf(ctx, who)
	var unknown *engine.UnknownClaimError
	if errors.As(err, &unknown) {
		// Shown all the same: it is what the operator must judge.
		fmt.Fprintf(stderr, "rbdfence: VM %d's object holds a claim from an older rbdfence that is not shown to be this VM's or another's (deploy #%d on %s): "+
			"if no copy of VM %d runs there, 'rbdfence claim reset --vm %d --legacy' removes it\n", *vm, unknown.Recorded.Seq, unknown.Recorded.Host, *vm, *vm)
		cl, err = &unknown.Recorded, nil
	}
	if err != nil {
		return err
	}
	if cl == nil {
		if c.json {
			fmt.Fprintln(stdout, "null")
		} else {
			fmt.Fprintf(stdout, "VM %d has no claim in pool %s\n", *vm, *pool)
		}
		return nil
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(cl)
}

// cliWho is the CLI acting on VM vm's claim in pool.
func cliWho(vm int, pool string) engine.Who {
	host, _ := os.Hostname()
	return engine.Who{VM: vm, Seq: -1, Host: host, Source: engine.SourceCLI, Run: audit.NewRunID(), Pool: pool}
}

// vmWho names VM vm as this installation knows it: stime when given, else
// the STIME and history oned reports, so that only this installation's VM's
// claim is shown or reset (another installation sharing the pool has a VM
// of the same id).
func vmWho(ctx context.Context, cfg *config.Config, vm int, pool string, stime int64) (engine.Who, error) {
	w := cliWho(vm, pool)
	if stime != 0 {
		w.Stime = stime
		return w, nil
	}
	client, err := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	if err != nil {
		return w, &configError{fmt.Errorf("VM %d: cannot ask oned which VM %d is this installation's: %v (check opennebula.endpoint and opennebula.auth_file, or give --stime)", vm, vm, err)}
	}
	octx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeouts.Oned))
	defer cancel()
	info, err := client.VM(octx, vm)
	switch {
	case errors.Is(err, opennebula.ErrNotFound):
		return w, usagef("VM %d is unknown to this installation's oned: its claim may be another installation's; give --stime (its STIME, see 'rados -p %s ls | grep %s') if it is this installation's", vm, pool, engine.ClaimObject(vm))
	case err != nil:
		return w, outcome.Errorf(outcome.Unavailable, "VM %d: cannot ask oned which VM %d is this installation's: %v; give --stime to name it", vm, vm, err)
	}
	w.Stime = info.Stime
	for _, p := range info.History {
		w.History = append(w.History, engine.Placement{Seq: p.Seq, Host: p.Host})
	}
	return w, nil
}

// resetOne empties the claim of w's VM and writes the audit record (op is
// claim-reset or claim-gc). It returns the record and the claim removed.
func resetOne(ctx context.Context, cfg *config.Config, s *fencer.Session, w engine.Who, op string) (*audit.Record, *engine.Claim, error) {
	prev, err := s.Engine.ResetClaim(ctx, w)
	if err != nil {
		return nil, nil, err
	}
	rec := audit.Record{Time: time.Now().UTC(), Run: w.Run, Op: op, VM: audit.VMOf(w.VM), Action: "claim-reset", Result: "ok"}
	if prev != nil {
		rec.Host = prev.Host
	}
	if err := audit.Append(cfg.AuditLog, []audit.Record{rec}); err != nil {
		return &rec, prev, fmt.Errorf("VM %d: claim reset, but the audit log %s was not written: %w", w.VM, cfg.AuditLog, err)
	}
	return &rec, prev, nil
}

// claimReset is `claim reset --vm ID`: the way out of a claim that refuses
// every start (a lost postmigrate, a host renamed). It resets this
// installation's VM's claim only (oned's STIME names it, or --stime;
// --legacy: the VM's object as an older version wrote it). It refuses
// while a run holds the claim's lease, writes the audit log and raises an
// event on the VM (oned, else the spool).
func claimReset(ctx context.Context, cfg *config.Config, s *fencer.Session, w engine.Who, legacy, asJSON bool, stdout io.Writer) error {
	vm, pool := w.VM, w.Pool
	if legacy {
		cl, err := s.Engine.ReadClaim(ctx, pool, vm)
		if err != nil {
			return err
		}
		if cl != nil && cl.Stime != 0 {
			return usagef("VM %d: the claim in %s/%s was written by this version for the VM created at %s, not by an older one: reset it with --stime %d",
				vm, pool, engine.ClaimObject(vm), time.Unix(cl.Stime, 0).UTC().Format(time.RFC3339), cl.Stime)
		}
	}
	rec, prev, err := resetOne(ctx, cfg, s, w, "claim-reset")
	if err != nil {
		return err
	}
	if _, perr := collision.Publish(context.WithoutCancel(ctx), cfg, collision.Events([]audit.Record{*rec}, "cli/claim-reset")); perr != nil {
		var de *events.DeferredError
		if !errors.As(perr, &de) {
			return fmt.Errorf("VM %d: claim reset; the event could be neither sent nor spooled (it is in the audit log %s): %w", vm, cfg.AuditLog, perr)
		}
	}
	if asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{"vm": vm, "pool": pool, "removed": prev})
	}
	if prev == nil {
		fmt.Fprintf(stdout, "VM %d had no claim in pool %s (audited)\n", vm, pool)
		return nil
	}
	fmt.Fprintf(stdout, "VM %d: claim of %s on %s removed (audited); the next start claims the VM afresh\n", vm, deploy(prev.Seq), prev.Host)
	return nil
}

// gcEntry is one claim claim gc looked at.
type gcEntry struct {
	VM     int    `json:"vm"`
	Host   string `json:"host,omitempty"`
	Seq    int    `json:"seq"`
	Stime  int64  `json:"stime,omitempty"`
	Object string `json:"object"`
	Reason string `json:"reason"`
	// Collect: the claim is this installation's VM's, which oned reports
	// DONE (reset with --apply); the others are listed, never reset.
	Collect bool   `json:"collect"`
	Reset   bool   `json:"reset"`
	Error   string `json:"error,omitempty"`
}

// claimGC is `claim gc`: the claims of this installation's VMs that oned
// reports DONE. A claim is this installation's when oned knows its VM with
// the claim's STIME (a claim an older version wrote: when it is shown to
// be that VM's, engine.Claim.BelongsTo). Claims oned does not know (another
// installation's VM, or one purged from oned's database) and those of
// another VM of the same id are listed, never reset. Without --apply it
// only lists them. A VM oned cannot be asked about is never collected.
func claimGC(ctx context.Context, cfg *config.Config, s *fencer.Session, pool string, apply, asJSON bool, stdout io.Writer) error {
	oids, err := s.Cluster.ClaimObjects(ctx, pool)
	if err != nil {
		return fmt.Errorf("listing the claims in pool %s: %w", pool, err)
	}
	client, err := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	if err != nil {
		return &configError{fmt.Errorf("claim gc needs oned: %v (check opennebula.endpoint and opennebula.auth_file)", err)}
	}
	out := []gcEntry{}
	failed := 0
	vms := map[int]*opennebula.VMInfo{}
	for _, oid := range oids {
		id, _, _ := engine.ParseClaimObject(oid)
		cl, err := s.Engine.ReadClaimObject(ctx, pool, oid)
		if err != nil || cl == nil {
			continue // already reset, or corrupt: 'claim reset' handles it
		}
		vm, known := vms[id]
		if !known {
			octx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeouts.Oned))
			vm, err = client.VM(octx, id)
			cancel()
			switch {
			case errors.Is(err, opennebula.ErrNotFound):
				vm = nil
			case err != nil:
				return fmt.Errorf("claim gc: cannot ask oned about VM %d, nothing collected after it: %w", id, err)
			}
			vms[id] = vm
		}
		en := gcEntry{VM: id, Host: cl.Host, Seq: cl.Seq, Stime: cl.Stime, Object: oid}
		w := cliWho(id, pool)
		switch {
		case vm == nil:
			en.Reason = "unknown to this installation's oned (another installation's VM, or one purged from oned's database): not collected; 'claim reset --vm " + strconv.Itoa(id) + " --stime T' removes it if it is this installation's"
			out = append(out, en)
			continue
		case cl.Stime != 0 && cl.Stime != vm.Stime:
			continue // another VM of the same id: not this installation's
		case vm.State != stateDone:
			continue
		}
		w.Stime = vm.Stime
		for _, p := range vm.History {
			w.History = append(w.History, engine.Placement{Seq: p.Seq, Host: p.Host})
		}
		if !cl.BelongsTo(w) {
			en.Reason = "written by an older rbdfence and not shown to be this installation's VM's: not collected; 'claim reset --vm " + strconv.Itoa(id) + " --legacy' removes it if it is"
			out = append(out, en)
			continue
		}
		en.Reason, en.Collect = "DONE in oned", true
		if apply {
			if _, _, err := resetOne(ctx, cfg, s, w, "claim-gc"); err != nil {
				en.Error = err.Error()
				failed++
			} else {
				en.Reset = true
			}
		}
		out = append(out, en)
	}
	if asJSON {
		if err := json.NewEncoder(stdout).Encode(out); err != nil {
			return err
		}
	} else {
		n := 0
		for _, en := range out {
			what := "left alone"
			switch {
			case en.Reset:
				what = "reset"
			case en.Error != "":
				what = "NOT reset: " + en.Error
			case en.Collect:
				what, n = "would reset", n+1
			}
			fmt.Fprintf(stdout, "VM %d (%s on %s, %s): %s\n", en.VM, deploy(en.Seq), en.Host, en.Reason, what)
		}
		if !apply && n > 0 {
			fmt.Fprintf(stdout, "dry run: %d claim(s) to reset; run 'rbdfence claim gc --apply' to reset them\n", n)
		}
	}
	if failed > 0 {
		return fmt.Errorf("claim gc: %d claim(s) not reset (see above)", failed)
	}
	return nil
}
