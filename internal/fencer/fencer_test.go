//go:build cgo

package fencer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
)

func testConfig() *config.Config {
	c := config.Default()
	c.Ceph.MonHost = "10.0.0.1:6789"
	c.Ceph.Conf = "/etc/ceph/site.conf"
	c.Timeouts.Connect = config.Duration(3 * time.Second)
	c.Timeouts.CephOp = config.Duration(4 * time.Second)
	return c
}

func TestAccess(t *testing.T) {
	base := ceph.Config{Conf: "/etc/ceph/site.conf", MonHost: "10.0.0.1:6789", User: "libvirt", Keyring: "/etc/ceph/ceph.client.libvirt.keyring",
		ConnectTimeout: 3 * time.Second, OpTimeout: 4 * time.Second}
	with := func(f func(*ceph.Config)) ceph.Config { c := base; f(&c); return c }
	for _, tc := range []struct {
		name string
		disk vmdisk.Disk
		want ceph.Config
	}{
		{"config only", vmdisk.Disk{Pool: "one", Name: "a"}, base},
		{"disk monitors win", vmdisk.Disk{Monitors: []string{"10.0.0.2:6789", "10.0.0.3:3300"}},
			with(func(c *ceph.Config) { c.MonHost = "10.0.0.2:6789,10.0.0.3:3300" })},
		{"disk user: its default keyring", vmdisk.Disk{User: "oneadmin"},
			with(func(c *ceph.Config) { c.User, c.Keyring = "oneadmin", "/etc/ceph/ceph.client.oneadmin.keyring" })},
		{"disk user and key file", vmdisk.Disk{User: "oneadmin", Keyring: "/var/lib/one/ceph.key"},
			with(func(c *ceph.Config) { c.User, c.Keyring = "oneadmin", "/var/lib/one/ceph.key" })},
		{"same user as config keeps its keyring", vmdisk.Disk{User: "libvirt"}, base},
		{"disk ceph.conf", vmdisk.Disk{Conf: "/etc/ceph/other.conf"}, with(func(c *ceph.Config) { c.Conf = "/etc/ceph/other.conf" })},
	} {
		if got := Access(testConfig(), tc.disk); got != tc.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tc.name, got, tc.want)
		}
	}
}

func TestGroups(t *testing.T) {
	d := func(name string, mons ...string) vmdisk.Disk {
		return vmdisk.Disk{ID: name, Pool: "one", Name: name, Monitors: mons}
	}
	for _, tc := range []struct {
		name  string
		disks []vmdisk.Disk
		want  [][]string // image names per group, in order
	}{
		{"none", nil, nil},
		{"one access", []vmdisk.Disk{d("a"), d("b")}, [][]string{{"a", "b"}}},
		{"two clusters, disk order kept", []vmdisk.Disk{d("a", "10.0.0.9:6789"), d("b"), d("c", "10.0.0.9:6789")}, [][]string{{"a", "c"}, {"b"}}},
		{"flags carried", []vmdisk.Disk{{Pool: "one", Namespace: "ns", Name: "s", Shareable: true, ReadOnly: true}}, [][]string{{"s"}}},
	} {
		gs := Groups(testConfig(), tc.disks)
		var got [][]string
		for _, g := range gs {
			var names []string
			for _, im := range g.Images {
				names = append(names, im.Name)
			}
			got = append(got, names)
		}
		if len(got) != len(tc.want) || strings.Join(flat(got), ",") != strings.Join(flat(tc.want), ",") {
			t.Errorf("%s: groups %v, want %v", tc.name, got, tc.want)
		}
		if tc.name == "flags carried" {
			im := gs[0].Images[0]
			if im != (engine.Image{Pool: "one", Namespace: "ns", Name: "s", Shareable: true, ReadOnly: true}) {
				t.Errorf("image %+v", im)
			}
		}
	}
}

func flat(g [][]string) []string {
	var out []string
	for _, names := range g {
		out = append(out, strings.Join(names, "+"))
	}
	return out
}

func TestEngineOptions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		allow []string
		want  []netip.Prefix
		err   string
	}{
		{"defaults", nil, nil, ""},
		{"address and CIDR", []string{"10.0.0.7", "192.168.1.9/24"}, []netip.Prefix{netip.MustParsePrefix("10.0.0.7/32"), netip.MustParsePrefix("192.168.1.0/24")}, ""},
		{"bad entry names the key", []string{"node1"}, nil, "fence.allow"},
	} {
		c := testConfig()
		c.Fence.Allow = tc.allow
		o, err := EngineOptions(c)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil || o.Expire != 7*24*time.Hour || o.Lease != time.Minute || o.Concurrency != 16 || len(o.Allow) != len(tc.want) {
			t.Fatalf("%s: %+v %v", tc.name, o, err)
		}
		for i := range tc.want {
			if o.Allow[i] != tc.want[i] {
				t.Errorf("%s: allow %v, want %v", tc.name, o.Allow, tc.want)
			}
		}
	}
}

func TestHostIPs(t *testing.T) {
	c := testConfig()
	c.HostAddresses = []string{"10.0.0.2", "fd00::2"}
	ips, err := hostIPs(c)
	if err != nil || len(ips) != 2 || ips[0] != netip.MustParseAddr("10.0.0.2") || ips[1] != netip.MustParseAddr("fd00::2") {
		t.Fatalf("configured: %v %v", ips, err)
	}
	c.HostAddresses = []string{"node1"}
	if _, err := hostIPs(c); err == nil || !strings.Contains(err.Error(), "host_addresses") {
		t.Fatalf("bad entry: %v", err)
	}
	c.HostAddresses = nil
	ips, err = hostIPs(c)
	if err != nil || len(ips) == 0 {
		t.Fatalf("interfaces: %v %v", ips, err)
	}
	loop := false
	for i, ip := range ips {
		loop = loop || ip.IsLoopback()
		if i > 0 && ips[i].Less(ips[i-1]) {
			t.Fatalf("not sorted: %v", ips)
		}
	}
	if !loop {
		t.Fatalf("interfaces without loopback: %v", ips)
	}
}

func TestAudit(t *testing.T) {
	c := testConfig()
	c.AuditLog = filepath.Join(t.TempDir(), "audit.log")
	r := &engine.Report{Images: []engine.ImageReport{{Image: "one/a", Clients: []engine.ClientReport{
		{Client: "client.1", Address: "10.0.0.5:0/1", Decision: engine.DecideFence, Action: engine.ActUnlocked},
		{Client: "client.2", Address: "10.0.0.6:0/2", Decision: engine.DecideAllowlisted, Action: engine.ActNone},
	}}}, Fenced: 1}
	recs, err := Audit(c, r, audit.Meta{Run: "r1", Op: "start", VM: audit.VMOf(42), Host: "node1"})
	if err != nil || len(recs) != 1 || recs[0].Address != "10.0.0.5:0/1" || *recs[0].VM != 42 {
		t.Fatalf("%+v %v", recs, err)
	}
	if b, _ := os.ReadFile(c.AuditLog); strings.Count(string(b), "\n") != 1 {
		t.Fatalf("audit log %q", b)
	}
	c.AuditLog = filepath.Join(t.TempDir(), "missing-dir", "sub", "\x00bad")
	if recs, err := Audit(c, r, audit.Meta{Run: "r1", Op: "start", VM: audit.VMOf(42)}); err == nil || len(recs) != 1 {
		t.Fatalf("unwritable log: %+v %v (the records must still come back)", recs, err)
	}
}

// TestStepsWithoutCeph: what a host step answers before or instead of
// reaching Ceph, and how a failure is classified.
func TestStepsWithoutCeph(t *testing.T) {
	dir := t.TempDir()
	keyring := filepath.Join(dir, "keyring")
	if err := os.WriteFile(keyring, []byte("[client.libvirt]\n\tkey = AQC1Qg1r+rovKRAAzgVjzGGaHOGLmUQ+WbcxfQ==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	disks := []vmdisk.Disk{{ID: "0", Pool: "one", Name: "one-7-42-0"}}
	for _, tc := range []struct {
		name  string
		edit  func(*config.Config)
		disks []vmdisk.Disk
		ok    bool
		kind  outcome.Kind
		err   string
		// doOnly: FenceDisks (no claim) does not read the host's addresses.
		doOnly bool
	}{
		{name: "no disks: nothing to do", ok: true},
		{name: "bad allowlist", disks: disks, edit: func(c *config.Config) { c.Fence.Allow = []string{"x"} }, kind: outcome.Usage, err: "fence.allow"},
		{name: "bad host_addresses", disks: disks, edit: func(c *config.Config) { c.HostAddresses = []string{"x"} }, kind: outcome.Failure, err: "host_addresses", doOnly: true},
		{name: "Ceph unreachable", disks: disks, kind: outcome.Unavailable, err: "cannot reach Ceph monitors 127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			c.Ceph.MonHost, c.Ceph.Keyring = "127.0.0.1:1", keyring
			c.Timeouts.Connect, c.Timeouts.CephOp = config.Duration(time.Second), config.Duration(time.Second)
			c.AuditLog, c.SpoolDir = filepath.Join(dir, "audit.log"), filepath.Join(dir, "spool")
			if tc.edit != nil {
				tc.edit(c)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req := &hoststep.Request{Op: hoststep.OpStart, VM: 42, Seq: 3, Host: "node1", Run: "r", Source: "frontend", Disks: tc.disks}
			resps := []*hoststep.Response{Do(ctx, c, req)}
			if !tc.doOnly {
				resps = append(resps, FenceDisks(ctx, c, tc.disks, "r", "node1"))
			}
			for _, resp := range resps {
				if resp.OK != tc.ok || resp.Kind != tc.kind || !strings.Contains(resp.Error, tc.err) || (tc.ok && resp.Report == nil) {
					t.Errorf("%s: %+v", resp.Op, resp)
				}
			}
		})
	}
}

// hostView keeps, of the addresses Ceph learned for our client, the global
// unicast IPs, once each, IPv4 in one form: the loopback of a cluster on
// this machine identifies no host and widens no scope.
func TestHostView(t *testing.T) {
	ip := netip.MustParseAddr
	own := []netip.Addr{ip("10.0.0.1")}
	for _, tc := range []struct {
		name string
		seen []string
		want []netip.Addr
	}{
		{"direct", []string{"10.0.0.1:0/5", "v1:10.0.0.1:0/5"}, []netip.Addr{ip("10.0.0.1")}},
		{"mapped form", []string{"[::ffff:10.0.0.1]:0/5"}, []netip.Addr{ip("10.0.0.1")}},
		{"behind NAT", []string{"203.0.113.9:0/5"}, []netip.Addr{ip("203.0.113.9")}},
		{"cluster on this machine", []string{"127.0.0.1:0/5"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var as []engine.Addr
			for _, s := range tc.seen {
				a, err := engine.ParseAddr(s)
				if err != nil {
					t.Fatal(err)
				}
				as = append(as, a)
			}
			v := hostView(own, as)
			if fmt.Sprint(v.Seen) != fmt.Sprint(tc.want) || fmt.Sprint(v.Own) != fmt.Sprint(own) {
				t.Fatalf("hostView(%v, %v) = %+v, want Seen %v", own, tc.seen, v, tc.want)
			}
		})
	}
}

// A close of a window fences by address: without librados's answer for our
// client's address it refuses (the interfaces alone would take a NAT
// address Ceph sees for the VM's QEMU for another host's).
func TestCloseViewNeedsCephsAnswer(t *testing.T) {
	for _, op := range []string{hoststep.OpPostmigrate, hoststep.OpFailmigrate} {
		if err := seenKnown(op, nil); !errors.Is(err, engine.ErrSeenUnknown) || !strings.HasPrefix(err.Error(), "refused, nothing fenced: ") {
			t.Fatalf("%s without an address from librados: %v, want engine.ErrSeenUnknown", op, err)
		}
	}
	a, _ := engine.ParseAddr("203.0.113.9:0/5")
	if err := seenKnown(hoststep.OpPostmigrate, []engine.Addr{a}); err != nil {
		t.Fatalf("librados answered: %v", err)
	}
	if err := seenKnown(hoststep.OpRecord, nil); err != nil {
		t.Fatalf("a record (it fences nothing) goes on: %v", err)
	}
}
