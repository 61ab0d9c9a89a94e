package doctor

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/frontend"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/hostversions"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// Which rbdfence runs on the hosts, in which version: on a host, what is
// installed here (host-versions); on the front-end, every KVM host asked
// over the drivers' ssh as a start would reach it (host <name>): a host
// that cannot start the host binary, or whose hook or host step reads an
// older claim format than this front-end's, fails with the fix.

// hostsParallel bounds the hosts asked at once.
const hostsParallel = 16

// describe writes what runs on a host in one line.
func describe(v *hoststep.Versions) string {
	var parts []string
	s := v.Step
	if s.Path == "" { // only the platform
		return describePlatform(v.Platform)
	}
	parts = append(parts, fmt.Sprintf("host step %s %s (protocol %d, claim format %d)", s.Path, orNone(s.Version), s.Protocol, max(s.ClaimFormat, 1)))
	switch h := v.Hook; {
	case h == nil:
		parts = append(parts, "no rbdfence hook")
	case h.Error != "":
		parts = append(parts, "hook "+h.Path+": "+h.Error)
	default:
		parts = append(parts, fmt.Sprintf("hook %s %s (claim format %d)", h.Path, orNone(h.Version), max(h.ClaimFormat, 1)))
	}
	if len(v.Packages) == 0 {
		parts = append(parts, "no rbdfence package")
	} else {
		var ps []string
		for _, p := range v.Packages {
			ps = append(ps, p.Name+" "+p.Version)
		}
		parts = append(parts, "packages "+strings.Join(ps, ", "))
	}
	if p := describePlatform(v.Platform); p != "" {
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

func describePlatform(p *hoststep.Platform) string {
	if p == nil {
		return ""
	}
	var ps []string
	for _, x := range []string{p.OS, p.Arch, "glibc " + orNone(p.Glibc), orLib(p.Librados, "librados.so.2"), orLib(p.Librbd, "librbd.so.1")} {
		if x != "" {
			ps = append(ps, x)
		}
	}
	return strings.Join(ps, ", ")
}

func orLib(s, soname string) string {
	if s == "" {
		return "no " + soname
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// skewResult fills r from a refusal "...; fix: ...".
func splitFix(r *Result, msg string) {
	r.OK = false
	r.Detail, r.Fix, _ = strings.Cut(oneLine(msg), "; fix: ")
}

// checkHostVersions: what runs on this host, as the front-end's host steps
// find it: the package's host step when it is installed here, else the
// synced one, which must start on this host's userland; it and the hook
// must read this build's claim format. The step is asked as the front-end
// asks it (the step "versions" on its stdin, with doctor's own config as
// the front-end passes host_config: the step caches the hook's answer in
// that config's state_dir, not in the default one).
func checkHostVersions(ctx context.Context, root, configPath string, cfg *config.Config) Result {
	r := Result{Check: "host-versions", OK: true}
	step := cfg.OpenNebula.HostPackageBinary
	if step == "" || hostversions.Executable(filepath.Join(root, step)) != nil {
		step = cfg.OpenNebula.HostBinary
	}
	platform := hostversions.Platform(ctx, root)
	v, err := askStep(ctx, filepath.Join(root, step), configPath)
	if err != nil {
		r.OK = false
		r.Detail = fmt.Sprintf("the front-end's host steps run %s here, which %v (this host: %s)", step, err, describe(&hoststep.Versions{Platform: platform}))
		if errorsIsMissing(err) {
			r.Fix = "run 'onehost sync --force' as oneadmin on the front-end (it copies the host binary here), or install the rbdfence and rbdfence-host packages here"
		} else {
			r.Fix = "install the rbdfence and rbdfence-host packages built for " + orNone(platform.OS) + " here: the front-end then runs their " + orNone(cfg.OpenNebula.HostPackageBinary)
		}
		return r
	}
	if v != nil && filepath.Clean(root) != "/" {
		// The step looked at the machine's own /etc/libvirt; doctor checks
		// the installation under root.
		v.Hook = hostversions.Hook(ctx, root, "")
	}
	if v == nil {
		splitFix(&r, strings.TrimPrefix(hoststep.CheckVersions("this host", nil, engine.ClaimFormat, true).Error(), "host this host: "))
		r.Detail = "the front-end's host steps run " + step + " here: " + r.Detail
		return r
	}
	r.Detail = "the front-end's host steps run " + step + " here; " + describe(v)
	if err := hoststep.CheckVersions("this host", v, engine.ClaimFormat, true); err != nil {
		splitFix(&r, strings.TrimPrefix(err.Error(), "host this host: "))
		r.Detail += "; " + describe(v)
		return r
	}
	if p := v.Platform; p != nil && p.Librbd == "" {
		// The step loads it only to break a lock (internal/ceph breaklock.c):
		// without it a fence blocklists the client, leaves its lock, and the
		// start is refused as an incomplete fence.
		r.OK = false
		r.Detail = "librbd.so.1 is missing here: a fence would blocklist a client but could not break its lock (the start is then refused); " + describe(v)
		r.Fix = "install librbd1 (Ceph 16.2 or later) here, as OpenNebula's Ceph datastores need it"
	}
	return r
}

type missingError struct{ path string }

func (e *missingError) Error() string { return "is missing" }

func errorsIsMissing(err error) bool { _, ok := err.(*missingError); return ok }

// askStep runs `bin host [--config configPath]` with the step "versions"
// (bounded), as the front-end asks a host; nil Versions: bin is older than
// the step.
func askStep(ctx context.Context, bin, configPath string) (*hoststep.Versions, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, &missingError{bin}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	args := []string{"host"}
	if configPath != "" && configPath != config.DefaultPath {
		args = append(args, "--config", configPath)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(fmt.Sprintf(`{"version":%d,"op":%q,"vm":0,"host":"localhost","run":"doctor"}`, hoststep.Version, hoststep.OpVersions))
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	resp, perr := hoststep.ReadResponse(strings.NewReader(out.String()))
	if perr != nil {
		why := strings.TrimSpace(errb.String())
		if i := strings.LastIndexByte(why, '\n'); i >= 0 {
			why = why[i+1:]
		}
		if err == nil {
			err = perr
		}
		return nil, fmt.Errorf("cannot start or answer: %v: %s", err, why)
	}
	if !resp.OK || resp.Versions == nil {
		return nil, nil
	}
	return resp.Versions, nil
}

// kvmHosts lists oned's host pool and the KVM hosts (not OFFLINE) in it,
// by the VM_MADs of root's oned.conf that run the kvm driver, as event
// collection selects them (frontend.KVMHosts).
func kvmHosts(ctx context.Context, root string, cfg *config.Config) ([]opennebula.PoolHost, []string, error) {
	c, err := opennebula.New(cfg.OpenNebula.Endpoint, cfg.OpenNebula.AuthFile, time.Duration(cfg.Timeouts.Oned))
	var pool []opennebula.PoolHost
	if err == nil {
		pool, err = c.Hosts(ctx)
	}
	if err != nil {
		return nil, nil, err
	}
	mads := frontend.DefaultKVMMads
	if b, err := os.ReadFile(filepath.Join(root, "etc/one/oned.conf")); err == nil {
		if m := frontend.KVMMads(b); len(m) > 0 {
			mads = m
		}
	}
	names, _ := frontend.KVMHosts(pool, mads, nil)
	return pool, names, nil
}

// checkHosts asks every KVM host (not OFFLINE) what runs there, as a start
// reaches it: one line per host. names and err are kvmHosts' answer.
func checkHosts(ctx context.Context, cfg *config.Config, names []string, err error, version string) []Result {
	if err != nil {
		return []Result{{Check: "hosts", Detail: "cannot list the hosts: " + oneLine(err.Error()), Fix: "see the oned check"}}
	}
	if len(names) == 0 {
		return []Result{{Check: "hosts", OK: true, Detail: "no KVM host in oned's pool (not OFFLINE) to ask"}}
	}
	e := &frontend.Env{Cfg: asCollector(cfg), Stdout: io.Discard, Stderr: io.Discard, Log: frontend.NewLog(io.Discard, -1)}
	out := make([]Result, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, hostsParallel)
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = checkHost(ctx, e, name, version)
		}()
	}
	wg.Wait()
	return out
}

func checkHost(ctx context.Context, e *frontend.Env, host, version string) Result {
	r := Result{Check: "host " + host, OK: true}
	v, err := e.HostVersions(ctx, -1, host)
	if err != nil {
		splitFix(&r, strings.TrimPrefix(err.Error(), "host "+host+" ")) // the check names the host
		if r.Fix == "" {
			r.Fix = fmt.Sprintf("make %s reachable over ssh from this front-end as oneadmin, as oned's drivers reach it ('ssh %s true' as oneadmin)", host, host)
		}
		return r
	}
	if err := hoststep.CheckVersions(host, v, engine.ClaimFormat, true); err != nil {
		splitFix(&r, strings.TrimPrefix(err.Error(), "host "+host+": "))
		if v != nil {
			r.Detail += "; " + describe(v)
		}
		return r
	}
	r.Detail = describe(v)
	if v.Hook == nil {
		r.OK = false
		r.Detail = "no rbdfence libvirt hook: only starts through this front-end are checked there; " + r.Detail
		r.Fix = fmt.Sprintf("install the rbdfence-host package on %s (or run install.sh host there)", host)
		return r
	}
	if version != "" && v.Step.Version != version {
		r.Detail += " (this front-end: " + version + ")"
	}
	return r
}

// asCollector returns cfg for reaching the hosts as the drivers do: as
// oneadmin when doctor runs as root with the plain ssh command (root's own
// keys are not the ones oned's drivers use).
func asCollector(cfg *config.Config) *config.Config {
	if os.Geteuid() != 0 || cfg.OpenNebula.SSH != "ssh" {
		return cfg
	}
	if _, err := user.Lookup("oneadmin"); err != nil {
		return cfg
	}
	c := *cfg
	c.OpenNebula.SSH = "runuser -u oneadmin -- ssh"
	return &c
}
