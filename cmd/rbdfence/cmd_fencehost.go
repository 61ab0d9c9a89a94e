package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/collision"
	"github.com/rbdfence/rbdfence/internal/hostaddrs"
	"github.com/rbdfence/rbdfence/internal/hostfence"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// runFenceHost is "fence-host": OpenNebula's HA hook's fence. The host comes
// from --host, or as host_error.rb hands it to ft/fence_host.sh: the host's
// XML, base64, on stdin (share/hooks/ft/host_error.rb:207-212 in
// release-7.4.0). Exit 0 only when the fence is complete.
func runFenceHost(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fence-host", flag.ContinueOnError)
	var c common
	c.register(fs)
	hostArg := fs.String("host", "", "the host's `NAME` or ID (default: its XML, base64, on stdin, as OpenNebula's HA hook sends it)")
	whole := fs.Bool("whole-address", false, "also blocklist every address of the host as a whole (ip:0/0): every Ceph client there, OSDs included")
	quiet := fs.Duration("quiet", hostfence.DefaultQuiet, "refuse a host that oned heard from less than `D` ago")
	var addrs listFlag
	fs.Var(&addrs, "host-addr", "an `IP` address the host's Ceph clients use (repeatable; default: the host template's "+opennebula.AttrHostAddresses+", else its name resolved)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var ips []netip.Addr
	for _, a := range addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil || !ip.IsValid() || ip.IsUnspecified() {
			return usagef("fence-host: --host-addr %q is not an IP address", a)
		}
		ips = append(ips, ip.Unmap())
	}
	if *quiet < 0 {
		return usagef("fence-host: --quiet must not be negative")
	}
	hostID := -1
	if *hostArg == "" {
		if isTerminal(stdin) {
			fmt.Fprintln(stderr, "rbdfence fence-host: no --host given: reading the host's XML, base64, from stdin, as OpenNebula's HA hook sends it (end with Ctrl-D; or give --host NAME)")
		}
		h, err := hostfence.ReadHookInput(stdin)
		if err != nil {
			return usagef("%v (or give --host NAME)", err)
		}
		hostID = h.ID
	}
	cfg, err := c.load()
	if err != nil {
		return err
	}
	start := time.Now()
	log := newLogger(stderr, cfg, c.verbose)
	ctx, cancel := bounded(ctx, cfg)
	defer cancel()
	fail := func(err error) error {
		recordMetrics(cfg, log, hostfence.Op, start, nil, outcome.Of(err))
		return err
	}
	onedErr := func(what string, err error) error {
		switch {
		case errors.Is(err, opennebula.ErrUnreachable), errors.Is(err, opennebula.ErrAuthentication):
			return outcome.Errorf(outcome.Unavailable, "fence-host: %s: %w", what, err)
		case errors.Is(err, opennebula.ErrNotFound):
			return outcome.Errorf(outcome.Usage, "fence-host: %s: %w", what, err)
		}
		return fmt.Errorf("fence-host: %s: %w", what, err)
	}
	one, err := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	if err != nil {
		return fail(&configError{err})
	}
	// The state comes from oned now, never from the (older) hook input.
	var host *opennebula.HostInfo
	if hostID >= 0 {
		host, err = one.Host(ctx, hostID)
	} else {
		host, err = one.HostByName(ctx, *hostArg)
	}
	if err != nil {
		return fail(onedErr("reading the host", err))
	}
	if err := hostfence.Eligible(host, time.Now(), *quiet); err != nil {
		return fail(err)
	}
	// The host's identity: what the operator said (--host-addr, else the
	// host template's addresses), else its name resolved.
	ips, from, err := hostaddrs.Of(ctx, host, ips)
	if err != nil {
		return fail(usagef("fence-host: %v; nothing was fenced", err))
	}
	// A fence by address cannot tell the host from another that shows
	// Ceph the same address (hosts behind one NAT toward Ceph).
	pool, err := one.Hosts(ctx)
	if err != nil {
		return fail(onedErr("listing the hosts", err))
	}
	if other, a, ok := hostaddrs.SharedWith(host.Name, ips, pool); ok {
		return fail(usagef("fence-host: refused, nothing fenced: hosts %s and %s both have address %s (%s of %s): a fence by address would fence %s's clients too; give each host its own address toward Ceph (README: Hosts behind NAT)",
			host.Name, other, a, opennebula.AttrHostAddresses, other, other))
	}
	vms, err := one.VMsOnHost(ctx, host.Name)
	if err != nil {
		return fail(onedErr("listing the VMs on "+host.Name, err))
	}
	run := audit.NewRunID()
	l := log.WithField("op", hostfence.Op).WithField("host", host.Name).WithField("run", run)
	l.Debugf("oned: host and %d VM(s) read in %s", len(vms), time.Since(start).Round(time.Millisecond))
	l.Infof("host %s (%d) is %s: fencing the Ceph clients of %d VM(s) (host addresses %v, from %s, and those its claims record)", host.Name, host.ID, opennebula.HostStateName(host.State), len(vms), ips, from)
	res, err := hostfence.Run(ctx, cfg, hostfence.Request{Host: host, VMs: vms, HostIPs: ips, WholeAddress: *whole, Run: run})
	if res == nil {
		return fail(&configError{err})
	}
	if err != nil {
		l.Warn(err.Error()) // the audit log only: the fence itself is in res
	}
	for _, v := range res.VMs {
		vl := l.WithField("vm", v.VM)
		switch {
		case v.Error != "":
			vl.Errorf("VM %d: fence incomplete: %s", v.VM, v.Error)
		case v.Elsewhere != "":
			vl.Infof("VM %d: its claim names host %s: its instance there was left alone", v.VM, v.Elsewhere)
		default:
			vl.Infof("VM %d: fenced %d client(s): %s", v.VM, len(v.Fenced), strings.Join(v.Fenced, " "))
		}
	}
	for _, c := range res.Clusters {
		if c.Result != nil {
			l.Debugf("cluster %s: took %v ms", c.Monitors, c.Result.Took)
		}
	}
	for _, w := range res.Whole {
		l.Warnf("blocklisted the whole address %s (every client on it)", w)
	}
	// Events: one per VM (its user template), one summary on the host.
	if _, perr := collision.Publish(ctx, cfg, hostfence.Events(res)); perr != nil {
		l.Warnf("VM events: %v", perr)
	}
	tpl, line := hostfence.HostSummary(res)
	if uerr := one.UpdateHostTemplate(ctx, host.ID, tpl); uerr != nil {
		l.Warnf("host summary event not recorded in oned (%v); it is in the audit log", uerr)
	}
	l.Info(line)
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout, line)
	}
	ferr := res.Err()
	recordMetrics(cfg, log, hostfence.Op, start, res.Report(), outcome.Of(ferr))
	if ferr != nil {
		return fmt.Errorf("fence-host %s: %w; the VMs must not be rescheduled yet: fix it and run fence-host again", host.Name, ferr)
	}
	return nil
}
