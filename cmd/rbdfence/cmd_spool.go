package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"

	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/hostspool"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// runSpool is the host side of the front-end's event collection
// (internal/hostspool): "spool list" prints this host's pending events,
// "spool ack" removes those whose ids are on stdin. One JSON answer on
// stdout, always, also on failure.
func runSpool(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "ack") {
		return usagef("spool: want 'spool list' or 'spool ack' (the front-end's event collection runs them over ssh)")
	}
	op := args[0]
	fs := flag.NewFlagSet("spool "+op, flag.ContinueOnError)
	configPath := fs.String("config", "", "config `FILE` (default $RBDFENCE_CONFIG or "+config.DefaultPath+")")
	fail := func(kind outcome.Kind, err error) error {
		if op == "list" {
			_ = json.NewEncoder(stdout).Encode(&hostspool.List{Version: hostspool.Version, Error: err.Error(), Events: []events.Event{}})
		} else {
			_ = json.NewEncoder(stdout).Encode(&hostspool.AckResult{Version: hostspool.Version, Error: err.Error()})
		}
		return outcome.Errorf(kind, "%w", err)
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		if isHelp(err) {
			return err
		}
		return fail(outcome.Usage, err)
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return fail(outcome.Usage, err)
	}
	var ack *hostspool.Ack
	if op == "ack" {
		if ack, err = hostspool.ReadAck(stdin); err != nil {
			return fail(outcome.Usage, err)
		}
	}
	if _, err := os.Lstat(cfg.SpoolDir); errors.Is(err, os.ErrNotExist) {
		// No spool yet (this host never spooled an event): nothing to
		// list or remove, and an answer creates nothing.
		return json.NewEncoder(stdout).Encode(noSpool(op, cfg.SpoolDir, ack))
	}
	sp, err := events.OpenSpool(cfg.SpoolDir)
	if err != nil {
		return fail(outcome.Failure, hostspool.WithFix(err, cfg.SpoolDir))
	}
	// The spool's lock is held by a flush at most for timeouts.total.
	ctx, cancel := bounded(ctx, cfg)
	defer cancel()
	if op == "list" {
		l := hostspool.ListSpool(ctx, sp)
		if err := json.NewEncoder(stdout).Encode(l); err != nil {
			return err
		}
		if !l.OK {
			return outcome.Errorf(outcome.Failure, "spool list: %s", l.Error)
		}
		return nil
	}
	r := hostspool.AckSpool(ctx, sp, ack)
	if err := json.NewEncoder(stdout).Encode(r); err != nil {
		return err
	}
	if !r.OK {
		return outcome.Errorf(outcome.Failure, "spool ack: %s", r.Error)
	}
	return nil
}

// noSpool is the answer of "spool list" or "spool ack" where the spool
// directory dir does not exist: no event listed, every acknowledged one
// missing.
func noSpool(op, dir string, ack *hostspool.Ack) any {
	if op == "list" {
		return &hostspool.List{Version: hostspool.Version, OK: true, Spool: dir, Events: []events.Event{}}
	}
	return &hostspool.AckResult{Version: hostspool.Version, OK: true, Missing: append(append([]string{}, ack.IDs...), ack.Gone...)}
}
