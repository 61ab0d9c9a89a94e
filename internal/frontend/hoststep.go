package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// placement says where a host step may run.
type placement int

const (
	// onHost: always on the named host over ssh (the step compares client
	// addresses with the host's own).
	onHost placement = iota
	// anywhere: on the host, or on the front-end with remote: local.
	anywhere
)

// local reports whether a step with placement pl runs on the front-end.
func (e *Env) local(pl placement) bool {
	return pl == anywhere && e.Cfg.OpenNebula.Remote == "local"
}

// hostStep runs one host step in the current protocol version. A host whose
// rbdfence still speaks version 1 (it missed `onehost sync --force`)
// rejects the version field: the step is asked again in version 1, which
// that host serves (hoststep package documentation).
//
// A start is refused (*SkewError, exit 3, never passed by
// fence.fail_open) where the host that runs the VM then has a hook or host
// step older than this front-end's claim format: the start host's own
// answer says (the host step refuses before it fences), or, where that
// step does not run on the host (remote: local), a "versions" step asked
// first. (A migration's destination is asked by the migration's own step.)
func (e *Env) hostStep(ctx context.Context, host string, req *hoststep.Request, pl placement) (*hoststep.Response, error) {
	if req.Op == hoststep.OpStart && e.local(pl) {
		if _, err := e.requireVersions(ctx, req.VM, req.Host, startWhat(req)); err != nil {
			return nil, err
		}
	}
	v := *req
	v.Version = hoststep.Version
	resp, err := e.hostStepOnce(ctx, host, &v, pl)
	if err == nil && req.Op == hoststep.OpStart && !e.local(pl) {
		if serr := startVersions(host, resp); serr != nil {
			return nil, skewError(req.VM, startWhat(req), serr, resp)
		}
	}
	if err == nil && resp.V1Rejected() {
		e.Log.Info("host %s runs rbdfence host step protocol version 1, this front-end version %d: asking again in version 1; to upgrade the host, %s",
			host, hoststep.Version, hoststep.Fix)
		v.Version = 0
		// a version 1 host rejects every field it does not know
		v.Instance, v.Restore, v.Stime, v.History = 0, false, 0, nil
		resp, err = e.hostStepOnce(ctx, host, &v, pl)
	}
	return resp, err
}

// hostStepOnce runs one host step and returns the host's response, which may
// say the step failed (resp.OK false). The error is an outcome.Unavailable or
// outcome.Usage *Error when no response came back: ssh failed, the binary is
// missing, it timed out, or it printed no valid response; or when the host's
// protocol version is incompatible.
func (e *Env) hostStepOnce(ctx context.Context, host string, req *hoststep.Request, pl placement) (*hoststep.Response, error) {
	var argv []string
	where := "host " + host
	if e.local(pl) {
		argv = []string{e.Cfg.OpenNebula.LocalBinary, "host"}
		if e.ConfigPath != "" && e.ConfigPath != config.DefaultPath {
			// The same file the driver read; the default path may be absent.
			argv = append(argv, "--config", e.ConfigPath)
		}
		where = "the front-end (opennebula.remote: local)"
		local := *req
		local.Local = true // the front-end's addresses are not the host's
		req = &local
	} else {
		var err error
		argv, err = e.sshArgv(host, e.hostCommand(req.Op))
		if err != nil {
			return nil, errorf(outcome.Usage, req.VM, "%v", err)
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, errorf(outcome.Failure, req.VM, "encoding the %s request: %v", req.Op, err)
	}
	stdout := &capBuffer{max: hoststep.MaxSize}
	stderr := &capBuffer{max: 64 << 10}
	timeout := e.stepBudget()
	code, rerr := run(ctx, proc{argv: argv, stdin: bytes.NewReader(body), stdout: stdout, stderr: stderr, timeout: timeout})
	if rerr == nil && !stdout.over {
		resp, perr := hoststep.ReadResponse(bytes.NewReader(stdout.buf.Bytes()))
		var ie *hoststep.IncompatibleError
		if errors.As(perr, &ie) {
			return nil, errorf(outcome.Usage, req.VM, "host %s: %v", host, perr)
		}
		// A response answers this op; only an early usage failure has none.
		if perr == nil && (resp.Op == req.Op || (resp.Op == "" && !resp.OK && resp.Kind != outcome.OK)) {
			return resp, nil
		}
	}
	return nil, e.noAnswer(ctx, req, host, where, pl, code, rerr, timeout, lastLine(stderr.buf.Bytes()))
}

// startVersions checks the start host's answer to a start step: a host
// binary that rejects hoststep.ClaimFormatFlag is older than claim format
// 2 (it did nothing); an answer whose versions are older than this
// front-end's claim format is refused even if the host admitted it.
func startVersions(host string, resp *hoststep.Response) error {
	if resp.UnknownClaimFormatFlag() {
		return hoststep.CheckVersions(host, nil, engine.ClaimFormat, true)
	}
	if !resp.OK && resp.Versions == nil {
		return nil // an early failure of the step: its own error says why
	}
	return hoststep.CheckVersions(host, resp.Versions, engine.ClaimFormat, true)
}

// requireVersions asks host what runs there (the step "versions") and
// refuses a start or an incoming migration (what) when its hook or host
// step reads an older claim format than this front-end's; it returns what
// the host reported.
func (e *Env) requireVersions(ctx context.Context, vm int, host, what string) (*hoststep.Versions, error) {
	v, err := e.hostVersions(ctx, vm, host, true)
	if err != nil {
		return nil, err
	}
	if err := hoststep.CheckVersions(host, v, engine.ClaimFormat, true); err != nil {
		return nil, skewError(vm, what, err, nil)
	}
	return v, nil
}

// HostVersions asks host what runs there (nil Versions: its host binary is
// older than the step, an rbdfence up to 0300e58). The error says why no
// answer came: ssh, or a host that cannot start the binary (the one line
// of incompatible). vm < 0: not for a VM (doctor).
func (e *Env) HostVersions(ctx context.Context, vm int, host string) (*hoststep.Versions, error) {
	return e.hostVersions(ctx, vm, host, false)
}

// hostVersions is HostVersions; brief asks only for the host step and the
// hook (Request.Brief), what a start or a migration checks: no package or
// platform queries on the host (dpkg-query, rpm, getconf: about 100 ms of
// a live migration's 170 ms "versions" step on the test stack).
func (e *Env) hostVersions(ctx context.Context, vm int, host string, brief bool) (*hoststep.Versions, error) {
	req := &hoststep.Request{Version: hoststep.Version, Op: hoststep.OpVersions, VM: max(vm, 0), Host: host, Run: "versions", Brief: brief}
	sctx, cancel := context.WithTimeout(ctx, e.stepBudget())
	defer cancel()
	resp, err := e.hostStepOnce(sctx, host, req, onHost)
	if err != nil {
		return nil, err
	}
	if !resp.OK || resp.Versions == nil {
		return nil, nil // "versions" is unknown there (or the version field is)
	}
	return resp.Versions, nil
}

// skewError is a *SkewError as the driver reports it: exit 3, one line,
// final (fence.fail_open does not pass it): "rbdfence: refused, nothing
// fenced: node2's rbdfence is too old; upgrade, onehost sync | migration:
// host node2's libvirt hook ... reads claim format 1, ...; fix: ...". resp
// is the start host's answer that came with it (nil: none; a host that
// admitted with versions that say otherwise may have fenced).
func skewError(vm int, what string, err error, resp *hoststep.Response) error {
	why := err.Error()
	var se *hoststep.SkewError
	if errors.As(err, &se) {
		if w, ok := strings.CutPrefix(se.Why, "its "); ok {
			why = fmt.Sprintf("host %s's %s; fix: %s", se.Host, w, se.Fix)
		}
	}
	fe := refusal(outcome.Unavailable, vm, fencedNote(resp), engine.BriefOf(err), what+": "+why)
	fe.Final = true
	return fe
}

// startWhat names a start step's start in messages: "start", or "restore"
// for OpenNebula's restore.
func startWhat(req *hoststep.Request) string {
	if req.Restore {
		return "restore"
	}
	return "start"
}

// noAnswer is the error of a host step that gave no valid answer: it timed
// out, could not be started, ssh failed (exit 255), the binary could not
// start on the host (the loader refused it, 126, 127: incompatible says
// why in one line), or it printed something else; why is its last line.
func (e *Env) noAnswer(ctx context.Context, req *hoststep.Request, host, where string, pl placement, code int, rerr error, timeout time.Duration, why string) error {
	switch {
	case errors.Is(rerr, errTimeout):
		return briefErrorf(outcome.Unavailable, req.VM, fmt.Sprintf("%s did not answer in %s; retry", host, timeout),
			"the %s step on %s did not answer within timeouts.ssh + timeouts.total (%s)", req.Op, where, timeout)
	case rerr != nil:
		return briefErrorf(outcome.Unavailable, req.VM, "cannot run the step on "+host+"; see the VM log",
			"cannot run the %s step on %s: %v", req.Op, where, rerr)
	case !e.local(pl) && code == 255:
		return briefErrorf(outcome.Unavailable, req.VM, "ssh to "+host+" failed; fix ssh, then retry",
			"ssh to host %s failed for the %s step: %s", host, req.Op, orDash(why))
	case !e.local(pl) && cannotStart(code, why):
		return nothingRan(e.incompatible(ctx, req.VM, host, why))
	case code == 126 || code == 127:
		return nothingRan(briefErrorf(outcome.Unavailable, req.VM, "rbdfence cannot run on "+host+"; onehost sync --force",
			"the rbdfence host binary %s cannot run on %s (exit %d: %s); install it and run 'onehost sync --force'",
			argv0(e, pl), where, code, orDash(why)))
	}
	return briefErrorf(outcome.Unavailable, req.VM, host+" gave no valid answer; see the VM log",
		"the %s step on %s gave no valid answer (exit %d): %s", req.Op, where, code, orDash(why))
}

// nothingRan marks fe as the error of a host binary that did not start.
func nothingRan(fe *Error) *Error {
	fe.Fenced = "nothing fenced"
	return fe
}

// hostCommand is the host step's command line on a host (hostArgv). The
// default host_config is not passed: the host then reads
// /etc/one/rbdfence.yaml when present and uses the built-in defaults (Ceph
// access from the VM's disks) otherwise, as the libvirt hook does. A start
// passes the claim format it needs (hoststep.ClaimFormatFlag).
func (e *Env) hostCommand(op string) []string {
	args := []string{"host"}
	if op == hoststep.OpStart {
		args = append(args, "--"+hoststep.ClaimFormatFlag, strconv.Itoa(engine.ClaimFormat))
	}
	if c := e.Cfg.OpenNebula.HostConfig; c != config.DefaultPath {
		args = append(args, "--config", c)
	}
	return e.hostArgv(args...)
}

// hostArgv is the remote command that runs the host binary with args: the
// rbdfence package's (opennebula.host_package_binary), built for the
// host's distribution, where it is executable on the host, else the one
// onehost sync shipped (opennebula.host_binary), the front-end's build.
func (e *Env) hostArgv(args ...string) []string {
	o := e.Cfg.OpenNebula
	if o.HostPackageBinary == "" {
		return append([]string{o.HostBinary}, args...)
	}
	return append([]string{"sh", "-c", `b=$2; [ -x "$1" ] && b=$1; shift 2; exec "$b" "$@"`, "rbdfence-host", o.HostPackageBinary, o.HostBinary}, args...)
}

func argv0(e *Env, pl placement) string {
	if e.local(pl) {
		return e.Cfg.OpenNebula.LocalBinary
	}
	if p := e.Cfg.OpenNebula.HostPackageBinary; p != "" {
		return p + " (else " + e.Cfg.OpenNebula.HostBinary + ")"
	}
	return e.Cfg.OpenNebula.HostBinary
}

// hostGrace is how long a host step may run past timeouts.total on the
// host: a Ceph call stuck in C ignores its context.
const hostGrace = 5 * time.Second

// stepBudget bounds one host step as the front-end waits for it: ssh's
// connect (timeouts.ssh, sshArgv's ConnectTimeout), then the step's own
// bound on the host (timeouts.total) and its grace. timeouts.ssh alone
// would cut off a slow but legitimate fence the host still allows.
func (e *Env) stepBudget() time.Duration {
	return time.Duration(e.Cfg.Timeouts.SSH) + time.Duration(e.Cfg.Timeouts.Total) + hostGrace
}

// stepContext bounds a front-end run that ends in a host step: reading the
// VM from oned (timeouts.oned), then the step (stepBudget).
func (e *Env) stepContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Duration(e.Cfg.Timeouts.Oned)+e.stepBudget())
}
