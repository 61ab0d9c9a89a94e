package frontend

import (
	"bytes"
	"context"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

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
	if cm := controlMaster(append(argv, opts...)); cm != "" {
		argv = append(argv, "-o", "ControlMaster="+cm)
		if cm != "no" {
			argv = append(argv, e.control.opts(e.Cfg, host)...)
		}
	}
	argv = append(argv, opts...)
	argv = append(argv, host, shellJoin(remote))
	return argv, nil
}

// controlMaster is the ControlMaster value sshArgvOpts adds to the ssh
// command line argv: $SSH_OPT_CONTROL_MASTER, else auto; "" when argv
// names one itself.
func controlMaster(argv []string) string {
	if strings.Contains(strings.ToLower(strings.Join(argv, " ")), "controlmaster") {
		return ""
	}
	if cm := os.Getenv("SSH_OPT_CONTROL_MASTER"); cm != "" {
		return cm
	}
	return "auto"
}

// probeSSH starts, in the background, the ssh -G probe (control.opts) of
// each host an action's sessions are about to reach, so that it runs beside
// the action's other work (oned's VM read, the session to the first host)
// instead of before each host's first session: 9-13 ms each on the test
// stack (docs/PERFORMANCE.md). control.opts probes a host once and caches
// the answer; a session that needs it meanwhile waits for that probe.
func (e *Env) probeSSH(hosts ...string) {
	for _, h := range e.probeHosts(hosts) {
		go e.control.opts(e.Cfg, h)
	}
}

// probeHosts are the hosts probeSSH probes: each valid one once, none where
// sshArgv would not ask (a ControlMaster in opennebula.ssh,
// $SSH_OPT_CONTROL_MASTER=no).
func (e *Env) probeHosts(hosts []string) []string {
	if !e.masterAsked() {
		return nil
	}
	var out []string
	for _, h := range hosts {
		if checkHost("host", h) == nil && !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// masterAsked says whether sshArgv asks for a master (and so for
// control.opts): opennebula.ssh names no ControlMaster and
// $SSH_OPT_CONTROL_MASTER is not "no".
func (e *Env) masterAsked() bool {
	cm := controlMaster(strings.Fields(e.Cfg.OpenNebula.SSH))
	return cm != "" && cm != "no"
}

// OwnMaster says whether this front-end's sessions to host ride a master of
// rbdfence's own (control.opts): sshArgv asks for one, opennebula.ssh_persist
// is not 0 and the ssh config names no ControlPath for host (ssh -G). Only
// there do the ssh hooks (WarmSSH) open a connection.
func (e *Env) OwnMaster(host string) bool {
	return e.masterAsked() && len(e.control.opts(e.Cfg, host)) > 0
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
