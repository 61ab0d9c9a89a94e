package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// runClaim shows a VM's claim record.
func runClaim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "show" {
		return usagef("claim: want 'claim show --vm ID --pool POOL'")
	}
	fs := flag.NewFlagSet("claim show", flag.ContinueOnError)
	var c common
	c.register(fs)
	vm := fs.Int("vm", -1, "VM id")
	pool := fs.String("pool", "one", "pool holding the claim")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *vm < 0 {
		return usagef("claim show: give --vm ID")
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
