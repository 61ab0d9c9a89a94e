package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
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
func (e *Env) hostStep(ctx context.Context, host string, req *hoststep.Request, pl placement) (*hoststep.Response, error) {
	v := *req
	v.Version = hoststep.Version
	resp, err := e.hostStepOnce(ctx, host, &v, pl)
	if err == nil && resp.V1Rejected() {
		e.Log.Info("host %s runs rbdfence host step protocol version 1, this front-end version %d: asking again in version 1; to upgrade the host, %s",
			host, hoststep.Version, hoststep.Fix)
		v.Version = 0
		v.Instance = 0 // a version 1 host rejects every field it does not know
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
		argv, err = e.sshArgv(host, e.hostCommand())
		if err != nil {
			return nil, errorf(outcome.Usage, req.VM, "VM %d: %v", req.VM, err)
		}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, errorf(outcome.Failure, req.VM, "VM %d: encoding the %s request: %v", req.VM, req.Op, err)
	}
	stdout := &capBuffer{max: hoststep.MaxSize}
	stderr := &capBuffer{max: 64 << 10}
	timeout := e.stepBudget()
	code, rerr := run(ctx, proc{argv: argv, stdin: bytes.NewReader(body), stdout: stdout, stderr: stderr, timeout: timeout})
	if rerr == nil && !stdout.over {
		resp, perr := hoststep.ReadResponse(bytes.NewReader(stdout.buf.Bytes()))
		var ie *hoststep.IncompatibleError
		if errors.As(perr, &ie) {
			return nil, errorf(outcome.Usage, req.VM, "VM %d: host %s: %v", req.VM, host, perr)
		}
		// A response answers this op; only an early usage failure has none.
		if perr == nil && (resp.Op == req.Op || (resp.Op == "" && !resp.OK && resp.Kind != outcome.OK)) {
			return resp, nil
		}
	}
	return nil, e.noAnswer(req, host, where, pl, code, rerr, timeout, lastLine(stderr.buf.Bytes()))
}

// noAnswer is the error of a host step that gave no valid answer: it timed
// out, could not be started, ssh failed (exit 255), the binary could not
// run (126, 127), or it printed something else; why is its last line.
func (e *Env) noAnswer(req *hoststep.Request, host, where string, pl placement, code int, rerr error, timeout time.Duration, why string) error {
	switch {
	case errors.Is(rerr, errTimeout):
		return errorf(outcome.Unavailable, req.VM, "VM %d: the %s step on %s did not answer within timeouts.ssh + timeouts.total (%s)", req.VM, req.Op, where, timeout)
	case rerr != nil:
		return errorf(outcome.Unavailable, req.VM, "VM %d: cannot run the %s step on %s: %v", req.VM, req.Op, where, rerr)
	case !e.local(pl) && code == 255:
		return errorf(outcome.Unavailable, req.VM, "VM %d: ssh to host %s failed for the %s step: %s", req.VM, host, req.Op, orDash(why))
	case code == 126 || code == 127:
		return errorf(outcome.Unavailable, req.VM, "VM %d: the rbdfence host binary %s cannot run on %s (exit %d: %s); install it and run 'onehost sync --force'",
			req.VM, argv0(e, pl), where, code, orDash(why))
	}
	return errorf(outcome.Unavailable, req.VM, "VM %d: the %s step on %s gave no valid answer (exit %d): %s", req.VM, req.Op, where, code, orDash(why))
}

// hostCommand is the host step's command line on a host. The default
// host_config is not passed: the host then reads /etc/one/rbdfence.yaml
// when present and uses the built-in defaults (Ceph access from the VM's
// disks) otherwise, as the libvirt hook does.
func (e *Env) hostCommand() []string {
	argv := []string{e.Cfg.OpenNebula.HostBinary, "host"}
	if c := e.Cfg.OpenNebula.HostConfig; c != config.DefaultPath {
		argv = append(argv, "--config", c)
	}
	return argv
}

func argv0(e *Env, pl placement) string {
	if e.local(pl) {
		return e.Cfg.OpenNebula.LocalBinary
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
