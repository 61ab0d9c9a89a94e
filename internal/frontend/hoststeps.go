package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// Env is what every front-end step needs: the configuration, the path it
// was read from (handed to the local host binary with remote: local) and
// the driver's streams. stdout is protocol output only (the DEPLOY_ID, the
// original TM script's output); everything rbdfence says goes to stderr.
type Env struct {
	Cfg        *config.Config
	ConfigPath string
	Stdout     io.Writer
	Stderr     io.Writer
	Log        *Log
	// Broken is the configuration error of an Env made by BrokenEnv: every
	// rbdfence step fails with it; wrapped originals still run.
	Broken error
}

// LoadEnv reads the configuration at configPath ("" means $RBDFENCE_CONFIG,
// else /etc/one/rbdfence.yaml, which may be absent) and returns the Env.
// A bad configuration is an outcome.Usage *Error naming the key.
func LoadEnv(configPath string, stdout, stderr io.Writer) (*Env, error) {
	path := config.Path(configPath)
	cfg, err := config.Load(path, configPath != "" || path != config.DefaultPath)
	if err != nil {
		return nil, errorf(outcome.Usage, -1, "rbdfence: %v", err)
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	return &Env{Cfg: cfg, ConfigPath: path, Stdout: stdout, Stderr: stderr, Log: NewLog(stderr, -1)}, nil
}

// BrokenEnv returns an Env for a wrapper whose configuration could not be
// loaded (err): rbdfence's own step fails with err, while the wrapped
// original still runs, bounded by the default timeouts.
func BrokenEnv(err error, stdout, stderr io.Writer) *Env {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	return &Env{Cfg: config.Default(), Stdout: stdout, Stderr: stderr, Log: NewLog(stderr, -1), Broken: err}
}

// hostRE is what a host name from oned may look like before it goes to ssh:
// a DNS name or an IP address. A leading '-' would be taken as an option.
// hostRE is compiled on first use: its counted repetition costs thousands
// of allocations, which every run of the CLI would pay at start-up.
var hostRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._:-]{0,252}$`) })

// checkHost validates a host name from outside input.
func checkHost(what, h string) error {
	if !hostRE().MatchString(h) {
		return fmt.Errorf("%s %q is not a host name", what, clip(h))
	}
	return nil
}

// shellQuote quotes s for a POSIX shell (ssh hands its command to the
// remote user's shell): nothing inside single quotes is interpreted.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'"'"'`) + "'"
}

// shellJoin quotes every word of argv.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	return strings.Join(q, " ")
}

// sshArgv returns the local argv that runs remote (a word list, quoted
// here) on host: <opennebula.ssh> -o BatchMode=yes -o ConnectTimeout=N host
// 'word' 'word'... BatchMode keeps ssh from waiting for a password.
func (e *Env) sshArgv(host string, remote []string) ([]string, error) {
	return e.sshArgvOpts(host, remote)
}

// sshArgvOpts is sshArgv with extra ssh options (pairs such as "-o",
// "ForwardAgent=yes") before the host.
func (e *Env) sshArgvOpts(host string, remote []string, opts ...string) ([]string, error) {
	if err := checkHost("host", host); err != nil {
		return nil, err
	}
	ct := int(time.Duration(e.Cfg.Timeouts.SSH) / time.Second)
	if ct < 1 {
		ct = 1
	}
	argv := strings.Fields(e.Cfg.OpenNebula.SSH)
	argv = append(argv, "-o", "BatchMode=yes", "-o", "ConnectTimeout="+strconv.Itoa(ct))
	// Share the persistent connection of oneadmin's ssh config, as the ssh
	// wrapper on oned's PATH does for every driver: ControlMaster from
	// $SSH_OPT_CONTROL_MASTER, auto when unset (share/ssh/bin/ssh:36 and
	// :98 of release-7.4.0), unless one is given; ControlPath
	// /run/one/ssh-socks/ctl-M-%C.sock and ControlPersist 70s come from
	// oneadmin's ~/.ssh/config (share/ssh/etc/config:26-28). The host name
	// is the one oned gives the drivers, so %C names the same socket and
	// the drivers' master connection carries our sessions. Without a
	// ControlPath in the config ssh ignores it.
	if !strings.Contains(strings.ToLower(strings.Join(append(argv, opts...), " ")), "controlmaster") {
		cm := os.Getenv("SSH_OPT_CONTROL_MASTER")
		if cm == "" {
			cm = "auto"
		}
		argv = append(argv, "-o", "ControlMaster="+cm)
	}
	argv = append(argv, opts...)
	argv = append(argv, host, shellJoin(remote))
	return argv, nil
}

// errTimeout marks a command ended by its timeout.
var errTimeout = errors.New("timed out")

// proc is one child process run with a deadline.
type proc struct {
	argv    []string
	stdin   io.Reader
	stdout  io.Writer
	stderr  io.Writer
	timeout time.Duration
	env     []string // extra environment, appended
}

// run runs p and returns its exit code. The error is non-nil only when the
// process could not be started or was killed by the timeout (or ctx); the
// whole process group is killed then, so nothing outlives the driver.
func run(ctx context.Context, p proc) (int, error) {
	if p.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.stdin, p.stdout, p.stderr
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		return nil
	}
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return -1, fmt.Errorf("%s: %w after %s", p.argv[0], errTimeout, p.timeout)
		}
		return -1, fmt.Errorf("%s: %w", p.argv[0], ctx.Err())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}

// capBuffer keeps the first max bytes written to it and counts the rest.
type capBuffer struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		if len(p) > room {
			c.buf.Write(p[:room])
			c.over = true
		} else {
			c.buf.Write(p)
		}
	} else if len(p) > 0 {
		c.over = true
	}
	return len(p), nil
}

// lastLine returns the last non-empty line of b, clipped.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return clip(l)
		}
	}
	return ""
}

// clip shortens s for messages and keeps it on one line.
func clip(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

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

func orDash(s string) string {
	if s == "" {
		return "no error output"
	}
	return s
}

// remoteAction runs remote (a word list) on host over ssh with stdin, and
// streams its stdout and stderr to the given writers. It returns the exit
// code of ssh, which is the remote command's (255: ssh itself failed).
func (e *Env) remoteAction(ctx context.Context, host string, remote []string, stdin []byte, stdout, stderr io.Writer) (int, error) {
	argv, err := e.sshArgv(host, remote)
	if err != nil {
		return -1, err
	}
	return run(ctx, proc{argv: argv, stdin: bytes.NewReader(stdin), stdout: stdout, stderr: stderr, timeout: time.Duration(e.Cfg.Timeouts.Action)})
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
