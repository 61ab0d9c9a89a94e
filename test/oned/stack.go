// Package oned runs rbdfence against the real OpenNebula: oned, onemonitord,
// the scheduler, the drivers and onehem-server built from OpenNebula's own
// source (test/oned/build.sh, cached), a front-end in a mount namespace of
// its own (frontend.sh), KVM hosts with their own sshd, virtlogd and libvirtd
// in network + mount namespaces (hosts.sh), and a Ceph cluster of the suite's
// own on the hosts' bridge. rbdfence goes in as an operator installs it
// (install.sh frontend --apply, rbdfence.yaml, onehost sync --force;
// install.sh host on every host), and the tests drive VMs through onevm.
//
// One Stack per front-end and test process: the tests share its oned, hosts
// and datastores, each test its own VMs and images.
package oned

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// The suite's network and cluster (hosts.sh, frontend.sh).
const (
	BridgeIP = "10.78.0.1"
	// SecretUUID is the libvirt secret of client.libvirt on every host, as
	// OpenNebula's Ceph datastore guide defines it (CEPH_SECRET).
	SecretUUID = "5d4ba1b6-4a8d-4f5e-9a0c-7b2f1e6c3d80"
)

// Host is one KVM host of the suite.
type Host struct {
	Name string
	IP   string
}

// Net is the host as testenv sees it (for zombies run on it).
func (h Host) Net() testenv.Host { return testenv.Host{Name: h.Name, IP: h.IP} }

// Stack is one real front-end with its hosts and datastores.
type Stack struct {
	FE      string // frontend.sh's name: fe74, fe610
	Version string // 7.4.0, 6.10.5
	// Hosts are the KVM hosts the lifecycle tests share (they never break
	// one); Victim is the host the host-failure tests cut off or break,
	// one test at a time (TestHostFailures), so that the others can run at
	// the same time. The datastores' BRIDGE_LIST names Hosts only: OpenNebula's
	// Ceph datastore drivers run their rbd commands on a bridge host, and
	// a victim that does not answer would stall them.
	Hosts  []Host
	Victim Host
	Ceph   *testenv.Ceph
	// Addr is the front-end's address on the hosts' bridge (hosts.sh):
	// its monitord and its Ceph cluster (Addr:CephPort) listen there.
	Addr string
	// CephPort is the port of the stack's own Ceph cluster's monitor
	// (16784 for fe74, 16798 for fe610: hosts.sh's cephcut knows both).
	CephPort string
	// SystemDS and ImageDS are the Ceph datastores the tests use (TM_MAD
	// ceph for both; DS_MAD ceph for the image datastore).
	SystemDS, ImageDS int
	// Bin is the directory of rbdfence's binaries the install used.
	Bin string
	// Hypervisor is the VM_MAD of the hosts: kvm with /dev/kvm, else qemu.
	Hypervisor string
	dir        string
	// session is oneadmin's ONE_AUTH (user:password), for RPC.
	session string
	// hostIDs are the OpenNebula IDs of the hosts, by name.
	hostIDs map[string]int
}

var stacks sync.Map // fe -> *stackOnce

type stackOnce struct {
	once sync.Once
	s    *Stack
	err  error
}

// Dir is the suite's directory under the test root ($RBDFENCE_ONED_DIR).
func Dir() string {
	if d := os.Getenv("RBDFENCE_ONED_DIR"); d != "" {
		return d
	}
	return testenv.Dir("oned")
}

// stackDefs: each front-end has its address on the bridge (the bridge's
// own, 10.78.0.1, for both), its hosts (the victim being the one the
// host-failure tests break) and a Ceph cluster of its own on its port: the
// two installations' VMs have the same IDs, and sharing one pool is issue
// 18's case of its own, not this suite's.
type stackDef struct {
	version  string
	addr     string
	cephPort string
	hosts    []Host
	victim   Host
	cephDir  string
}

var stackDefs = map[string]stackDef{
	"fe74":  {"7.4.0", BridgeIP, "16784", []Host{{"rbdo-a", "10.78.0.11"}, {"rbdo-b", "10.78.0.12"}}, Host{"rbdo-e", "10.78.0.15"}, "ceph-oned"},
	"fe610": {"6.10.5", BridgeIP, "16798", []Host{{"rbdo-c", "10.78.0.13"}, {"rbdo-d", "10.78.0.14"}}, Host{"rbdo-f", "10.78.0.16"}, "ceph-oned6"},
}

// Start brings up front-end fe (fe74, fe610) with its hosts, once per test
// process, and returns it. Nothing is skipped: a part that cannot start
// fails the test.
func Start(t testenv.T, fe string) *Stack {
	t.Helper()
	def, ok := stackDefs[fe]
	if !ok {
		t.Fatalf("unknown front-end %q", fe)
	}
	v, _ := stacks.LoadOrStore(fe, &stackOnce{})
	so := v.(*stackOnce)
	so.once.Do(func() {
		so.s, so.err = start(t, fe, def)
	})
	if so.err != nil {
		t.Fatal(so.err)
	}
	return so.s
}

func script(name string) string { return filepath.Join(testenv.Root(), "test/oned", name) }

// sh runs a script of the suite with a bound and returns its stdout.
func sh(ctx context.Context, stdin string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{script(name)}, args...)...)
	cmd.Env = append(os.Environ(), "RBDFENCE_ONED_DIR="+Dir())
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\nstdout: %s\nstderr: %s", name, strings.Join(args, " "), err, tail(out.String(), 20), tail(errb.String(), 30))
	}
	return out.String(), nil
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

func start(t testenv.T, fe string, def stackDef) (*Stack, error) {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	s := &Stack{FE: fe, Version: def.version, Hosts: def.hosts, Victim: def.victim, Addr: def.addr, CephPort: def.cephPort,
		dir: Dir(), Hypervisor: "qemu", hostIDs: map[string]int{}}
	if _, err := os.Stat("/dev/kvm"); err == nil {
		s.Hypervisor = "kvm"
	}
	phase := func(what string) {
		fmt.Fprintf(os.Stderr, "oned: %s: %s at %s\n", fe, what, time.Since(t0).Round(time.Second))
	}
	names := []string{}
	for _, h := range s.all() {
		names = append(names, h.Name)
	}
	// The build (cached; minutes when cold), rbdfence's binaries and the
	// hosts (their bridge carries the cluster's address) at once; then the
	// cluster and the front-end's tree; then the hosts' and the front-end's
	// Ceph access and rbdfence, each host on its own.
	err := parallel(
		func() error { _, err := sh(ctx, "", "build.sh", s.Version); return err },
		func() error {
			return catch(t, func(t testenv.T) { s.Bin = filepath.Dir(testenv.Bin(t, "rbdfence")) })
		},
		func() error { _, err := sh(ctx, "", "hosts.sh", append([]string{"up"}, names...)...); return err },
	)
	if err != nil {
		return nil, err
	}
	phase("build, binaries and hosts ready")
	err = parallel(
		func() error {
			return catch(t, func(t testenv.T) { s.Ceph = testenv.StartCephAt(t, testenv.Dir(def.cephDir), s.Addr, s.CephPort) })
		},
		func() error { _, err := sh(ctx, "", "frontend.sh", "up", fe); return err },
	)
	if err != nil {
		return nil, err
	}
	phase("Ceph cluster and front-end namespace ready")
	steps := []func() error{func() error { return s.installFrontend(ctx) }}
	for _, h := range s.all() {
		steps = append(steps, func() error { return s.setupHost(ctx, h) })
	}
	if err := parallel(steps...); err != nil {
		return nil, err
	}
	phase("rbdfence installed, oned started")
	if err := s.addHostsAndDatastores(ctx); err != nil {
		return nil, err
	}
	phase("hosts monitored and synced, datastores monitored")
	return s, nil
}

// all are the stack's hosts, the victim last.
func (s *Stack) all() []Host { return append(append([]Host(nil), s.Hosts...), s.Victim) }

// parallel runs fns at once and returns the first of their errors.
func parallel(fns ...func() error) error {
	errs := make(chan error, len(fns))
	for _, f := range fns {
		go func() { errs <- f() }()
	}
	var first error
	for range fns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// catch runs f, which uses testenv's helpers, in a goroutine of its own
// and returns what it gave to Fatal: testing's FailNow must not be called
// outside the test's goroutine. Cleanups go to parent.
func catch(parent testenv.T, f func(t testenv.T)) error {
	ct := &catchT{parent: parent}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ct)
	}()
	<-done
	return ct.err
}

type catchT struct {
	parent testenv.T
	err    error
}

func (c *catchT) Helper()           {}
func (c *catchT) Cleanup(fn func()) { c.parent.Cleanup(fn) }
func (c *catchT) Fatal(a ...any) {
	c.err = errors.New(fmt.Sprint(a...))
	runtime.Goexit()
}
func (c *catchT) Fatalf(format string, a ...any) {
	c.err = fmt.Errorf(format, a...)
	runtime.Goexit()
}

// hostFS is a host's private tree (hosts.sh), seen from the test.
func (s *Stack) hostFS(h Host, sub string) string { return filepath.Join(s.dir, h.Name, "fs", sub) }

// HookPath is rbdfence's libvirt hook on h (/etc/libvirt/hooks/qemu.d/10-rbdfence
// in h's mount namespace, install.sh host), seen from the test.
func (s *Stack) HookPath(h Host) string { return s.hostFS(h, "etc-libvirt/hooks/qemu.d/10-rbdfence") }

// setupHost makes h an OpenNebula Ceph KVM host as OpenNebula's Ceph
// datastore guide has it: /etc/ceph with the cluster's conf and the
// client.libvirt keyring, the libvirt secret of client.libvirt (CEPH_SECRET),
// and rbdfence's hook installed with install.sh host, libvirtd restarted once
// (it had no qemu hook when it started: README, "From a checkout").
func (s *Stack) setupHost(ctx context.Context, h Host) error {
	conf, err := os.ReadFile(s.Ceph.Conf)
	if err != nil {
		return err
	}
	keyring, err := os.ReadFile(s.Ceph.Keyring)
	if err != nil {
		return err
	}
	if err := os.WriteFile(s.hostFS(h, "etc-ceph/ceph.conf"), conf, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(s.hostFS(h, "etc-ceph/ceph.client.libvirt.keyring"), keyring, 0o640); err != nil {
		return err
	}
	key := ""
	for _, l := range strings.Split(string(keyring), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "key" && f[1] == "=" {
			key = f[2]
		}
	}
	if key == "" {
		return fmt.Errorf("no key in %s", s.Ceph.Keyring)
	}
	secret := fmt.Sprintf(`<secret ephemeral='no' private='no'><uuid>%s</uuid><usage type='ceph'><name>client.libvirt secret</name></usage></secret>`, SecretUUID)
	cmd := fmt.Sprintf(`set -e
cat >/root/secret.xml <<'EOF'
%s
EOF
virsh -q secret-define /root/secret.xml >/dev/null
virsh -q secret-set-value --secret %s --base64 %s >/dev/null
rm -f /root/secret.xml
RBDFENCE_BIN=%s %s host >/dev/null`, secret, SecretUUID, key, testenv.ShellQuote(s.Bin), testenv.ShellQuote(filepath.Join(testenv.Root(), "install.sh")))
	if _, err := sh(ctx, "", "hosts.sh", "exec", h.Name, "bash", "-c", cmd); err != nil {
		return fmt.Errorf("set-up of host %s: %w", h.Name, err)
	}
	if _, err := sh(ctx, "", "hosts.sh", "libvirtd", h.Name, "restart"); err != nil {
		return err
	}
	return nil
}

// Port0 is the front-end's oned port (frontend.sh).
func (s *Stack) Port0() int {
	switch s.FE {
	case "fe74":
		return 16780
	case "fe74b":
		return 16785
	}
	return 16794
}

// installFrontend installs rbdfence as the README tells an operator:
// install.sh frontend --apply (the VM_MAD change in oned.conf), the
// front-end's /etc/one/rbdfence.yaml pointed at this oned and at
// oneadmin's credentials; then oned starts (frontend.sh up makes the
// front-end without starting it: the operator's restart after the change
// of oned.conf is its first start here).
func (s *Stack) installFrontend(ctx context.Context) error {
	// Ceph access on the front-end, for `rbdfence fence-host` (the HA hook):
	// the client.libvirt keyring readable by oneadmin (README, Host failure).
	keyring, err := os.ReadFile(s.Ceph.Keyring)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.dir, s.FE, "fs/etc-ceph/ceph.client.libvirt.keyring"), keyring, 0o640); err != nil {
		return err
	}
	cmd := fmt.Sprintf(`set -e
RBDFENCE_BIN=%s %s frontend --apply >/dev/null
cat >/etc/one/rbdfence.yaml <<EOF
opennebula:
  remote: ssh
  # the hosts have rbdfence from install.sh host, no package: the synced
  # host step runs, never a /usr/bin/rbdfence this machine may have
  host_package_binary: ""
  endpoint: http://127.0.0.1:%d/RPC2
  auth_file: /root/.one/one_auth
fence:
  fail_open: false
ceph:
  mon_host: %s:%s
  user: libvirt
  keyring: /etc/ceph/ceph.client.libvirt.keyring
EOF
grep -q 'deploy=deploy-rbdfence' /etc/one/oned.conf`, testenv.ShellQuote(s.Bin), testenv.ShellQuote(filepath.Join(testenv.Root(), "install.sh")), s.Port0(), s.Addr, s.CephPort)
	if _, err := s.exec(ctx, "bash", "-c", cmd); err != nil {
		return fmt.Errorf("rbdfence install on %s: %w", s.FE, err)
	}
	auth, err := os.ReadFile(filepath.Join(s.dir, s.FE, "fs/root/.one/one_auth"))
	if err != nil {
		return err
	}
	s.session = strings.TrimSpace(string(auth))
	_, err = sh(ctx, "", "frontend.sh", "start", s.FE)
	return err
}

// Restart stops and starts the front-end's oned (and hem), as an operator
// does after a change of oned.conf.
func (s *Stack) Restart(ctx context.Context) error {
	if _, err := sh(ctx, "", "frontend.sh", "stop", s.FE); err != nil {
		return err
	}
	_, err := sh(ctx, "", "frontend.sh", "start", s.FE)
	return err
}

// SSHMux turns the packages' ssh multiplexing for oned's drivers on or off
// (frontend.sh sshmux: OpenNebula's ssh wrapper first in oned's PATH, as
// its systemd unit has it) and restarts oned so that its drivers get it.
func (s *Stack) SSHMux(ctx context.Context, on bool) error {
	arg := "off"
	if on {
		arg = "on"
	}
	if _, err := sh(ctx, "", "frontend.sh", "sshmux", s.FE, arg); err != nil {
		return err
	}
	return s.Restart(ctx)
}

func (s *Stack) exec(ctx context.Context, args ...string) (string, error) {
	return sh(ctx, "", "frontend.sh", append([]string{"exec", s.FE}, args...)...)
}

// addHostsAndDatastores registers the hosts (onehost create -i kvm -v kvm)
// and OpenNebula's Ceph datastores at once, waits until the hosts are
// MONITORED, runs onehost sync --force as the README says, and waits until
// both datastores are monitored.
func (s *Stack) addHostsAndDatastores(ctx context.Context) error {
	for _, h := range s.all() {
		out, err := s.exec(ctx, "onehost", "create", h.Name, "-i", "kvm", "-v", s.Hypervisor)
		if err != nil {
			return err
		}
		id, err := parseID(out)
		if err != nil {
			return err
		}
		s.hostIDs[h.Name] = id
	}
	if err := s.addDatastores(ctx); err != nil {
		return err
	}
	for _, h := range s.all() {
		if err := s.waitHostState(ctx, h.Name, "MONITORED", 3*time.Minute); err != nil {
			return err
		}
	}
	if _, err := sh(ctx, "", "frontend.sh", "oneadmin", s.FE, "onehost", "sync", "--force"); err != nil {
		return err
	}
	// Both must be monitored: images need the image datastore's capacity,
	// the scheduler the system datastore's.
	for _, ds := range []int{s.ImageDS, s.SystemDS} {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			out, err := s.RPC("one.datastore.info", ds, false)
			if err == nil {
				if mb, _ := strconv.Atoi(xmlField(out, "FREE_MB")); mb > 0 {
					break
				}
			}
			if time.Now().After(deadline) {
				out, _ := s.exec(ctx, "onedatastore", "show", strconv.Itoa(ds))
				return fmt.Errorf("datastore %d not monitored after 3m:\n%s", ds, out)
			}
			time.Sleep(time.Second)
		}
	}
	return nil
}

// HostID is the OpenNebula ID of host name.
func (s *Stack) HostID(name string) (int, error) {
	id, ok := s.hostIDs[name]
	if !ok {
		return 0, fmt.Errorf("host %s is not registered in %s", name, s.FE)
	}
	return id, nil
}

// HostState is the host's state name (one.host.info: MONITORED, ERROR, ...).
func (s *Stack) HostState(name string) (string, error) {
	id, err := s.HostID(name)
	if err != nil {
		return "", err
	}
	out, err := s.RPC("one.host.info", id, false)
	if err != nil {
		return "", err
	}
	return hostStateName(xmlField(out, "STATE")), nil
}

func (s *Stack) waitHostState(ctx context.Context, name, want string, within time.Duration) error {
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) && ctx.Err() == nil {
		st, err := s.HostState(name)
		if err == nil {
			last = st
			if st == want {
				return nil
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	out, _ := s.exec(context.Background(), "onehost", "show", name)
	return fmt.Errorf("host %s is not %s after %s (state %s)\n%s", name, want, within, last, tail(out, 30))
}

// hostStateName: include/Host.h's HostState (7.4.0 and 6.10.5 alike).
func hostStateName(n string) string {
	names := []string{"INIT", "MONITORING_MONITORED", "MONITORED", "ERROR", "DISABLED",
		"MONITORING_ERROR", "MONITORING_INIT", "MONITORING_DISABLED", "OFFLINE"}
	i, err := strconv.Atoi(n)
	if err != nil || i < 0 || i >= len(names) {
		return "?" + n
	}
	return names[i]
}

// addDatastores creates the Ceph system and image datastores that OpenNebula's
// Ceph guide describes (pool one, client.libvirt, the secret, the hosts as
// bridges).
func (s *Stack) addDatastores(ctx context.Context) error {
	bridges := []string{}
	for _, h := range s.Hosts {
		bridges = append(bridges, h.Name)
	}
	common := fmt.Sprintf(`TM_MAD = "ceph"
DISK_TYPE = "RBD"
POOL_NAME = "%s"
CEPH_HOST = "%s:%s"
CEPH_USER = "libvirt"
CEPH_SECRET = "%s"
BRIDGE_LIST = "%s"
`, s.Ceph.Pool, s.Addr, s.CephPort, SecretUUID, strings.Join(bridges, " "))
	sys, err := s.createFromTemplate(ctx, "onedatastore", "NAME = \"ceph_system\"\nTYPE = \"SYSTEM_DS\"\n"+common)
	if err != nil {
		return err
	}
	// No capacity check on the images (DATASTORE_CAPACITY_CHECK, a
	// datastore attribute): the one-OSD memstore cluster's free space as
	// the Ceph datastore's monitor reads it swings, and a reading of none
	// refused fe610's 8 MB images ("Not enough space in datastore", Dec 2
	// gate) until the next datastore monitoring, minutes later.
	img, err := s.createFromTemplate(ctx, "onedatastore", "NAME = \"ceph_images\"\nDS_MAD = \"ceph\"\nDATASTORE_CAPACITY_CHECK = \"NO\"\n"+common)
	if err != nil {
		return err
	}
	s.SystemDS, s.ImageDS = sys, img
	return nil
}

// createFromTemplate runs `<cmd> create FILE` with tpl and returns the ID.
func (s *Stack) createFromTemplate(ctx context.Context, cmd, tpl string) (int, error) {
	f, err := os.CreateTemp(s.dir, "tpl-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(tpl); err != nil {
		return 0, err
	}
	f.Close()
	out, err := s.exec(ctx, cmd, "create", f.Name())
	if err != nil {
		return 0, err
	}
	return parseID(out)
}

func parseID(out string) (int, error) {
	// "ID: 100"
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "ID:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no ID in %q", out)
}

// xmlField is the text of the first <name> element of doc ("" if none).
func xmlField(doc, name string) string {
	i := strings.Index(doc, "<"+name+">")
	if i < 0 {
		return ""
	}
	rest := doc[i+len(name)+2:]
	j := strings.Index(rest, "</"+name+">")
	if j < 0 {
		return ""
	}
	v := rest[:j]
	v = strings.TrimPrefix(v, "<![CDATA[")
	return strings.TrimSuffix(v, "]]>")
}

// ReplaceHost deletes host name from oned and registers it again with VM_MAD
// vmMad (onehost delete; onehost create -i kvm -v vmMad), then waits until
// it is MONITORED.
func (s *Stack) ReplaceHost(t testenv.T, name, vmMad string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := s.exec(ctx, "onehost", "delete", name); err != nil {
		t.Fatal(err)
	}
	out, err := s.exec(ctx, "onehost", "create", name, "-i", "kvm", "-v", vmMad)
	if err != nil {
		t.Fatal(err)
	}
	id, err := parseID(out)
	if err != nil {
		t.Fatal(err)
	}
	s.hostIDs[name] = id
	if err := s.waitHostState(ctx, name, "MONITORED", 3*time.Minute); err != nil {
		t.Fatal(err)
	}
}
