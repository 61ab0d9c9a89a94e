package config

import (
	"os"
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
		{name: "frontend defaults", yaml: "", check: func(c *Config) bool {
			o := c.OpenNebula
			return o.RemoteDir == "/var/tmp/one" && o.DatastoreLocation == "/var/lib/one/datastores" &&
				o.LocalBinary == "/var/lib/one/remotes/rbdfence/rbdfence-host" && time.Duration(c.Timeouts.Action) == 30*time.Minute
		}},
		{name: "frontend keys", yaml: "opennebula:\n  remote_dir: /opt/one/remotes\n  datastore_location: /srv/ds\n  local_binary: /usr/bin/rbdfence\ntimeouts:\n  action: 5m\n", check: func(c *Config) bool {
			o := c.OpenNebula
			return o.RemoteDir == "/opt/one/remotes" && o.DatastoreLocation == "/srv/ds" && o.LocalBinary == "/usr/bin/rbdfence" && time.Duration(c.Timeouts.Action) == 5*time.Minute
		}},
		{name: "relative remote_dir", yaml: "opennebula:\n  remote_dir: var/tmp/one\n", err: "opennebula.remote_dir: must be an absolute path"},
		{name: "relative datastore_location", yaml: "opennebula:\n  datastore_location: ds\n", err: "opennebula.datastore_location"},
		{name: "relative local_binary", yaml: "opennebula:\n  local_binary: rbdfence\n", err: "opennebula.local_binary"},
		{name: "relative host_binary", yaml: "opennebula:\n  host_binary: rbdfence-host\n", err: "opennebula.host_binary"},
		{name: "relative host_package_binary", yaml: "opennebula:\n  host_package_binary: rbdfence\n", err: "opennebula.host_package_binary"},
		{name: "no host_package_binary", yaml: "opennebula:\n  host_package_binary: \"\"\n", check: func(c *Config) bool { return c.OpenNebula.HostPackageBinary == "" }},
		{name: "control char in path", yaml: "opennebula:\n  remote_dir: \"/var/tmp/one\\n\"\n", err: "opennebula.remote_dir: control characters"},
		{name: "empty ssh", yaml: "opennebula:\n  ssh: \" \"\n", err: "opennebula.ssh"},
		{name: "ssh_persist default", yaml: "", check: func(c *Config) bool { return time.Duration(c.OpenNebula.SSHPersist) == 70*time.Second }},
		{name: "ssh_persist off", yaml: "opennebula:\n  ssh_persist: 0s\n", check: func(c *Config) bool { return c.OpenNebula.SSHPersist == 0 }},
		{name: "ssh_persist too short", yaml: "opennebula:\n  ssh_persist: 10ms\n", err: "opennebula.ssh_persist: must be 0"},
		{name: "ssh_persist negative", yaml: "opennebula:\n  ssh_persist: -5s\n", err: "opennebula.ssh_persist"},
		{name: "zero action timeout", yaml: "timeouts:\n  action: 0s\n", err: "timeouts.action"},
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

// TestHost: the one host-name rule (audit log, claims, events): host_name
// when set, else the short system host name.
func TestHost(t *testing.T) {
	h, _ := os.Hostname()
	short, _, _ := strings.Cut(h, ".")
	for _, tc := range []struct{ set, want string }{
		{"node1.example.com", "node1.example.com"},
		{"node1", "node1"},
		{"", short},
	} {
		c := Default()
		c.HostName = tc.set
		if got := c.Host(); got != tc.want || got == "" || (tc.set == "" && strings.Contains(got, ".")) {
			t.Errorf("host_name %q: Host() = %q, want %q", tc.set, got, tc.want)
		}
	}
}
