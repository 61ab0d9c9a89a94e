package config

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, err string
		check           func(*Config) bool
	}{
		{name: "empty is defaults", yaml: "", check: func(c *Config) bool {
			return time.Duration(c.Fence.Expire) == 7*24*time.Hour && !c.Fence.FailOpen && c.Ceph.User == "libvirt"
		}},
		{name: "days", yaml: "fence:\n  expire: 2d\n", check: func(c *Config) bool { return time.Duration(c.Fence.Expire) == 48*time.Hour }},
		{name: "allow ip and cidr", yaml: "fence:\n  allow: [10.0.0.1, 10.1.0.0/16]\n", check: func(c *Config) bool {
			p, err := c.AllowPrefixes()
			return err == nil && len(p) == 2 && p[0].Bits() == 32
		}},
		{name: "unknown key", yaml: "ceph:\n  mon_hosts: x\n", err: "ceph.mon_hosts: unknown key"},
		{name: "unknown top key", yaml: "fencing: {}\n", err: "fencing: unknown key"},
		{name: "bad duration", yaml: "timeouts:\n  connect: fast\n", err: "timeouts.connect: bad duration"},
		{name: "negative duration", yaml: "timeouts:\n  oned: -1s\n", err: "timeouts.oned: must be a positive duration"},
		{name: "expiry too short", yaml: "fence:\n  expire: 5s\n", err: "fence.expire"},
		{name: "bad allow", yaml: "fence:\n  allow: [not-an-ip]\n", err: "fence.allow"},
		{name: "bad remote", yaml: "opennebula:\n  remote: rsh\n", err: "opennebula.remote"},
		{name: "client prefix", yaml: "ceph:\n  user: client.libvirt\n", err: "ceph.user"},
		{name: "bad concurrency", yaml: "fence:\n  concurrency: 0\n", err: "fence.concurrency"},
		{name: "bad host address", yaml: "host_addresses: [x]\n", err: "host_addresses"},
		{name: "wrong type", yaml: "fence:\n  fail_open: maybe\n", err: "fence.fail_open"},
		{name: "syntax", yaml: "fence: [\n", err: "did not find"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			err := Parse([]byte(tc.yaml), c)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("want one-line error containing %q, got %v", tc.err, err)
				}
				return
			}
			if err != nil || !tc.check(c) {
				t.Fatalf("err=%v config=%+v", err, c)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "fence:\n  expire: 7d\n  allow: [10.0.0.0/8]\n", "ceph:\n  mon_host: 1.2.3.4:6789\n", "timeouts: {connect: 1s}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := Default()
		if err := Parse([]byte(s), c); err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("multi-line error: %q", err)
		}
	})
}
