package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The test hosts made by test/netns/hosts.sh: two network namespaces with
// their own addresses on a bridge in the root namespace, each with an sshd,
// and a second Ceph cluster listening on the bridge address so that Ceph
// sees each host's clients with that host's address.
// NetCephPort is the port of StartCephNet's cluster (on the bridge address);
// NetCephDir() is its directory under the test root.
const NetCephPort = "16790"

// NetCephDir is where StartCephNet's cluster lives.
func NetCephDir() string { return Dir("ceph-net") }

// SSHTimeout bounds one Hosts.SSH call: the remote command is killed on the
// host after this long, and the call fails the test.
var SSHTimeout = 2 * time.Minute

// Host is one test host: a network namespace (Name, also its ssh_config
// host alias) with its own address. Only the network is separate: files,
// users and processes are the machine's.
type Host struct {
	Name string // rbdf-a, rbdf-b
	IP   string // 10.77.0.11, 10.77.0.12
}

// Hosts is the test network as hosts.sh up reports it.
type Hosts struct {
	BridgeIP  string // the root namespace's address on the bridge (10.77.0.1)
	SSHConfig string // ssh -F SSHConfig <Host.Name> ... logs in as root
	SSHKey    string // the client key that ssh_config uses
	A, B      Host
}

var (
	hostsOnce sync.Once
	hostsRes  *Hosts
	hostsErr  error
)

// StartHosts brings the test hosts up (or finds them up) once per process.
func StartHosts(t T) *Hosts {
	t.Helper()
	hostsOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(Root(), "test/netns/hosts.sh"), "up")
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			hostsErr = fmt.Errorf("test/netns/hosts.sh up: %v\n%s", err, tail(errb.String(), 30))
			return
		}
		env := ParseExports(out.String())
		h := &Hosts{
			BridgeIP:  env["RBDFENCE_TEST_BRIDGE_IP"],
			SSHConfig: env["RBDFENCE_TEST_SSH_CONFIG"],
			SSHKey:    env["RBDFENCE_TEST_SSH_KEY"],
			A:         Host{Name: env["RBDFENCE_TEST_HOST_A"], IP: env["RBDFENCE_TEST_HOST_A_IP"]},
			B:         Host{Name: env["RBDFENCE_TEST_HOST_B"], IP: env["RBDFENCE_TEST_HOST_B_IP"]},
		}
		if h.BridgeIP == "" || h.SSHConfig == "" || h.SSHKey == "" ||
			h.A.Name == "" || h.A.IP == "" || h.B.Name == "" || h.B.IP == "" {
			hostsErr = fmt.Errorf("hosts.sh printed no usable env:\n%s", out.String())
			return
		}
		hostsRes = h
	})
	if hostsErr != nil {
		t.Fatal(hostsErr)
	}
	return hostsRes
}

// StartCephNet starts (or reuses) the test hosts and the Ceph cluster that
// listens on the bridge address (NetCephDir, BridgeIP:NetCephPort), which
// the hosts reach.
func StartCephNet(t T) *Ceph {
	t.Helper()
	hs := StartHosts(t)
	return StartCephAt(t, NetCephDir(), hs.BridgeIP, NetCephPort)
}

// Command returns a command that runs name inside the host's network
// namespace (ip netns exec), as root, like a process started on that host.
// ip execs the program, so the command's process is the program itself.
func (h Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.Name, name}, args...)...)
}

// StartZombieOn runs test/zombie on image inside host h and waits until it
// is ready; Ceph must see it with h's address.
func StartZombieOn(t T, c *Ceph, h Host, image, mode string) *Zombie {
	t.Helper()
	return StartZombieSeenAs(t, c, h, h.IP, image, mode)
}

// StartZombieSeenAs is StartZombieOn on a host that Ceph sees as seen (the
// address of a NAT in front of it).
func StartZombieSeenAs(t T, c *Ceph, h Host, seen, image, mode string) *Zombie {
	t.Helper()
	z := StartZombieCmd(t, h.Command(Bin(t, "zombie"), "--mon", c.Mon, "--id", c.User,
		"--keyring", c.Keyring, "--image", image, "--mode", mode))
	if !strings.HasPrefix(z.Addr, seen+":") {
		z.Stop()
		t.Fatalf("zombie on %s (%s) has client address %q, not on %s: is the cluster on the bridge (StartCephNet)?",
			h.Name, h.IP, z.Addr, seen)
	}
	return z
}

// SSH runs remoteCmd on host h over ssh (as root, ssh -F hs.SSHConfig) with
// stdin ("" for none) and returns its stdout, stderr and exit code; 255 is
// ssh's own failure. The words of remoteCmd are joined with spaces and run
// by root's login shell, as ssh does. On the host the command runs under
// timeout(1), so that it cannot outlive SSHTimeout even when the ssh client
// is gone (a remote command that neither reads nor writes would otherwise
// survive its ssh client); running over SSHTimeout fails the test.
func (hs *Hosts) SSH(t T, h Host, stdin string, remoteCmd ...string) (stdout, stderr string, code int) {
	t.Helper()
	if len(remoteCmd) == 0 {
		t.Fatal("Hosts.SSH: no remote command")
	}
	secs := int((SSHTimeout + time.Second - 1) / time.Second)
	remote := fmt.Sprintf(`exec timeout -k 5 %d "$SHELL" -c %s`, secs, ShellQuote(strings.Join(remoteCmd, " ")))
	ctx, cancel := context.WithTimeout(context.Background(), SSHTimeout+15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", "-F", hs.SSHConfig, h.Name, remote)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	if took := time.Since(start); ctx.Err() != nil || took >= SSHTimeout {
		t.Fatalf("ssh %s %s: timed out after %s\nstdout: %s\nstderr: %s",
			h.Name, strings.Join(remoteCmd, " "), took.Round(time.Millisecond), tail(out.String(), 20), tail(errb.String(), 20))
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("ssh %s %s: %v", h.Name, strings.Join(remoteCmd, " "), err)
	}
	return out.String(), errb.String(), code
}

// ShellQuote quotes s as one POSIX shell word.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// String is the host's name and address, for messages.
func (h Host) String() string { return h.Name + " (" + h.IP + ")" }
