//go:build cgo

// Package fencer is the host-side run of rbdfence as its mains use it: it
// turns configuration and a VM's disks into Ceph connections and engine
// calls, and writes the audit log. It does not print; mains log its results.
package fencer

import (
	"context"
	"net/netip"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hostaddrs"
	"github.com/rbdfence/rbdfence/internal/hoststep"
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

// hostIPs returns this host's own addresses: host_addresses from the
// config, or every address on its interfaces.
func hostIPs(cfg *config.Config) ([]netip.Addr, error) { return hostaddrs.Own(cfg.HostAddresses) }

// hostView is this host's own addresses ips with those Ceph learned for our
// client (own).
func hostView(ips []netip.Addr, own []engine.Addr) engine.HostView {
	return engine.HostView{Own: ips, Seen: engine.SeenIPs(own)}
}

// seenKnown is engine.SeenKnown for the host step's op: a close of a
// window is postmigrate or failmigrate.
func seenKnown(op string, own []engine.Addr) error {
	return engine.SeenKnown(op == hoststep.OpPostmigrate || op == hoststep.OpFailmigrate, own)
}
