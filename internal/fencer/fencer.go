//go:build cgo

// Package fencer is the host-side run of rbdfence as its mains use it: it
// turns configuration and a VM's disks into Ceph connections and engine
// calls, and writes the audit log. It does not print; mains log its results.
package fencer

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

// Access returns the Ceph access for disk d: the disk's own values (from the
// VM definition) where set, the configuration otherwise.
func Access(cfg *config.Config, d vmdisk.Disk) ceph.Config {
	a := ceph.Config{
		Conf: cfg.Ceph.Conf, MonHost: cfg.Ceph.MonHost, User: cfg.Ceph.User, Keyring: cfg.Ceph.Keyring,
		ConnectTimeout: time.Duration(cfg.Timeouts.Connect), OpTimeout: time.Duration(cfg.Timeouts.CephOp),
	}
	if len(d.Monitors) > 0 {
		a.MonHost = strings.Join(d.Monitors, ",")
	}
	if d.User != "" && d.User != a.User {
		a.User = d.User
		if d.Keyring == "" {
			a.Keyring = "/etc/ceph/ceph.client." + d.User + ".keyring"
		}
	}
	if d.Keyring != "" {
		a.Keyring = d.Keyring
	}
	if d.Conf != "" {
		a.Conf = d.Conf
	}
	return a
}

// Group is the disks of a VM that share one Ceph access.
type Group struct {
	Access ceph.Config
	Images []engine.Image
}

// Groups splits disks by Ceph access, in disk order.
func Groups(cfg *config.Config, disks []vmdisk.Disk) []Group {
	var out []Group
	idx := map[string]int{}
	for _, d := range disks {
		a := Access(cfg, d)
		key := strings.Join([]string{a.Conf, a.MonHost, a.User, a.Keyring}, "\x00")
		i, ok := idx[key]
		if !ok {
			i = len(out)
			idx[key] = i
			out = append(out, Group{Access: a})
		}
		out[i].Images = append(out[i].Images, engine.Image{Pool: d.Pool, Namespace: d.Namespace, Name: d.Name, Shareable: d.Shareable, ReadOnly: d.ReadOnly})
	}
	return out
}

// EngineOptions maps the configuration to engine options.
func EngineOptions(cfg *config.Config) (engine.Options, error) {
	allow, err := cfg.AllowPrefixes()
	if err != nil {
		return engine.Options{}, err
	}
	return engine.Options{
		Expire: time.Duration(cfg.Fence.Expire), Allow: allow, Concurrency: cfg.Fence.Concurrency,
		Lease: time.Duration(cfg.Fence.ClaimLease),
	}, nil
}

// Session is one connection and its engine.
type Session struct {
	Cluster *ceph.Cluster
	Engine  *engine.Engine
}

// Open connects with acc and builds an engine with opts.
func Open(ctx context.Context, acc ceph.Config, opts engine.Options) (*Session, error) {
	c, err := ceph.Connect(ctx, acc)
	if err != nil {
		return nil, err
	}
	return &Session{Cluster: c, Engine: engine.New(c, opts)}, nil
}

// Close closes the connection.
func (s *Session) Close() { s.Cluster.Close() }

// Audit appends the fenced clients of r to the configured audit log.
func Audit(cfg *config.Config, r *engine.Report, m audit.Meta) ([]audit.Record, error) {
	recs := audit.FromReport(r, m, time.Now())
	if err := audit.Append(cfg.AuditLog, recs); err != nil {
		return recs, err
	}
	return recs, nil
}

// HostIPs returns this host's own addresses: host_addresses from the config,
// or every address on its interfaces.
func hostIPs(cfg *config.Config) ([]netip.Addr, error) {
	var out []netip.Addr
	if len(cfg.HostAddresses) > 0 {
		for _, s := range cfg.HostAddresses {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("host_addresses: %q: %v", s, err)
			}
			out = append(out, a.Unmap())
		}
		return out, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing this host's addresses: %w", err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out, nil
}

// hostView is this host's own addresses ips with those Ceph learned for our
// client (own): only global unicast ones identify a host, an IPv4 address
// in either form.
func hostView(ips []netip.Addr, own []engine.Addr) engine.HostView {
	v := engine.HostView{Own: ips}
	for _, a := range own {
		if ip := a.IP.Unmap(); ip.IsGlobalUnicast() && !slices.Contains(v.Seen, ip) {
			v.Seen = append(v.Seen, ip)
		}
	}
	slices.SortFunc(v.Seen, netip.Addr.Compare)
	return v
}
