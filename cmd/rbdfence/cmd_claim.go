package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/collision"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

const claimUsage = "claim: want 'claim show --vm ID', 'claim reset --vm ID' or 'claim gc [--apply]' (each with --pool POOL, default one)"

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
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
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
	switch verb {
	case "reset":
		return claimReset(ctx, cfg, s, *pool, *vm, c.json, stdout)
	case "gc":
		return claimGC(ctx, cfg, s, *pool, *apply, c.json, stdout)
	}
	cl, err := s.Engine.ReadClaim(ctx, *pool, *vm)
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

// resetOne empties VM vm's claim and writes the audit record (op is
// claim-reset or claim-gc). It returns the record and the claim removed.
func resetOne(ctx context.Context, cfg *config.Config, s *fencer.Session, pool string, vm int, op string) (*audit.Record, *engine.Claim, error) {
	run := audit.NewRunID()
	host, _ := os.Hostname()
	who := engine.Who{VM: vm, Seq: -1, Host: host, Source: engine.SourceCLI, Run: run, Pool: pool}
	prev, err := s.Engine.ResetClaim(ctx, who)
	if err != nil {
		return nil, nil, err
	}
	rec := audit.Record{Time: time.Now().UTC(), Run: run, Op: op, VM: vm, Action: "claim-reset", Result: "ok"}
	if prev != nil {
		rec.Host = prev.Host
	}
	if err := audit.Append(cfg.AuditLog, []audit.Record{rec}); err != nil {
		return &rec, prev, fmt.Errorf("VM %d: claim reset, but the audit log %s was not written: %w", vm, cfg.AuditLog, err)
	}
	return &rec, prev, nil
}

// claimReset is `claim reset --vm ID`: the way out of a claim that refuses
// every start (a lost postmigrate, a host renamed). It refuses while a run
// holds the claim's lease, writes the audit log and raises an event on the
// VM (oned, else the spool).
func claimReset(ctx context.Context, cfg *config.Config, s *fencer.Session, pool string, vm int, asJSON bool, stdout io.Writer) error {
	rec, prev, err := resetOne(ctx, cfg, s, pool, vm, "claim-reset")
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
	Reason string `json:"reason"`
	Reset  bool   `json:"reset"`
	Error  string `json:"error,omitempty"`
}

// claimGC is `claim gc`: the claims of VMs that oned reports DONE or does
// not know. Without --apply it only lists them. A VM oned cannot be asked
// about is never collected.
func claimGC(ctx context.Context, cfg *config.Config, s *fencer.Session, pool string, apply, asJSON bool, stdout io.Writer) error {
	ids, err := s.Cluster.ClaimVMs(ctx, pool)
	if err != nil {
		return fmt.Errorf("listing the claims in pool %s: %w", pool, err)
	}
	client, err := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	if err != nil {
		return &configError{fmt.Errorf("claim gc needs oned: %v (check opennebula.endpoint and opennebula.auth_file)", err)}
	}
	out := []gcEntry{}
	failed := 0
	for _, id := range ids {
		cl, err := s.Engine.ReadClaim(ctx, pool, id)
		if err != nil || cl == nil {
			continue // already reset, or corrupt: 'claim reset' handles it
		}
		octx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeouts.Oned))
		vm, err := client.VM(octx, id)
		cancel()
		reason := ""
		switch {
		case errors.Is(err, opennebula.ErrNotFound):
			reason = "unknown to oned"
		case err != nil:
			return fmt.Errorf("claim gc: cannot ask oned about VM %d, nothing collected after it: %w", id, err)
		case vm.State == stateDone:
			reason = "DONE in oned"
		default:
			continue
		}
		en := gcEntry{VM: id, Host: cl.Host, Seq: cl.Seq, Reason: reason}
		if apply {
			if _, _, err := resetOne(ctx, cfg, s, pool, id, "claim-gc"); err != nil {
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
		for _, en := range out {
			what := "would reset"
			switch {
			case en.Reset:
				what = "reset"
			case en.Error != "":
				what = "NOT reset: " + en.Error
			}
			fmt.Fprintf(stdout, "VM %d (%s on %s, %s): %s\n", en.VM, deploy(en.Seq), en.Host, en.Reason, what)
		}
		if !apply && len(out) > 0 {
			fmt.Fprintf(stdout, "dry run: %d claim(s) listed; run 'rbdfence claim gc --apply' to reset them\n", len(out))
		}
	}
	if failed > 0 {
		return fmt.Errorf("claim gc: %d claim(s) not reset (see above)", failed)
	}
	return nil
}
