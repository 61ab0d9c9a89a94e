package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rbdfence/rbdfence/internal/config"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
)

// remoteStart is a remote action (vmm/kvm/deploy, vmm/kvm/restore) that a
// start step admits.
type remoteStart struct {
	vm     int
	what   string   // "deploy", "restore": names the action in messages
	argv   []string // the remote action
	stdin  []byte   // its stdin, byte for byte
	dir    string   // the VM's directory on the host, for files
	files  []vmDirFileData
	stdout io.Writer // the action's stdout (the DEPLOY_ID)
}

// startThenRun runs a start (res, req from prepareStart) and then the
// remote action act. With the step on the host (remote: ssh) both run in
// one ssh session (oneSession); the step's refusal keeps the action from
// running, and the host records the new instance's client addresses in the
// background after the action succeeded. Otherwise (nothing to check, the
// step on the front-end, a host binary without --framed, vm.xml and ds.xml
// too large for the command line, fence.fail_open passing a failed check)
// the step and the action run one after the other as separate commands.
// It returns the action's exit code.
func (e *Env) startThenRun(ctx context.Context, res *StartResult, req *hoststep.Request, act remoteStart) (int, error) {
	if req != nil && !e.local(anywhere) {
		if inline := withVMDirFiles(act.dir, act.files, act.argv); inline != nil {
			code, fallback, err := e.oneSession(ctx, res, req, act)
			if !fallback {
				return code, err
			}
		}
	}
	if req != nil {
		sctx, cancel := context.WithTimeout(ctx, e.stepBudget())
		resp, err := e.hostStep(sctx, res.Host, req, anywhere)
		cancel()
		if _, err := e.finishStart(res, req, resp, err); err != nil {
			return -1, err
		}
	}
	remote := act.argv
	if len(act.files) > 0 {
		if inline := withVMDirFiles(act.dir, act.files, act.argv); inline != nil {
			remote = inline // one ssh session, as the driver's own deploy
		} else if err := e.copyVMDirFiles(ctx, act.vm, res.Host, act.dir, act.files); err != nil {
			return -1, err
		}
	}
	code, err := e.remoteAction(ctx, res.Host, remote, act.stdin, act.stdout, e.Stderr)
	if err != nil {
		return -1, errorf(outcome.Failure, act.vm, "remote %s on %s: %v", act.what, res.Host, err)
	}
	if code == 0 {
		e.recordInstance(ctx, res)
	}
	return code, nil
}

// oneSession runs the start step req and, if it admits the start, the
// remote action in one ssh session: the driver's own deploy is one
// session (one_vmm_exec.rb:443-470 of release-7.4.0), and over a warm
// master connection each session costs a remote shell's start. The
// request goes framed on stdin before the action's stdin; the step's
// response comes framed on stdout before the action's output, which alone
// reaches act.stdout; stderr is relayed. fallback: the host's binary did
// not understand the framed step (an older version): nothing ran, the
// caller runs the step and the action separately.
func (e *Env) oneSession(ctx context.Context, res *StartResult, req *hoststep.Request, act remoteStart) (code int, fallback bool, err error) {
	vm := req.VM
	v := *req
	v.Version = hoststep.Version
	body, err := json.Marshal(&v)
	if err != nil {
		return -1, false, errorf(outcome.Failure, vm, "encoding the %s request: %v", req.Op, err)
	}
	rec := v
	rec.Op = hoststep.OpRecord
	rec.Instance, rec.Restore = 0, false // as recordInstance's: the claim keeps the start's
	recBody, err := json.Marshal(&rec)
	if err != nil {
		return -1, false, errorf(outcome.Failure, vm, "encoding the record request: %v", err)
	}
	hostCfg := ""
	if c := e.Cfg.OpenNebula.HostConfig; c != config.DefaultPath {
		hostCfg = c
	}
	remote := sessionCommand(e.Cfg.OpenNebula.HostPackageBinary, e.Cfg.OpenNebula.HostBinary, hostCfg, recBody, act)
	if len(shellJoin(remote)) > maxRemoteCommand {
		return -1, true, nil // separate commands: the files go by copyVMDirFiles
	}
	argv, err := e.sshArgv(res.Host, remote)
	if err != nil {
		return -1, false, errorf(outcome.Usage, vm, "%v", err)
	}
	var frame bytes.Buffer
	_ = hoststep.WriteRequestFrame(&frame, body)

	// The step must answer within its budget as a separate step would;
	// the action then has its own (timeouts.action). What happens first,
	// the answer or the end of the budget, decides once: the action's
	// stdin (GoLine, then the action's input) goes only to an admitting
	// answer that came in time.
	budget := e.stepBudget()
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := &goGate{decided: make(chan bool, 1)}
	var stepTimedOut atomic.Bool
	timer := time.AfterFunc(budget, func() {
		if g.decide(false) {
			stepTimedOut.Store(true)
			cancel()
		}
	})
	defer timer.Stop()
	defer g.decide(false) // the session ended without an answer
	errw := &gatedWriter{w: e.Stderr, kept: capBuffer{max: 64 << 10}}
	var out *hoststep.FrameSplitter
	out = &hoststep.FrameSplitter{Rest: act.stdout, OnFrame: func() {
		admits := hoststep.FrameAdmits(out.Body)
		if g.decide(admits) || !admits {
			errw.open(admits)
		}
	}}
	feed := func(w io.WriteCloser) {
		defer w.Close()
		if _, err := w.Write(frame.Bytes()); err != nil {
			return
		}
		if <-g.decided {
			_, _ = w.Write(append([]byte(GoLine+"\n"), act.stdin...))
		}
	}
	code, rerr := run(rctx, proc{argv: argv, feed: feed, stdout: out, stderr: errw,
		timeout: budget + time.Duration(e.Cfg.Timeouts.Action)})
	where := "host " + res.Host
	why := lastLine(errw.kept.buf.Bytes())
	if why == "" {
		why = lastLine(out.Unframed())
	}

	if !out.Framed() {
		if stepTimedOut.Load() {
			rerr = fmt.Errorf("%w", errTimeout)
		}
		if rerr == nil && code != 255 && code != 126 && code != 127 {
			if _, perr := hoststep.ReadResponse(bytes.NewReader(out.Unframed())); perr == nil {
				e.Log.Info("host %s: its rbdfence host binary has no framed step (an older version): running the step and the %s separately; to upgrade the host, %s",
					res.Host, act.what, hoststep.Fix)
				return -1, true, nil
			}
		}
		nerr := e.noAnswer(ctx, req, res.Host, where, anywhere, code, rerr, budget, why)
		if _, err := e.finishStart(res, req, nil, nerr); err != nil {
			return -1, false, err
		}
		// fence.fail_open: the check could not be done, start anyway.
		code, err := e.actionAlone(ctx, res, act)
		return code, false, err
	}
	resp, perr := hoststep.ReadResponse(bytes.NewReader(out.Body))
	if perr == nil && resp.Op != req.Op && (resp.Op != "" || resp.OK || resp.Kind == outcome.OK) {
		perr = fmt.Errorf("answers op %q", resp.Op)
	}
	if perr != nil {
		nerr := briefErrorf(outcome.Unavailable, vm, res.Host+" gave no valid answer; see the VM log", "the %s step on %s gave no valid answer: %v", req.Op, where, perr)
		if _, err := e.finishStart(res, req, nil, nerr); err != nil {
			return -1, false, err
		}
		return -1, false, errorf(outcome.Failure, vm, "the %s step on %s gave no valid answer and the session ended (exit %d)", req.Op, where, code)
	}
	if serr := startVersions(res.Host, resp); serr != nil {
		// The host step refused (its hook or itself reads an older claim
		// format), or does not know the claim format flag (an rbdfence up
		// to 0300e58), or admitted with versions that say otherwise (then
		// FrameAdmits sent no GoLine): nothing ran.
		e.record(resp, "prestart", false)
		return -1, false, skewError(vm, startWhat(req), serr, resp)
	}
	if resp.OK && stepTimedOut.Load() {
		// The answer came after the budget: the action was not run (no
		// GoLine went). What the step did is recorded; the start is
		// judged as a step that did not answer.
		e.record(resp, "prestart", false)
		nerr := e.noAnswer(ctx, req, res.Host, where, anywhere, code, fmt.Errorf("%w", errTimeout), budget, why)
		if _, err := e.finishStart(res, req, nil, nerr); err != nil {
			return -1, false, err
		}
		code, err := e.actionAlone(ctx, res, act)
		return code, false, err
	}
	if !resp.OK {
		// Refused (or the check could not be done): the script ran nothing else.
		if _, err := e.finishStart(res, req, resp, nil); err != nil {
			return -1, false, err
		}
		code, err := e.actionAlone(ctx, res, act)
		return code, false, err
	}
	if _, err := e.finishStart(res, req, resp, nil); err != nil {
		return -1, false, err
	}
	if rerr != nil {
		return -1, false, errorf(outcome.Failure, vm, "remote %s on %s: %v", act.what, res.Host, rerr)
	}
	if code == 0 {
		e.Log.Info("%s records the new instance's client addresses in the background (a failure is logged there: audit log and syslog)", res.Host)
	}
	return code, false, nil
}

// maxRemoteCommand bounds oneSession's remote command line: ssh hands it to
// the login shell as one argument, and Linux takes at most 128 KiB per
// argument.
const maxRemoteCommand = 120 << 10

// sessionCommand is oneSession's remote command: startScript and its
// positional arguments (none of them goes into the script's text). pkgBin
// ("" for none) is run instead of hostBin where it is executable (hostArgv).
func sessionCommand(pkgBin, hostBin, hostCfg string, record []byte, act remoteStart) []string {
	remote := []string{"sh", "-c", startScript(act.files), "rbdfence-start", pkgBin, hostBin, hostCfg, act.dir, string(record)}
	for _, f := range act.files {
		remote = append(remote, string(f.data))
	}
	return append(remote, act.argv...)
}

// GoLine is what the front-end sends on the session's stdin once the start
// step's admitting answer reached it within the step's budget: only then
// does the remote action run (startScript).
const GoLine = "rbdfence-go"

// startScript is the constant remote script of oneSession (files: how many
// of vm.xml, ds.xml it writes; the script depends on nothing else). Data
// come as its positional arguments, after the package binary that is run
// instead of the host binary where it is executable (shifted away first):
// $1 host binary, $2 host config ("" for
// the host's default), $3 the VM's directory, $4 the record request, then
// the files' contents, then the remote action's argv. It runs the framed
// start step (its stderr joins stdout, before its frame); only when the
// step admits the start (exit 0) AND the front-end then sends GoLine does
// it write the files and run the action on the rest of stdin. The
// front-end sends GoLine (and the action's stdin after it) only when the
// admitting answer reached it in time: a front-end that gave up sends
// nothing and closes the session, the read ends in EOF and nothing runs.
// Without this, a remote shell that outlives the ssh client (no pty: sshd
// sends no SIGHUP) would run the deploy that oned records as failed. The
// shell's read builtin takes stdin one byte at a time (a pipe cannot be
// read back), so the action's stdin starts right after GoLine. After a
// successful action it starts the record in the background, detached from
// the session (stdin, stdout, stderr not the session's: ssh does not wait
// for it), at a lower CPU priority (nice, where the host has it) than the
// VM that just started.
func startScript(files []vmDirFileData) string {
	s := `p=$1; shift
b=$1 c=$2 d=$3 r=$4
[ -n "$p" ] && [ -x "$p" ] && b=$p
if [ -n "$c" ]; then "$b" host --framed ` + claimFormatArg + ` --config "$c"; else "$b" host --framed ` + claimFormatArg + `; fi 2>&1 || exit
IFS= read -r g || exit 1
[ "$g" = ` + GoLine + ` ] || exit 1
`
	if len(files) > 0 {
		s += `mkdir -p "$d"`
		for i, f := range files {
			s += fmt.Sprintf(` && printf '%%s' "$%d" > "$d/%s"`, i+5, f.name)
		}
		s += " || exit\n"
	}
	s += fmt.Sprintf(`shift %d
"$@"
s=$?
rec() { printf '%%s' "$r" | if [ -n "$c" ]; then "$@" "$b" host --detached --config "$c"; else "$@" "$b" host --detached; fi; }
if [ "$s" -eq 0 ]; then
	if command -v nice >/dev/null 2>&1; then rec nice -n 10; else rec; fi </dev/null >/dev/null 2>&1 &
fi
exit "$s"
`, len(files)+4)
	return s
}

// claimFormatArg is the start's claim format flag (a constant of the build).
var claimFormatArg = "--" + hoststep.ClaimFormatFlag + " " + strconv.Itoa(engine.ClaimFormat)

// gatedWriter holds the session's stderr until the step's frame says
// whether the action runs: then it passes what it held and all that
// follows to w (the action's stderr, relayed as the driver's). Before
// that, and for ever when the step did not admit the start, it only keeps
// it (kept): ssh's own complaint names why the step got no answer, as a
// separate step's captured stderr did.
type gatedWriter struct {
	mu     sync.Mutex
	w      io.Writer
	kept   capBuffer
	held   bytes.Buffer
	opened bool
	closed bool
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, _ = g.kept.Write(p)
	switch {
	case g.opened:
		return g.w.Write(p)
	case !g.closed && g.held.Len() < 1<<20:
		g.held.Write(p)
	}
	return len(p), nil
}

// open passes the held output on when pass, else drops it for good.
func (g *gatedWriter) open(pass bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !pass {
		g.closed = true
		g.held.Reset()
		return
	}
	g.opened = true
	_, _ = g.w.Write(g.held.Bytes())
	g.held.Reset()
}

// goGate is oneSession's one decision: the remote action may run (true)
// or not (false), taken by whichever comes first of the step's answer
// and the end of its budget.
type goGate struct {
	once    sync.Once
	decided chan bool // receives the decision, once
}

// decide takes the decision go unless one was taken; it reports whether
// this call took it.
func (g *goGate) decide(run bool) (took bool) {
	g.once.Do(func() {
		g.decided <- run
		took = true
	})
	return took
}

// actionAlone runs the remote action by itself after fence.fail_open let a
// start go on whose check could not be done (the script ran nothing).
func (e *Env) actionAlone(ctx context.Context, res *StartResult, act remoteStart) (int, error) {
	remote := act.argv
	if inline := withVMDirFiles(act.dir, act.files, act.argv); inline != nil {
		remote = inline
	}
	code, err := e.remoteAction(ctx, res.Host, remote, act.stdin, act.stdout, e.Stderr)
	if err != nil {
		return -1, errorf(outcome.Failure, act.vm, "remote %s on %s: %v", act.what, res.Host, err)
	}
	return code, nil
}

// maxInlineFiles bounds what withVMDirFiles puts on the remote command
// line (Linux takes at most 128 KiB per argument, quoting adds some).
const maxInlineFiles = 48 << 10

// withVMDirFiles returns the remote command that writes files into dir and
// then runs remote, in one ssh session as the driver's own deploy does
// (one_vmm_exec.rb:443-470 of release-7.4.0), or nil when the files are too
// large for a command line. The contents travel as arguments, printed by
// the shell's printf: no tool of the host is assumed.
func withVMDirFiles(dir string, files []vmDirFileData, remote []string) []string {
	if len(files) == 0 {
		return remote
	}
	size := 0
	for _, f := range files {
		size += len(f.data)
		if bytes.IndexByte(f.data, 0) >= 0 {
			return nil
		}
	}
	if size > maxInlineFiles {
		return nil
	}
	script := `mkdir -p "$1"`
	args := []string{"sh", "-c", "", "rbdfence-deploy", dir}
	for i, f := range files {
		script += fmt.Sprintf(` && printf '%%s' "$%d" > "$1/%s"`, i+2, f.name)
		args = append(args, string(f.data))
	}
	script += fmt.Sprintf(` && shift %d && exec "$@"`, len(files)+1)
	args[2] = script
	return append(args, remote...)
}

// copyVMDirFiles writes files into remoteDir on host, one ssh call each:
// for files too large for withVMDirFiles.
func (e *Env) copyVMDirFiles(ctx context.Context, vm int, host, remoteDir string, files []vmDirFileData) error {
	for _, f := range files {
		var stderr capBuffer
		stderr.max = 4096
		cmd := "mkdir -p " + shellQuote(remoteDir) + " && cat > " + shellQuote(remoteDir+"/"+f.name)
		code, err := e.remoteAction(ctx, host, []string{"sh", "-c", cmd}, f.data, io.Discard, &stderr)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d: %s", code, orDash(lastLine(stderr.buf.Bytes())))
		}
		if err != nil {
			return errorf(outcome.Failure, vm, "cannot write %s/%s on %s: %v", remoteDir, f.name, host, err)
		}
	}
	return nil
}

// recordInstance records the client addresses of the instance that now
// runs on the host in the VM's claim: a later start elsewhere blocklists
// them even if that instance is cut off from Ceph then. Best effort: a
// failure is logged, the start has succeeded.
func (e *Env) recordInstance(ctx context.Context, res *StartResult) {
	if res == nil || res.Skipped || res.VM == nil || len(res.VM.Disks) == 0 {
		return
	}
	if res.FailedOpen {
		e.Log.Error("VM %d started without the check (fence.fail_open): its client addresses are not recorded", res.VM.ID)
		return
	}
	req := &hoststep.Request{Op: hoststep.OpRecord, VM: res.VM.ID, Seq: res.Seq, Host: res.Host, Run: res.Run,
		Source: engine.SourceFrontend, Disks: res.VM.Disks}
	identify(req, res.VM)
	resp, err := e.hostStep(ctx, res.Host, req, onHost)
	if err == nil && !resp.OK {
		err = errors.New(resp.Error)
	}
	if err != nil {
		e.Log.Error("VM %d started, but its client addresses were not recorded (a later start elsewhere only fences what it sees): %v", res.VM.ID, err)
		return
	}
	n := 0
	if resp.Claim != nil {
		n = len(resp.Claim.Addrs)
	}
	e.Log.Info("recorded %d client address(es) of the instance on %s", n, res.Host)
}
