// Package doctor checks an rbdfence installation, one line per check, each
// failure with the fix. The checks that need Ceph take a connector so that
// this package stays free of cgo; cmd/rbdfence passes the real one.
package doctor

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/frontend"
	"github.com/rbdfence/rbdfence/internal/hostaddrs"
	"github.com/rbdfence/rbdfence/internal/hostversions"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// Result is one check.
type Result struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Ceph is what the Ceph checks need from a live connection.
type Ceph interface {
	// Describe says where we are connected, e.g. "127.0.0.1:6789 as client.libvirt".
	Describe() string
	// ReadProbe reads a (usually missing) object in pool: a permission error fails.
	ReadProbe(ctx context.Context, pool string) error
	// CanBlocklist verifies the blocklist cap without adding an entry.
	CanBlocklist(ctx context.Context) error
	// SeenAddrs are the addresses Ceph learned for this connection's
	// client, global unicast only: what every client of this host shows.
	SeenAddrs() []netip.Addr
	Close()
}

// Options select what is checked.
type Options struct {
	Root       string // filesystem root for installed files ("" = /)
	ConfigPath string
	Config     *config.Config
	ConfigErr  error
	Frontend   bool
	Host       bool
	// Connect opens the Ceph connection (nil: skip the Ceph checks).
	Connect func(ctx context.Context, cfg *config.Config) (Ceph, error)
	// HostFences lists the hosts with live fence-host entries (nil: not
	// shown). Shown with the front-end checks: it is informational.
	HostFences func(ctx context.Context) ([]HostFence, error)
	// Installer is the install.sh the fixes name (Installer); "": the
	// package's when installed.
	Installer string
	// Version is this binary's build (the host step's, on a host).
	Version string
}

// HostFence is a host that fence-host fenced and whose entries are still
// in the blocklist.
type HostFence struct {
	Host    string
	Entries int
	Until   time.Time // the latest expiry
}

// Roles guesses the roles of this machine from what is installed under root.
func Roles(root string) (frontend, host bool) {
	_, errF := os.Stat(filepath.Join(root, "var/lib/one/remotes"))
	_, errH := os.Stat(filepath.Join(root, "etc/libvirt"))
	return errF == nil, errH == nil
}

// Run performs every selected check.
func Run(ctx context.Context, o Options) []Result {
	var out []Result
	add := func(check string, err error, okDetail, fix string) {
		r := Result{Check: check, OK: err == nil, Detail: okDetail}
		if err != nil {
			r.Detail, r.Fix = oneLine(err.Error()), fix
		}
		out = append(out, r)
	}
	fx := newFixes(o)
	if o.ConfigErr != nil {
		add("config", o.ConfigErr, "", fx.config())
		return out
	}
	add("config", nil, configDetail(o.ConfigPath, o.Config), "")
	cfg := o.Config
	need, why := needsCeph(o)
	if !need {
		out = append(out, Result{Check: "ceph", OK: true, Detail: why})
	} else if o.Connect != nil {
		c, err := o.Connect(ctx, cfg)
		add("ceph", err, "", fx.cephConnect())
		if err == nil {
			defer c.Close()
			out[len(out)-1].Detail = "connected to " + c.Describe()
			pool := cfg.Ceph.ClaimPool
			if pool == "" {
				pool = "one"
			}
			add("ceph-read", c.ReadProbe(ctx, pool), "may read lockers, watchers and claims in pool "+pool, fx.cephCaps(cfg, pool))
			add("ceph-blocklist", c.CanBlocklist(ctx), "may add exact blocklist entries (verified without adding one)", fx.cephCaps(cfg, pool))
			if o.Host {
				own, err := hostaddrs.Own(cfg.HostAddresses)
				if err != nil {
					add("ceph-address", err, "", "correct host_addresses in "+o.ConfigPath)
				} else {
					out = append(out, checkCephAddress(own, c.SeenAddrs(), len(cfg.HostAddresses) > 0))
				}
			}
		}
	}
	if o.Host {
		out = append(out, checkHook(o.Root, fx))
		out = append(out, checkHostSpool(cfg, o.Frontend))
		out = append(out, checkHostVersions(ctx, o.Root, o.ConfigPath, cfg))
	}
	if o.Frontend {
		out = append(out, checkWrappers(o.Root, fx)...)
		out = append(out, checkVMMAD(o.Root, fx))
		out = append(out, checkOned(ctx, cfg))
		// The KVM hosts, asked of oned once for the checks that go through them.
		_, hosts, hostsErr := kvmHosts(ctx, o.Root, cfg)
		out = append(out, checkSSHHooks(ctx, o.Root, cfg, hosts))
		out = append(out, checkHostAddrs(ctx, o.Root, cfg))
		if o.HostFences != nil {
			out = append(out, checkHostFences(ctx, o.HostFences))
		}
		out = append(out, checkHosts(ctx, cfg, hosts, hostsErr, o.Version)...)
	}
	return out
}

// needsCeph says whether this machine's roles need Ceph access here, and,
// when they do not, why. A host does (its host step and hook fence from
// it); a front-end only with opennebula.remote: local, or when Ceph access
// is configured here for fence-host, OpenNebula's HA fence (README: Host
// failure): the drivers' Ceph work runs on the hosts.
func needsCeph(o Options) (bool, string) {
	cfg := o.Config
	switch {
	case o.Host:
		return true, ""
	case cfg.OpenNebula.Remote == "local":
		return true, ""
	case cfg.Ceph.MonHost != "" || exists(filepath.Join(o.Root, cfg.Ceph.Keyring)):
		return true, "" // configured for fence-host: it must work
	}
	return false, fmt.Sprintf("not needed on this front-end: opennebula.remote is ssh (the hosts do the Ceph work) and no Ceph access is configured here "+
		"(no ceph.mon_host, no %s); only fence-host, the HA fence, would need it (docs/HOST-FAILURE.md)", cfg.Ceph.Keyring)
}

// configDetail says whether the config file exists and, when it does not,
// which defaults apply (flags may have overridden some: cfg is what runs).
func configDetail(path string, cfg *config.Config) string {
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		return path + " is valid"
	}
	mons := "monitors from the default ceph.conf"
	switch {
	case cfg.Ceph.MonHost != "":
		mons = "ceph.mon_host " + cfg.Ceph.MonHost
	case cfg.Ceph.Conf != "":
		mons = "monitors from " + cfg.Ceph.Conf
	}
	return fmt.Sprintf("%s is absent: built-in defaults apply (ceph.user %s, ceph.keyring %s, %s unless a disk names its own, "+
		"fence.expire %s, fence.fail_open %t, opennebula.endpoint %s, audit_log %s; docs/CONFIGURATION.md)",
		path, cfg.Ceph.User, cfg.Ceph.Keyring, mons, days(time.Duration(cfg.Fence.Expire)), cfg.Fence.FailOpen, cfg.OpenNebula.Endpoint, cfg.AuditLog)
}

// days writes whole days as the config does ("7d").
func days(d time.Duration) string {
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// checkHostFences shows the hosts whose fence is live (informational: a
// fenced host is not a fault of the installation, but its entries must be
// removed once it is repaired).
func checkHostFences(ctx context.Context, list func(ctx context.Context) ([]HostFence, error)) Result {
	r := Result{Check: "host-fences", OK: true}
	hs, err := list(ctx)
	if err != nil {
		r.OK, r.Detail, r.Fix = false, "cannot list host fences: "+oneLine(err.Error()), "check the Ceph access and the audit log"
		return r
	}
	if len(hs) == 0 {
		r.Detail = "no host is fenced"
		return r
	}
	var parts []string
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%s (%d entries until %s; once repaired: rbdfence unfence --host %s)",
			h.Host, h.Entries, h.Until.UTC().Format(time.RFC3339), h.Host))
	}
	r.Detail = "fenced hosts: " + strings.Join(parts, ", ")
	return r
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// checkHook: the qemu.d wrapper (libvirt >= 6.5) or the legacy chain, and the
// binary it runs (hostversions.FindHook).
func checkHook(root string, fx fixes) Result {
	r := Result{Check: "libvirt-hook"}
	entry, bin, _, err := hostversions.FindHook(root)
	if err != nil {
		r.Detail, r.Fix = err.Error(), fx.hook()
		return r
	}
	r.OK, r.Detail = true, entry+" runs "+bin
	return r
}

// checkWrappers: the VMM local actions and the host-side binary in
// remotes, and no tm/ceph wrapper of an earlier rbdfence left in
// OpenNebula's place (migration is a VMM local action now).
func checkWrappers(root string, fx fixes) []Result {
	remotes := filepath.Join(root, "var/lib/one/remotes")
	fix := fx.wrappers()
	var out []Result
	check := func(name string, paths ...string) {
		for _, p := range paths {
			if err := hostversions.Executable(p); err != nil {
				out = append(out, Result{Check: name, Detail: err.Error(), Fix: fix})
				return
			}
		}
		out = append(out, Result{Check: name, OK: true, Detail: "installed in " + filepath.Dir(paths[0])})
	}
	vmm := filepath.Join(remotes, "vmm/kvm")
	check("vmm-wrappers", filepath.Join(vmm, frontend.DeployAction), filepath.Join(vmm, frontend.RestoreAction), filepath.Join(vmm, frontend.MigrateAction), filepath.Join(vmm, frontend.AttachAction))
	check("host-binary", filepath.Join(remotes, "rbdfence/rbdfence-host"))
	var left []string
	for _, op := range []string{"premigrate", "postmigrate", "failmigrate"} {
		if _, err := os.Stat(filepath.Join(remotes, "tm/ceph", op+frontend.OrigSuffix)); err == nil {
			left = append(left, "tm/ceph/"+op)
		}
	}
	r := Result{Check: "tm-ceph", OK: true, Detail: "OpenNebula's tm/ceph migrate scripts are its own"}
	if len(left) > 0 {
		r = Result{Check: "tm-ceph", Detail: "an earlier rbdfence still wraps " + strings.Join(left, ", "), Fix: fx.tmCeph()}
	}
	return append(out, r)
}

// checkVMMAD: every VM_MAD that runs the kvm driver (any NAME) runs our
// local actions, as the driver reads its ARGUMENTS (the last -l wins).
func checkVMMAD(root string, fx fixes) Result {
	path := filepath.Join(root, "etc/one/oned.conf")
	r := Result{Check: "vm-mad", Fix: fx.vmMAD(path)}
	b, err := os.ReadFile(path)
	if err != nil {
		r.Detail = fmt.Sprintf("cannot read %s: %v", path, errors.Unwrap(err))
		return r
	}
	ok, detail := frontend.CoverageReport(b)
	r.Detail = path + ": " + detail
	if !ok {
		return r
	}
	// Every migrate action named there is installed, and so is the admin's
	// local migrate script a <script>-rbdfence wraps.
	vmm := filepath.Join(root, "var/lib/one/remotes/vmm/kvm")
	for _, s := range frontend.MigrateScripts(b) {
		paths := []string{filepath.Join(vmm, s)}
		if w, _ := strings.CutSuffix(s, frontend.MigrateSuffix); w != "migrate" {
			paths = append(paths, filepath.Join(vmm, w))
		}
		for _, p := range paths {
			if err := hostversions.Executable(p); err != nil {
				r.Detail = fmt.Sprintf("%s names the local migrate action %s: %v", path, s, err)
				r.Fix = fx.migrateScript()
				return r
			}
		}
	}
	r.OK, r.Fix = true, ""
	return r
}

// checkOned: oned answers with the configured endpoint and auth file.
func checkOned(ctx context.Context, cfg *config.Config) Result {
	r := Result{Check: "oned", Fix: fmt.Sprintf("check opennebula.endpoint (%s) and opennebula.auth_file (%s: one line user:password)", cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile)}
	c, err := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	if err == nil {
		var v string
		v, err = c.Version(ctx)
		if err == nil {
			r.OK, r.Detail, r.Fix = true, fmt.Sprintf("%s answers (OpenNebula %s)", cfg.OpenNebula.Endpoint, v), ""
			return r
		}
	}
	r.Detail = oneLine(err.Error())
	return r
}
