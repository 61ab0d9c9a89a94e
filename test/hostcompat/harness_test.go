// Package hostcompat_test runs the front-end against hosts whose rbdfence
// or userland differs from the front-end's, reached over real ssh: which
// host binary runs (the package's, else the synced one), a host that
// cannot start it (an older userland: a Debian 11 chroot), a host whose
// libvirt hook is older than the claim format (0300e58's hook, built from
// that commit), and doctor on each role.
//
// A test host here is a real sshd, started by the ssh client for each
// connection (ProxyCommand sshd -i, as OpenSSH's own regression tests do:
// no listening port, nothing left running), whose ForceCommand runs the
// session either chrooted into a userland (test/hostcompat/userland.sh) or
// in a private mount namespace that shows a test directory as the host's
// /etc/libvirt and /var/tmp (its hook, its synced binary): the machine's
// own files are never touched. Nothing here skips.
package hostcompat_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

const oneAuth = "oneadmin:opennebula"

// rig is one front-end and its test hosts.
type rig struct {
	t         *testing.T
	dir       string
	sshConfig string
	key       string
	sim       *onedsim.Sim
	nextHost  int
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{t: t, dir: t.TempDir()}
	r.sshConfig = r.path("ssh_config")
	r.key = r.path("id_ed25519")
	run(t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", r.key)
	r.write("ssh_config", "", 0o644)
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // sshd's privilege separation directory
		t.Fatal(err)
	}
	r.sim = onedsim.New(oneAuth)
	if err := r.sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.sim.Close() })
	r.write("one_auth", oneAuth+"\n", 0o600)
	return r
}

func (r *rig) path(elem ...string) string {
	return filepath.Join(append([]string{r.dir}, elem...)...)
}

func (r *rig) write(name, body string, mode os.FileMode) string {
	r.t.Helper()
	p := name
	if !filepath.IsAbs(p) {
		p = r.path(name)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		r.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// host is one test host.
type host struct {
	name string
	// root is what the host sees as / (chroot) or where its own
	// /etc/libvirt and /var/tmp come from (ns host): host paths map into it.
	root   string
	chroot bool
}

// at is the path on the front-end of the host's path p.
func (h host) at(p string) string {
	if h.chroot {
		return filepath.Join(h.root, p)
	}
	for _, d := range []string{"/etc/libvirt", "/var/tmp"} {
		if rest, ok := strings.CutPrefix(p, d); ok && (rest == "" || rest[0] == '/') {
			return filepath.Join(h.root, strings.TrimPrefix(d, "/"), rest)
		}
	}
	return p // the machine's own (a ns host shares everything else)
}

// addHost makes a host reachable as name over ssh -F r.sshConfig. The
// session's command runs chrooted into root (chroot), or in a private
// mount namespace where root/etc/libvirt is /etc/libvirt and root/var/tmp
// is /var/tmp.
func (r *rig) addHost(name, root string, chroot bool) host {
	r.t.Helper()
	d := r.path("hosts", name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		r.t.Fatal(err)
	}
	run(r.t, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(d, "host_key"))
	pub, err := os.ReadFile(r.key + ".pub")
	if err != nil {
		r.t.Fatal(err)
	}
	r.write(filepath.Join(d, "authorized_keys"), string(pub), 0o600)
	enter := fmt.Sprintf("#!/bin/sh\nexec /usr/sbin/chroot %s /bin/sh -c \"$SSH_ORIGINAL_COMMAND\"\n", root)
	if !chroot {
		for _, p := range []string{"etc/libvirt", "var/tmp"} {
			if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
				r.t.Fatal(err)
			}
		}
		// The machine's own rbdfence package binary, if it has one, is not
		// this host's: hidden (not executable), so a host has the package
		// only where a test puts it (host_package_binary).
		enter = fmt.Sprintf("#!/bin/sh\nexec /usr/bin/unshare -m --propagation private /bin/sh -c 'mount --bind \"$1\" /etc/libvirt && mount --bind \"$2\" /var/tmp && { [ ! -e /usr/bin/rbdfence ] || mount --bind /dev/null /usr/bin/rbdfence; } && exec /bin/sh -c \"$SSH_ORIGINAL_COMMAND\"' enter %s %s\n",
			filepath.Join(root, "etc/libvirt"), filepath.Join(root, "var/tmp"))
	}
	r.write(filepath.Join(d, "enter"), enter, 0o755)
	r.write(filepath.Join(d, "sshd_config"), fmt.Sprintf(`HostKey %[1]s/host_key
AuthorizedKeysFile %[1]s/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
StrictModes no
PidFile none
ForceCommand %[1]s/enter
LogLevel ERROR
`, d), 0o644)
	f, err := os.OpenFile(r.sshConfig, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	fmt.Fprintf(f, `Host %s
  ProxyCommand /usr/sbin/sshd -i -f %s/sshd_config -E %s/sshd.log
  User root
  IdentityFile %s
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
`, name, d, d, r.key)
	f.Close()
	r.nextHost++
	r.sim.PutHost(onedsim.Host{ID: r.nextHost, Name: name, State: 2, LastMonitored: time.Now(),
		Template: onedsim.Template{{Name: "RBDFENCE_HOST_ADDRESSES", Value: "127.0.0.1"}}})
	return host{name: name, root: root, chroot: chroot}
}

// nsHost is a host with the machine's userland and its own /etc/libvirt
// and /var/tmp: the synced binary of this build in place, a hook if hook
// is not "" (the binary the qemu.d wrapper runs).
func (r *rig) nsHost(name, hook string) host {
	r.t.Helper()
	h := r.addHost(name, r.path("roots", name), false)
	r.sync(h, testenv.Bin(r.t, "rbdfence"))
	if hook != "" {
		r.installHook(h, hook)
	}
	return h
}

// sync puts bin where onehost sync puts the host binary on h.
func (r *rig) sync(h host, bin string) {
	r.t.Helper()
	copyFile(r.t, bin, h.at(syncedBinary))
}

// installHook writes the qemu.d wrapper the installer writes, running bin
// (copied into the host's /etc/libvirt tree: its path on the host is the
// same on every kind of host).
func (r *rig) installHook(h host, bin string) {
	r.t.Helper()
	onHost := "/etc/libvirt/hooks/rbdfence-hook"
	copyFile(r.t, bin, h.at(onHost))
	r.write(h.at("/etc/libvirt/hooks/qemu.d/10-rbdfence"), "#!/bin/sh\nexec "+onHost+" -- \"$@\"\n", 0o755)
}

const syncedBinary = "/var/tmp/one/rbdfence/rbdfence-host"

// ssh runs cmd on h as the front-end's ssh would.
func (r *rig) ssh(h host, cmd string) (string, int) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ssh", "-F", r.sshConfig, h.name, cmd).CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatalf("ssh %s %s: %v", h.name, cmd, err)
	}
	return string(out), code
}

// frontendConfig writes the front-end's config: the drivers reach the
// hosts with this rig's ssh; one is more of the opennebula block (lines
// indented by two), extra is appended (YAML). Without a host_config in
// one, the hosts' steps read one of this rig's (their state, audit log and
// spool in the test's directory), never the machine's /etc/one/rbdfence.yaml.
func (r *rig) frontendConfig(name, one, extra string) string {
	r.t.Helper()
	if !strings.Contains(one, "host_config:") {
		one += "  host_config: " + r.write("host-default.yaml", fmt.Sprintf("audit_log: %s\nspool_dir: %s\nstate_dir: %s\n",
			r.path("host-audit.log"), r.path("host-spool"), r.path("host-state")), 0o644) + "\n"
	}
	return r.write(name, fmt.Sprintf(`opennebula:
%s  endpoint: %s
  auth_file: %s
  remote: ssh
  ssh: ssh -F %s
  ssh_persist: 0s
  local_binary: %s
  remote_dir: %s
timeouts:
  connect: 5s
  ceph_op: 10s
  oned: 5s
  ssh: 30s
  total: 60s
audit_log: %s
spool_dir: %s
state_dir: %s
%s`, one, r.sim.URL(), r.path("one_auth"), r.sshConfig, testenv.Bin(r.t, "rbdfence"), r.path("hostremotes"),
		r.path("frontend-audit.log"), r.path("frontend-spool"), r.path("frontend-state"), extra), 0o644)
}

// result is one run of a binary.
type result struct {
	code           int
	stdout, stderr string
}

// plain is stderr without the INFO/ERROR/DEBUG log lines: what oned shows.
func (r result) plain() []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if l != "" && !strings.HasPrefix(l, "INFO:") && !strings.HasPrefix(l, "ERROR:") && !strings.HasPrefix(l, "DEBUG:") {
			out = append(out, l)
		}
	}
	return out
}

// runBin runs prog with RBDFENCE_CONFIG=cfg, stdin and args.
func runBin(t *testing.T, cfg, prog, stdin string, args ...string) result {
	t.Helper()
	r := testenv.Run(t, 4*time.Minute, []string{"RBDFENCE_CONFIG=" + cfg}, stdin, prog, args...)
	return result{code: r.Code, stdout: r.Stdout, stderr: r.Stderr}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(dst) // a new file, as an upgrade writes it
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

// deployment is a deploy of VM vm on h as oned runs the local action: the
// local deployment file's path, the host, the VM id; the domain XML, base64,
// on stdin.
func deployment(r *rig, vm int, h host, image, mon string) (args []string, stdin string) {
	dir := r.path("datastores", "0", fmt.Sprint(vm))
	mhost, mport, _ := strings.Cut(mon, ":")
	xml := fmt.Sprintf(`<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'><name>one-%d</name><memory>1048576</memory><devices>
<disk type='network' device='disk'><source protocol='rbd' name='%s'><host name='%s' port='%s'/></source><target dev='vda' bus='virtio'/></disk>
</devices><metadata><one:vm xmlns:one="http://opennebula.org/xmlns/libvirt/1.0"><one:system_datastore><![CDATA[%s]]></one:system_datastore><one:deployment_time>1700000000</one:deployment_time></one:vm></metadata></domain>
`, vm, image, mhost, mport, dir)
	local := r.write(filepath.Join(dir, "deployment.0"), xml, 0o644)
	return []string{local, h.name, fmt.Sprint(vm), h.name}, base64.StdEncoding.EncodeToString([]byte(xml))
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
