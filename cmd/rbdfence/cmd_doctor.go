package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"sort"

	flag "github.com/spf13/pflag"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/doctor"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/fencer"
	"github.com/rbdfence/rbdfence/internal/hostfence"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// cephProbe is the real Ceph side of the doctor's checks.
type cephProbe struct {
	s   *fencer.Session
	cfg *config.Config
}

func (p cephProbe) Describe() string {
	mons := p.cfg.Ceph.MonHost
	if mons == "" {
		mons = "the monitors in " + p.cfg.Ceph.Conf
	}
	return fmt.Sprintf("%s as client.%s", mons, p.cfg.Ceph.User)
}

func (p cephProbe) ReadProbe(ctx context.Context, pool string) error {
	_, _, err := p.s.Cluster.ReadObject(ctx, pool, "rbdfence.doctor.probe")
	if err == nil || errors.Is(err, engine.ErrObjectNotFound) {
		return nil
	}
	return fmt.Errorf("reading pool %s: %v", pool, err)
}

func (p cephProbe) CanBlocklist(ctx context.Context) error { return p.s.Cluster.CanBlocklist(ctx) }

func (p cephProbe) SeenAddrs() []netip.Addr { return engine.SeenIPs(p.s.Cluster.OwnAddrs()) }
func (p cephProbe) Close()                  { p.s.Close() }

// liveHostFences: the hosts whose fence-host entries are still in the
// blocklist (from the audit log of this machine).
func liveHostFences(ctx context.Context, cfg *config.Config) ([]doctor.HostFence, error) {
	recs, _, err := audit.Read(cfg.AuditLog)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", cfg.AuditLog, err)
	}
	byAddr := map[string][]string{}
	for _, r := range recs {
		if r.Op == hostfence.Op && r.Result == "ok" && !slices.Contains(byAddr[r.Address], r.Host) {
			byAddr[r.Address] = append(byAddr[r.Address], r.Host)
		}
	}
	if len(byAddr) == 0 {
		return nil, nil
	}
	opts, err := fencer.EngineOptions(cfg)
	if err != nil {
		return nil, err
	}
	s, err := fencer.Open(ctx, fencer.Access(cfg, vmdisk.Disk{}), opts)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	list, err := s.Cluster.BlocklistList(ctx)
	if err != nil {
		return nil, err
	}
	hosts := map[string]*doctor.HostFence{}
	var out []doctor.HostFence
	for _, e := range list {
		for _, h := range byAddr[e.Addr] {
			hf := hosts[h]
			if hf == nil {
				hf = &doctor.HostFence{Host: h}
				hosts[h] = hf
			}
			hf.Entries++
			if e.Until.After(hf.Until) {
				hf.Until = e.Until
			}
		}
	}
	for _, hf := range hosts {
		out = append(out, *hf)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out, nil
}

var errDoctor = errors.New("doctor found problems")

// runDoctor checks config, Ceph access and caps, the installed hook and
// wrappers, the VM_MAD setting and oned; one line per check.
func runDoctor(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	var c common
	c.register(fs)
	root := fs.String("root", "/", "the installation's filesystem root, `DIR` (for packaging checks)")
	role := fs.String("role", "auto", "what to check, `ROLE`: auto (what is installed), host, frontend or all")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	exe, _ := os.Executable()
	o := doctor.Options{Root: *root, ConfigPath: config.Path(c.configPath), Installer: doctor.Installer(*root, exe), Version: version}
	switch *role {
	case "auto":
		o.Frontend, o.Host = doctor.Roles(*root)
	case "host":
		o.Host = true
	case "frontend":
		o.Frontend = true
	case "all":
		o.Frontend, o.Host = true, true
	default:
		return usagef("doctor: --role must be auto, host, frontend or all")
	}
	cfg, err := c.load()
	if err != nil {
		o.ConfigErr = err
	} else {
		o.Config = cfg
		o.Connect = func(ctx context.Context, cfg *config.Config) (doctor.Ceph, error) {
			opts, err := fencer.EngineOptions(cfg)
			if err != nil {
				return nil, err
			}
			s, err := fencer.Open(ctx, fencer.Access(cfg, vmdisk.Disk{}), opts)
			if err != nil {
				return nil, err
			}
			return cephProbe{s: s, cfg: cfg}, nil
		}
		o.HostFences = func(ctx context.Context) ([]doctor.HostFence, error) {
			return liveHostFences(ctx, cfg)
		}
		var cancel context.CancelFunc
		ctx, cancel = bounded(ctx, cfg)
		defer cancel()
	}
	results := doctor.Run(ctx, o)
	failed := 0
	for _, r := range results {
		if !r.OK {
			failed++
		}
	}
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	} else {
		for _, r := range results {
			if r.OK {
				fmt.Fprintf(stdout, "PASS  %-15s %s\n", r.Check, r.Detail)
			} else {
				fmt.Fprintf(stdout, "FAIL  %-15s %s; fix: %s\n", r.Check, r.Detail, r.Fix)
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d checks failed", errDoctor, failed, len(results))
	}
	return nil
}
