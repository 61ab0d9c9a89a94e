package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/frontend"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// eventsOptions are the flags of "rbdfence events".
type eventsOptions struct {
	configPath string
	vm         int
	since      string
	json       bool
}

// runEvents lists the collision events recorded in the VMs' user templates
// (one.vmpool.infoextended), or with "flush" delivers the spooled ones.
func runEvents(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "flush" {
		return runEventsFlush(ctx, args[1:], stdout)
	}
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	var o eventsOptions
	fs.StringVar(&o.configPath, "config", "", "config `FILE` (default $RBDFENCE_CONFIG or "+config.DefaultPath+")")
	fs.IntVar(&o.vm, "vm", -1, "only the events of VM `ID`")
	fs.StringVar(&o.since, "since", "", "only events at or after `T`: RFC 3339 time, YYYY-MM-DD, or an age like 24h or 7d")
	fs.BoolVarP(&o.json, "json", "j", false, "print the events as JSON on stdout")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if o.vm < -1 {
		return usagef("events: --vm %d: want a VM id", o.vm)
	}
	since, err := parseSince(o.since, time.Now())
	if err != nil {
		return usagef("events: --since: %v", err)
	}
	cfg, err := loadConfig(o.configPath)
	if err != nil {
		return err
	}
	client, err := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	if err != nil {
		return &configError{err}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeouts.Total))
	defer cancel()
	evs, err := client.ListEvents(ctx, o.vm, since)
	if err != nil {
		return onedError("events: listing the events", err)
	}
	if o.json {
		if evs == nil {
			evs = []events.Event{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(evs)
	}
	if len(evs) == 0 {
		fmt.Fprintln(stdout, "no collision events")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tVM\tHOST\tIMAGE\tCLIENT\tADDRESS\tCOOKIE\tACTION\tEXPIRES\tSOURCE")
	for _, ev := range evs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", fmtTime(ev.Time), ev.VM, cell(ev.Host), cell(ev.Image),
			cell(ev.Client), cell(ev.Address), cell(ev.Cookie), cell(ev.Action), fmtTime(ev.Expire), cell(ev.Source))
	}
	return tw.Flush()
}

// runEventsFlush delivers the spooled events to oned, oldest first: this
// machine's spool, then (unless --no-hosts) every KVM host's, collected
// over ssh (frontend.Collect): hosts hold no oned credentials.
func runEventsFlush(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("events flush", flag.ContinueOnError)
	configPath := fs.String("config", "", "config `FILE` (default $RBDFENCE_CONFIG or "+config.DefaultPath+")")
	asJSON := fs.BoolP("json", "j", false, "print the result as JSON on stdout")
	var hosts stringList
	fs.Var(&hosts, "host", "collect only from host `NAME` (repeatable; any state but it must be in oned's pool)")
	noHosts := fs.Bool("no-hosts", false, "deliver this machine's spool only, collect from no host")
	onedConf := fs.String("oned-conf", "/etc/one/oned.conf", "oned.conf `FILE`, for the VM_MADs that run the kvm driver")
	hostTimeout := fs.String("host-timeout", "", "bound `D` of one host's collection (default timeouts.ssh + timeouts.total)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *noHosts && len(hosts) > 0 {
		return usagef("events flush: --no-hosts and --host exclude each other")
	}
	var perHost time.Duration
	if *hostTimeout != "" {
		d, err := config.ParseDuration(*hostTimeout)
		if err != nil || d <= 0 {
			return usagef("events flush: --host-timeout %q: want a duration like 30s or 2m", *hostTimeout)
		}
		perHost = d
	}
	cfg, err := loadConfig(*configPath)
	if err != nil {
		return err
	}
	if perHost == 0 {
		perHost = frontend.CollectTimeout(cfg)
	}
	spool, err := events.OpenSpool(cfg.SpoolDir)
	if err != nil {
		return fmt.Errorf("events flush: %w", err)
	}
	client, err := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	if err != nil {
		return &configError{err}
	}
	tctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeouts.Total))
	defer cancel()
	sent, ferr := spool.Flush(tctx, client)
	pending, perr := spool.Pending()

	var (
		results []frontend.CollectResult
		note    string
		cerr    error
	)
	if !*noHosts && !errors.Is(ferr, events.ErrUnavailable) {
		results, note, cerr = collectHosts(ctx, cfg, spool, client, hosts, *onedConf, perHost)
	}
	if *asJSON {
		if results == nil {
			results = []frontend.CollectResult{}
		}
		_ = json.NewEncoder(stdout).Encode(map[string]any{"delivered": sent, "pending": len(pending), "spool": spool.Dir(), "hosts": results})
	} else {
		fmt.Fprintf(stdout, "delivered %d event(s); %d still pending in %s\n", sent, len(pending), spool.Dir())
		if note != "" {
			fmt.Fprintln(stdout, note)
		}
		for _, r := range results {
			if r.Failed() {
				fmt.Fprintf(stdout, "host %s: FAILED: delivered %d event(s): %s\n", r.Host, r.Delivered, r.Error)
				continue
			}
			more := ""
			if r.More {
				more = "; more are waiting for the next collection"
			}
			fmt.Fprintf(stdout, "host %s: delivered %d event(s), %d removed from its spool%s\n", r.Host, r.Delivered, r.Acked, more)
		}
	}
	var failed []string
	for _, r := range results {
		if r.Failed() {
			failed = append(failed, r.Host)
		}
	}
	var errs []error
	if ferr != nil {
		errs = append(errs, ferr)
	}
	if perr != nil {
		errs = append(errs, perr)
	}
	if cerr != nil {
		errs = append(errs, cerr)
	}
	if len(failed) > 0 {
		errs = append(errs, fmt.Errorf("%d of %d host(s) not collected: %s (their events stay in their spools)", len(failed), len(results), strings.Join(failed, ", ")))
	}
	if len(errs) > 0 {
		return fmt.Errorf("events flush: %w", errors.Join(errs...))
	}
	return nil
}

// collectHosts collects the spools of the KVM hosts in oned's pool (or of
// names) under the front-end's collection lock. note is a line for the
// operator (oned.conf unreadable: the stock VM_MAD names are used).
func collectHosts(ctx context.Context, cfg *config.Config, spool *events.Spool, client *opennebula.Client,
	names []string, onedConf string, perHost time.Duration) (results []frontend.CollectResult, note string, err error) {
	lctx, cancel := context.WithTimeout(ctx, perHost)
	unlock, err := spool.LockCollect(lctx)
	cancel()
	if err != nil {
		return nil, "", err
	}
	defer unlock()
	octx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Timeouts.Oned))
	pool, err := client.Hosts(octx)
	cancel()
	if err != nil {
		return nil, "", fmt.Errorf("listing the hosts: %w", err)
	}
	mads := frontend.DefaultKVMMads
	if b, rerr := os.ReadFile(onedConf); rerr != nil {
		note = fmt.Sprintf("note: cannot read %s (%v): collecting from hosts whose VM_MAD is %s", onedConf, errors.Unwrap(rerr), strings.Join(mads, " or "))
	} else {
		mads = frontend.KVMMads(b)
	}
	hosts, err := frontend.KVMHosts(pool, mads, names)
	if err != nil {
		return nil, note, usagef("events flush: --host: %v", err)
	}
	if len(hosts) == 0 {
		if note != "" {
			note += "\n"
		}
		note += "no KVM host to collect from (oned's pool has none whose VM_MAD runs the kvm driver, OFFLINE aside)"
	}
	env := &frontend.Env{Cfg: cfg, Stdout: io.Discard, Stderr: io.Discard}
	return env.Collect(ctx, hosts, client, perHost), note, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Type() string { return "string" }

func (s *stringList) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("empty host name")
	}
	*s = append(*s, v)
	return nil
}

// loadConfig reads the config for verbs that need no Ceph flags.
func loadConfig(flagValue string) (*config.Config, error) {
	path := config.Path(flagValue)
	cfg, err := config.Load(path, flagValue != "" || path != config.DefaultPath)
	if err != nil {
		return nil, &configError{err}
	}
	return cfg, nil
}

// parseSince reads --since: "" (no bound), an RFC 3339 time, a date
// (YYYY-MM-DD, UTC) or an age ("90m", "24h", "7d") before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t, nil
	}
	if _, err := strconv.Atoi(s); err == nil {
		return time.Time{}, errors.New("a bare number is ambiguous: give a unit (e.g. 24h, 7d) or a time")
	}
	d, err := config.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%q: want an RFC 3339 time, YYYY-MM-DD or an age like 24h or 7d", s)
	}
	return now.Add(-d), nil
}

// cell is one table cell: "-" for nothing, one line otherwise.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return events.OneLine(s)
}
