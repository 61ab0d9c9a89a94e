package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/checkjson"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// runCheck implements "check" (dryRun) and "fence".
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer, dryRun bool) error {
	name := "fence"
	if dryRun {
		name = "check"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var c common
	var images listFlag
	c.register(fs)
	fs.Var(&images, "image", "an image, `POOL/IMAGE` or POOL/NAMESPACE/IMAGE (repeatable)")
	vmID := fs.Int("vm", -1, "check: the disks of VM `ID` (from oned)")
	all := fs.Bool("all", false, "check: every VM (from oned), with progress on a terminal")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *vmID >= 0 || *all {
		if !dryRun {
			return usagef("fence: --vm and --all are for check only (a VM is fenced by its start)")
		}
		if len(images) > 0 || (*vmID >= 0 && *all) {
			return usagef("check: give one of --image, --vm or --all")
		}
		cfg, err := c.load()
		if err != nil {
			return err
		}
		ctx, cancel := bounded(ctx, cfg)
		defer cancel()
		return runCheckVMs(ctx, cfg, *vmID, *all, c.json, stdout, stderr)
	}
	if len(images) == 0 {
		return usagef("%s: give at least one --image POOL/IMAGE (check: or --vm ID, --all)", name)
	}
	var imgs []engine.Image
	for _, s := range images {
		pool, ns, img, err := vmdisk.ParseImage(s)
		if err != nil {
			return usagef("%s: %v", name, err)
		}
		imgs = append(imgs, engine.Image{Pool: pool, Namespace: ns, Name: img})
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg, c.verbose)
	start := time.Now()
	ctx, cancel := bounded(ctx, cfg)
	defer cancel()
	opts, err := fencer.EngineOptions(cfg)
	if err != nil {
		return &configError{err}
	}
	s, err := fencer.Open(ctx, fencer.Access(cfg, vmdisk.Disk{}), opts)
	if err != nil {
		recordMetrics(cfg, log, name, start, nil, outcome.Of(err))
		return err
	}
	defer s.Close()
	var r *engine.Report
	if dryRun {
		r = s.Engine.Check(ctx, imgs, engine.Scope{})
	} else {
		r = s.Engine.Fence(ctx, imgs, engine.Scope{}, nil)
		run := audit.NewRunID()
		recs, aerr := fencer.Audit(cfg, r, audit.Meta{Run: run, Op: "fence", Host: cfg.Host()})
		for _, rec := range recs {
			log.WithFields(map[string]any{"run": run, "image": rec.Image, "client": rec.Client, "address": rec.Address,
				"cookie": rec.Cookie, "action": rec.Action, "expire": fmtTime(rec.Expire)}).Info("fenced client")
		}
		if aerr != nil {
			log.WithError(aerr).Error("audit log not written")
		}
	}
	recordMetrics(cfg, log, name, start, r, outcome.Of(r.Err()))
	if c.json {
		if err := checkjson.Write(stdout, checkjson.FromReport(r, dryRun)); err != nil {
			return err
		}
	} else {
		printReport(stdout, r)
	}
	if err := r.Err(); err != nil {
		return err
	}
	if dryRun {
		for _, im := range r.Images {
			for _, cl := range im.Clients {
				if cl.Action == engine.ActWouldFence {
					return errFound
				}
			}
		}
	}
	return nil
}

func printReport(w io.Writer, r *engine.Report) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tCLIENT\tADDRESS\tLOCK COOKIE\tWATCH\tDECISION\tACTION\tEXPIRES")
	for _, im := range r.Images {
		if im.Error != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\terror: %s\t-\n", im.Image, im.Error)
			continue
		}
		if len(im.Clients) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\tclean\tnone\t-\n", im.Image)
		}
		for _, cl := range im.Clients {
			cookie := cl.Cookie
			if cookie == "" {
				cookie = "-"
			}
			watch := "no"
			if cl.Watcher {
				watch = "yes"
			}
			act := string(cl.Action)
			if cl.Error != "" {
				act += ": " + cl.Error
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", im.Image, cl.Client, cl.Address, cookie, watch, cl.Decision, act, fmtTime(cl.Expire))
		}
	}
	for _, cl := range r.Recorded {
		fmt.Fprintf(tw, "(recorded)\t-\t%s\t-\t-\t%s\t%s\t%s\n", cl.Address, cl.Decision, cl.Action, fmtTime(cl.Expire))
	}
	tw.Flush()
	verb := "fenced"
	if r.DryRun {
		verb = "would fence"
		n := 0
		for _, im := range r.Images {
			for _, cl := range im.Clients {
				if cl.Action == engine.ActWouldFence {
					n++
				}
			}
		}
		fmt.Fprintf(w, "%d image(s), %s %d client(s), %d error(s)\n", len(r.Images), verb, n, r.Errors)
		return
	}
	fmt.Fprintf(w, "%d image(s), %s %d client(s), %d error(s)\n", len(r.Images), verb, r.Fenced, r.Errors)
}
