package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/collision"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/hostfence"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// entry is one blocklist entry matched with our audit log.
type entry struct {
	Address  string    `json:"address"`
	Until    time.Time `json:"until"`
	TimeLeft string    `json:"time_left"`
	Ours     bool      `json:"ours"`
	VM       *int      `json:"vm"` // null: no VM (not ours, or a whole-address fence)
	Image    string    `json:"image,omitempty"`
	Host     string    `json:"host,omitempty"`
	FencedAt time.Time `json:"fenced_at,omitzero"`
	Op       string    `json:"op,omitempty"`
}

func openAdmin(ctx context.Context, c *common) (*config.Config, *fencer.Session, error) {
	cfg, err := c.load()
	if err != nil {
		return nil, nil, err
	}
	opts, err := fencer.EngineOptions(cfg)
	if err != nil {
		return nil, nil, &configError{err}
	}
	s, err := fencer.Open(ctx, fencer.Access(cfg, vmdisk.Disk{}), opts)
	if err != nil {
		return nil, nil, err
	}
	return cfg, s, nil
}

// entries lists the blocklist and marks the entries our audit log explains.
func entries(ctx context.Context, cfg *config.Config, s *fencer.Session) ([]entry, error) {
	list, err := s.Cluster.BlocklistList(ctx)
	if err != nil {
		return nil, err
	}
	recs, _, err := audit.Read(cfg.AuditLog)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", cfg.AuditLog, err)
	}
	last := map[string]audit.Record{}
	for _, r := range recs {
		if r.Result == "ok" && r.Op != "unfence" {
			last[r.Address] = r
		}
	}
	now := time.Now()
	var out []entry
	for _, e := range list {
		en := entry{Address: e.Addr, Until: e.Until, TimeLeft: e.Until.Sub(now).Round(time.Second).String()}
		if r, ok := last[e.Addr]; ok {
			en.Ours, en.Image, en.Host, en.FencedAt, en.Op = true, r.Image, r.Host, r.Time, r.Op
			en.VM = r.VM
		}
		out = append(out, en)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Until.Before(out[j].Until) })
	return out, nil
}

// runBlocklist implements "blocklist ls".
func runBlocklist(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "ls" {
		return usagef("blocklist: want 'blocklist ls [--all] [--json]'")
	}
	fs := flag.NewFlagSet("blocklist ls", flag.ContinueOnError)
	var c common
	c.register(fs)
	all := fs.Bool("all", false, "also show entries rbdfence did not add")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	cfg, s, err := openAdmin(ctx, &c)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := bounded(ctx, cfg)
	defer cancel()
	es, err := entries(ctx, cfg, s)
	if err != nil {
		return err
	}
	shown := []entry{}
	for _, e := range es {
		if e.Ours || *all {
			shown = append(shown, e)
		}
	}
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(shown)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADDRESS\tVM\tIMAGE\tHOST\tEXPIRES\tTIME LEFT\tFENCED AT")
	for _, e := range shown {
		vm := "-"
		if e.VM != nil {
			vm = fmt.Sprint(*e.VM)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Address, vm, dash(e.Image), dash(e.Host), fmtTime(e.Until), e.TimeLeft, fmtTime(e.FencedAt))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d entr(ies) shown, %d in the blocklist\n", len(shown), len(es))
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// runUnfence removes blocklist entries we added: one address, or every entry
// of a VM. It asks for confirmation unless --yes.
func runUnfence(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("unfence", flag.ContinueOnError)
	var c common
	c.register(fs)
	vm := fs.Int("vm", -1, "remove every entry rbdfence added for VM `ID`")
	host := fs.String("host", "", "remove every entry fence-host added for host `NAME` (once it is repaired)")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	var addrArg string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		addrArg, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	given := 0
	for _, g := range []bool{addrArg != "", *vm >= 0, *host != ""} {
		if g {
			given++
		}
	}
	if given != 1 {
		return usagef("unfence: give exactly one of ADDRESS, --vm ID or --host NAME")
	}
	var want engine.Addr
	if addrArg != "" {
		a, err := engine.ParseAddr(addrArg)
		if err != nil || !a.Exact() {
			return usagef("unfence: %q is not an exact client address ip:port/nonce", addrArg)
		}
		want = a
	}
	cfg, s, err := openAdmin(ctx, &c)
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := bounded(ctx, cfg)
	defer cancel()
	es, err := entries(ctx, cfg, s)
	if err != nil {
		return err
	}
	var fencedHost map[string]bool
	if *host != "" {
		if fencedHost, err = hostFenced(cfg, *host); err != nil {
			return err
		}
	}
	var targets []entry
	for _, e := range es {
		if (addrArg != "" && e.Address == want.String()) || (*vm >= 0 && e.VM != nil && *e.VM == *vm) || fencedHost[e.Address] {
			targets = append(targets, e)
		}
	}
	if len(targets) == 0 {
		return fmt.Errorf("unfence: no matching blocklist entry (see: rbdfence blocklist ls --all)")
	}
	if !*yes {
		if !isTerminal(stdin) {
			return usagef("unfence: %d entr(ies) would be removed; confirm with --yes when not on a terminal", len(targets))
		}
		fmt.Fprintf(stdout, "Remove %d blocklist entr(ies)? The clients can write again. [y/N] ", len(targets))
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			return fmt.Errorf("unfence: not confirmed; nothing removed")
		}
	}
	run := audit.NewRunID()
	var recs []audit.Record
	for _, e := range targets {
		a, _ := engine.ParseAddr(e.Address)
		if err := s.Cluster.Unblocklist(ctx, a); err != nil {
			return err // a CapError names the cap to grant
		}
		rec := audit.Record{Time: time.Now().UTC(), Run: run, Op: "unfence", Host: e.Host, Image: e.Image,
			Address: e.Address, Action: "unblocklisted", Result: "ok"}
		what := "not added by rbdfence"
		switch {
		case e.VM != nil:
			rec.VM = e.VM
			what = fmt.Sprintf("VM %d, image %s", *e.VM, dash(e.Image))
		case e.Ours:
			what = "added by rbdfence " + dash(e.Op) + " for host " + dash(e.Host)
		}
		recs = append(recs, rec)
		fmt.Fprintf(stdout, "unfenced %s (%s)\n", e.Address, what)
	}
	if err := audit.Append(cfg.AuditLog, recs); err != nil {
		fmt.Fprintln(stderr, "rbdfence: audit log not written:", err)
	}
	if _, err := collision.Publish(ctx, cfg, collision.Events(recs, "unfence")); err != nil {
		fmt.Fprintln(stderr, "rbdfence: unfence events:", err)
	}
	return nil
}

// hostFenced returns the addresses fence-host blocklisted for host (by any
// of its runs, whatever fenced them again since), from the audit log.
func hostFenced(cfg *config.Config, host string) (map[string]bool, error) {
	recs, _, err := audit.Read(cfg.AuditLog)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", cfg.AuditLog, err)
	}
	out := map[string]bool{}
	for _, r := range recs {
		if r.Op == hostfence.Op && r.Result == "ok" && strings.EqualFold(r.Host, host) {
			out[r.Address] = true
		}
	}
	return out, nil
}

// isTerminal reports whether r (a reader or writer) is a terminal.
func isTerminal(r any) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
