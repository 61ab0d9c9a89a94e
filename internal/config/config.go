// Package config loads rbdfence's one YAML configuration file: strict
// (unknown keys are errors), validated with messages that name the key, and
// overridable by flags.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// DefaultPath is where the config lives unless --config or RBDFENCE_CONFIG say otherwise.
const DefaultPath = "/etc/one/rbdfence.yaml"

// Duration is a time.Duration written as "10s", "7d" or "168h" in YAML.
type Duration time.Duration

// UnmarshalYAML accepts Go durations plus a "d" (days) suffix.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration back as text.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// ParseDuration parses "90s", "10m", "168h" or "7d".
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n < 0 || n > 3650 {
			return 0, fmt.Errorf("bad duration %q (want e.g. 30s, 10m, 168h, 7d)", s)
		}
		return time.Duration(n * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q (want e.g. 30s, 10m, 168h, 7d)", s)
	}
	return d, nil
}

// Ceph is how to reach the cluster when a VM's disks do not say.
type Ceph struct {
	Conf    string `yaml:"conf"`
	MonHost string `yaml:"mon_host"`
	User    string `yaml:"user"`
	Keyring string `yaml:"keyring"`
	// ClaimPool overrides the pool that holds VM claim objects in each
	// cluster of a VM's disks (default: "one", engine.DefaultClaimPool).
	ClaimPool string `yaml:"claim_pool"`
}

// Timeouts bound every outside call.
type Timeouts struct {
	Connect Duration `yaml:"connect"`
	CephOp  Duration `yaml:"ceph_op"`
	Oned    Duration `yaml:"oned"`
	SSH     Duration `yaml:"ssh"`
	// Total bounds one whole prestart/hook run.
	Total Duration `yaml:"total"`
	// Action bounds the OpenNebula action a front-end wrapper runs on behalf
	// of oned: the remote deploy, restore and attach_disk. A live migration
	// has no limit of rbdfence's (frontend.MigrateVMM).
	Action Duration `yaml:"action"`
}

// Fence tunes what a fence does.
type Fence struct {
	// Expire is how long a blocklist entry lasts.
	Expire Duration `yaml:"expire"`
	// Allow lists addresses or CIDRs that are reported but never fenced.
	Allow []string `yaml:"allow"`
	// FailOpen lets a start go on when the check cannot be done.
	FailOpen bool `yaml:"fail_open"`
	// ClaimLease is how long a claim lease lasts if its holder dies.
	ClaimLease Duration `yaml:"claim_lease"`
	// MigrationWindow is how long a premigrate handover stays open at most.
	MigrationWindow Duration `yaml:"migration_window"`
	// Concurrency bounds images inspected at once.
	Concurrency int `yaml:"concurrency"`
}

// OpenNebula is how to reach oned.
type OpenNebula struct {
	Endpoint string `yaml:"endpoint"`
	AuthFile string `yaml:"auth_file"`
	// Remote is how the front-end runs the Ceph step: "ssh" (on the host, as
	// OpenNebula's own Ceph drivers do) or "local" (the front-end has Ceph access).
	Remote string `yaml:"remote"`
	// HostBinary is the host-side binary path on hosts (shipped by onehost sync).
	HostBinary string `yaml:"host_binary"`
	// HostPackageBinary is the host step of the rbdfence package on a host,
	// built for that host's distribution: run instead of HostBinary when it
	// is executable there. "" runs HostBinary always.
	HostPackageBinary string `yaml:"host_package_binary"`
	// HostConfig is the config path passed to the host-side binary.
	HostConfig string `yaml:"host_config"`
	// SSH is the ssh command (and options, split on blanks) used to reach hosts.
	SSH string `yaml:"ssh"`
	// SSHPersist is how long rbdfence's own ssh master connection to a
	// host stays open after its last session, where the user's ssh config
	// names no ControlPath (0: none, every session its own connection).
	SSHPersist Duration `yaml:"ssh_persist"`
	// RemoteDir is OpenNebula's SCRIPTS_REMOTE_DIR: where onehost sync puts
	// the remotes on hosts (the wrappers run <remote_dir>/vmm/kvm/deploy).
	RemoteDir string `yaml:"remote_dir"`
	// DatastoreLocation is oned's DATASTORE_LOCATION on hosts; the deploy
	// wrapper uses it for the remote deployment file when the domain XML
	// carries no <one:system_datastore>.
	DatastoreLocation string `yaml:"datastore_location"`
	// LocalBinary is the host-side binary (cgo, needs librados) that the
	// front-end runs itself with remote: local.
	LocalBinary string `yaml:"local_binary"`
}

// Config is the whole file.
type Config struct {
	Ceph       Ceph       `yaml:"ceph"`
	Timeouts   Timeouts   `yaml:"timeouts"`
	Fence      Fence      `yaml:"fence"`
	OpenNebula OpenNebula `yaml:"opennebula"`
	AuditLog   string     `yaml:"audit_log"`
	SpoolDir   string     `yaml:"spool_dir"`
	StateDir   string     `yaml:"state_dir"`
	// HostName is this host's name as OpenNebula knows it (onehost list); the
	// libvirt hook claims VMs under it. Default: the short system host name.
	HostName string `yaml:"host_name"`
	// HostAddresses override the host's own IPs used to decide "client on this host".
	HostAddresses []string `yaml:"host_addresses"`
	// Metrics is a node_exporter textfile-collector path ("" disables).
	Metrics  string `yaml:"metrics"`
	LogLevel string `yaml:"log_level"`
}

// Host is this host's name in the audit log, claims and events: host_name
// when set, else the short system host name (OpenNebula's usual host name),
// or "unknown". The one host-name rule of every binary.
func (c *Config) Host() string {
	if c.HostName != "" {
		return c.HostName
	}
	h, err := os.Hostname()
	short, _, _ := strings.Cut(h, ".")
	if err != nil || short == "" {
		return "unknown"
	}
	return short
}

// Default returns the built-in configuration.
func Default() *Config {
	return &Config{
		Ceph: Ceph{User: "libvirt", Keyring: "/etc/ceph/ceph.client.libvirt.keyring"},
		Timeouts: Timeouts{
			Connect: Duration(10 * time.Second), CephOp: Duration(10 * time.Second),
			Oned: Duration(5 * time.Second), SSH: Duration(30 * time.Second), Total: Duration(60 * time.Second),
			Action: Duration(30 * time.Minute),
		},
		Fence: Fence{
			Expire: Duration(7 * 24 * time.Hour), ClaimLease: Duration(60 * time.Second),
			MigrationWindow: Duration(30 * time.Minute), Concurrency: 16,
		},
		OpenNebula: OpenNebula{
			Endpoint: "http://localhost:2633/RPC2", AuthFile: "/var/lib/one/.one/one_auth",
			Remote: "ssh", HostBinary: "/var/tmp/one/rbdfence/rbdfence-host", HostPackageBinary: "/usr/bin/rbdfence", HostConfig: "/etc/one/rbdfence.yaml", SSH: "ssh",
			SSHPersist: Duration(70 * time.Second),
			RemoteDir:  "/var/tmp/one", DatastoreLocation: "/var/lib/one/datastores",
			LocalBinary: "/var/lib/one/remotes/rbdfence/rbdfence-host",
		},
		AuditLog: "/var/log/one/rbdfence-audit.log",
		SpoolDir: "/var/lib/one/rbdfence/spool",
		StateDir: "/var/lib/rbdfence",
		LogLevel: "info",
	}
}

// Path returns the config path: flag value, else $RBDFENCE_CONFIG, else DefaultPath.
func Path(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if p := os.Getenv("RBDFENCE_CONFIG"); p != "" {
		return p
	}
	return DefaultPath
}

// Load reads the file at path over the defaults. A missing file at the
// default path yields the defaults; a missing explicit file is an error.
func Load(path string, explicit bool) (*Config, error) {
	c := Default()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && !explicit {
		return c, c.Validate()
	}
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	if err := Parse(b, c); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes YAML strictly into c and validates the result. Errors name
// the key ("fence.expire: bad duration ...").
func Parse(b []byte, c *Config) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return errors.New(oneLine(err.Error()))
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && !errors.Is(err, io.EOF) {
		msg := oneLine(err.Error())
		if m := lineRe.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			if key := keyAt(&doc, line, ""); key != "" {
				rest := strings.TrimSpace(strings.TrimPrefix(msg, m[0]))
				if f := fieldRe.FindStringSubmatch(rest); f != nil {
					rest = "unknown key (see docs/CONFIGURATION.md)"
				}
				return fmt.Errorf("%s: %s", key, rest)
			}
		}
		return errors.New(msg)
	}
	return c.Validate()
}

var (
	lineRe  = regexp.MustCompile(`^line (\d+): `)
	fieldRe = regexp.MustCompile(`^field (\S+) not found in type`)
)

// keyAt returns the dotted path of the mapping key on line, or "".
func keyAt(n *yaml.Node, line int, prefix string) string {
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			if k := keyAt(c, line, prefix); k != "" {
				return k
			}
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			path := k.Value
			if prefix != "" {
				path = prefix + "." + k.Value
			}
			if k.Line == line || (v.Kind == yaml.ScalarNode && v.Line == line) {
				return path
			}
			if sub := keyAt(v, line, path); sub != "" {
				return sub
			}
		}
	}
	return ""
}

func oneLine(s string) string {
	s = strings.TrimPrefix(s, "yaml: ")
	s = strings.ReplaceAll(s, "unmarshal errors:\n", "")
	return strings.Join(strings.Fields(s), " ")
}

// Validate checks every value and names the key of the first bad one.
func (c *Config) Validate() error {
	pos := func(key string, d Duration) error {
		if d <= 0 {
			return fmt.Errorf("%s: must be a positive duration, got %s", key, time.Duration(d))
		}
		return nil
	}
	for _, kv := range []struct {
		k string
		d Duration
	}{
		{"timeouts.connect", c.Timeouts.Connect}, {"timeouts.ceph_op", c.Timeouts.CephOp},
		{"timeouts.oned", c.Timeouts.Oned}, {"timeouts.ssh", c.Timeouts.SSH}, {"timeouts.total", c.Timeouts.Total},
		{"timeouts.action", c.Timeouts.Action},
		{"fence.expire", c.Fence.Expire}, {"fence.claim_lease", c.Fence.ClaimLease},
		{"fence.migration_window", c.Fence.MigrationWindow},
	} {
		if err := pos(kv.k, kv.d); err != nil {
			return err
		}
	}
	if c.Fence.Expire < Duration(time.Minute) {
		return fmt.Errorf("fence.expire: %s is too short to keep a zombie out (use at least 1m; default 7d)", time.Duration(c.Fence.Expire))
	}
	if c.Fence.Concurrency < 1 || c.Fence.Concurrency > 256 {
		return fmt.Errorf("fence.concurrency: must be 1..256, got %d", c.Fence.Concurrency)
	}
	if _, err := c.AllowPrefixes(); err != nil {
		return err
	}
	for _, a := range c.HostAddresses {
		if _, err := netip.ParseAddr(a); err != nil {
			return fmt.Errorf("host_addresses: %q is not an IP address", a)
		}
	}
	switch c.OpenNebula.Remote {
	case "ssh", "local":
	default:
		return fmt.Errorf("opennebula.remote: must be ssh or local, got %q", c.OpenNebula.Remote)
	}
	for _, kv := range []struct{ k, v string }{
		{"opennebula.host_binary", c.OpenNebula.HostBinary}, {"opennebula.host_config", c.OpenNebula.HostConfig},
		{"opennebula.remote_dir", c.OpenNebula.RemoteDir}, {"opennebula.datastore_location", c.OpenNebula.DatastoreLocation},
		{"opennebula.local_binary", c.OpenNebula.LocalBinary},
	} {
		if err := absPath(kv.k, kv.v); err != nil {
			return err
		}
	}
	if p := c.OpenNebula.HostPackageBinary; p != "" {
		if err := absPath("opennebula.host_package_binary", p); err != nil {
			return err
		}
	}
	if len(strings.Fields(c.OpenNebula.SSH)) == 0 {
		return fmt.Errorf("opennebula.ssh: must name the ssh command, e.g. ssh")
	}
	if p := time.Duration(c.OpenNebula.SSHPersist); p != 0 && (p < time.Second || p > 24*time.Hour) {
		return fmt.Errorf("opennebula.ssh_persist: must be 0 (no master of rbdfence's) or 1s..24h, got %s", p)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log_level: must be debug, info, warn or error, got %q", c.LogLevel)
	}
	if c.Ceph.User == "" || strings.HasPrefix(c.Ceph.User, "client.") {
		return fmt.Errorf("ceph.user: give the cephx id without \"client.\" (e.g. libvirt), got %q", c.Ceph.User)
	}
	return nil
}

// absPath checks that a path used on a host or in a remote command is
// absolute and has no control characters.
func absPath(key, p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("%s: must be an absolute path, got %q", key, p)
	}
	if strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return fmt.Errorf("%s: control characters in path %q", key, p)
	}
	return nil
}

// AllowPrefixes parses fence.allow: IP addresses or CIDRs.
func (c *Config) AllowPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.Fence.Allow {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("fence.allow: %q is not an IP address or CIDR", s)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}
