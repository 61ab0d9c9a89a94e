package hook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/test/libvirt"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// hostName is the OpenNebula host name the tests give this host.
const hostName = "hooktest-node"

// onedAuth is the session the oned stand-in accepts.
const onedAuth = "oneadmin:hooktest-secret"

// hookLock serialises test processes that install the hook into the one
// libvirtd of this machine.
const hookLock = "/run/rbdfence-test/hook.lock"

// pid makes the names of this process's domains and VMs unique: the hook
// is installed with --domains matching only them, so that the domains of
// other tests using the same libvirtd (the danger control test runs two
// QEMUs on one image on purpose) are left alone.
var pid = os.Getpid()

// vmID returns this process's n-th OpenNebula VM id (n < 100).
func vmID(n int) int { return pid*100 + n }

// oneName is the libvirt domain name of VM id.
func oneName(id int) string { return fmt.Sprintf("one-%d", id) }

// plainName is a domain that is not an OpenNebula VM.
func plainName(s string) string { return fmt.Sprintf("hooktest-%d-%s", pid, s) }

// domainsRE matches exactly the domains of this process.
func domainsRE() string { return fmt.Sprintf(`^(one-%d[0-9]{2}|hooktest-%d-.+)$`, pid, pid) }

// env is one test's real parts: the Ceph cluster, libvirtd with the hook
// installed by install.sh, an oned stand-in and the hook's config.
type env struct {
	t        *testing.T
	ceph     *testenv.Ceph
	lv       libvirttest.Libvirt
	secret   string
	sim      *onedsim.Sim
	dir      string
	cfgPath  string
	audit    string
	stateDir string
	entry    string // the installed qemu.d entry
}

// newEnv starts everything and installs the hook with fenceExtra under
// "fence:" in its config.
func newEnv(t *testing.T, fenceExtra string) *env {
	t.Helper()
	e := &env{t: t, ceph: testenv.StartCeph(t), lv: libvirttest.StartLibvirt(t), dir: t.TempDir()}
	e.secret = libvirttest.Secret(t, e.ceph.User, e.ceph.Keyring)
	e.sim = onedsim.New(onedAuth)
	if err := e.sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.sim.Close() })
	e.cfgPath = filepath.Join(e.dir, "rbdfence.yaml")
	e.audit = filepath.Join(e.dir, "audit.log")
	e.stateDir = filepath.Join(e.dir, "state")
	e.writeConfig("", fenceExtra)
	e.install()
	return e
}

// writeConfig (re)writes the hook's config; the installed wrapper reads it
// on every call. cephMon overrides the configured monitors ("" = cluster).
func (e *env) writeConfig(cephMon, fenceExtra string) {
	e.t.Helper()
	auth := filepath.Join(e.dir, "one_auth")
	if err := os.WriteFile(auth, []byte(onedAuth+"\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	// A short connect timeout only where the monitor is dead on purpose: a
	// loaded test machine must not turn a slow connect into a refusal.
	connect := "15s"
	if cephMon == "" {
		cephMon = e.ceph.Mon
	} else {
		connect = "3s"
	}
	cfg := fmt.Sprintf(`ceph:
  mon_host: %s
  user: %s
  keyring: %s
timeouts:
  connect: %s
  ceph_op: 15s
  oned: 5s
  total: 60s
fence:
  expire: 1h
  migration_window: 10m
%sopennebula:
  endpoint: %s
  auth_file: %s
audit_log: %s
spool_dir: %s
state_dir: %s
host_name: %s
`, cephMon, e.ceph.User, e.ceph.Keyring, connect, fenceExtra, e.sim.URL(), auth, e.audit,
		filepath.Join(e.dir, "spool"), e.stateDir, hostName)
	if err := os.WriteFile(e.cfgPath, []byte(cfg), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

// install runs `install.sh host` into the running libvirt's hook dir while
// holding hookLock, and uninstalls at cleanup.
func (e *env) install() {
	t := e.t
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(hookLock), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(hookLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := flockTimeout(f, 10*time.Minute); err != nil {
		f.Close()
		t.Fatalf("%s: %v", hookLock, err)
	}
	t.Cleanup(func() { f.Close() }) // releases the lock, after the uninstall below
	bin := testenv.Bin(t, "rbdfence-hook")
	out, err := installSh(filepath.Dir(bin), "host", "--config", e.cfgPath, "--domains", domainsRE())
	if err != nil {
		t.Fatalf("install.sh host: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := installSh("", "host", "--uninstall"); err != nil {
			t.Errorf("install.sh host --uninstall: %v\n%s", err, out)
		}
		if _, err := os.Stat(e.entry); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after --uninstall %s is still there (%v)", e.entry, err)
		}
	})
	e.entry = filepath.Join(e.lv.HookDir, "10-rbdfence")
	if st, err := os.Stat(e.entry); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("install.sh did not install an executable %s: %v\n%s", e.entry, err, out)
	}
}

func flockTimeout(f *os.File, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil || !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// installSh runs the repository's install.sh with RBDFENCE_BIN=binDir.
func installSh(binDir string, args ...string) (string, error) {
	return installShEnv([]string{"RBDFENCE_BIN=" + binDir}, args...)
}

func installShEnv(extraEnv []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(testenv.Root(), "install.sh")}, args...)...)
	cmd.Env = append(os.Environ(), extraEnv...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// disk is an RBD disk of image as OpenNebula writes it for QEMU.
func (e *env) disk(image string, shareable bool) libvirttest.RBDDisk {
	return libvirttest.RBDDisk{Image: image, Mon: e.ceph.Mon, User: e.ceph.User, SecretUUID: e.secret, Shareable: shareable}
}

// xml is a guest-less domain with the given disks.
func (e *env) xml(name string, disks ...libvirttest.RBDDisk) string {
	return libvirttest.DomainXML(name, e.lv.DomType, disks)
}

// tryCreate runs `virsh create` and returns virsh's error (nil: started; the
// domain is then destroyed at cleanup).
func (e *env) tryCreate(xml string) (time.Duration, error) {
	e.t.Helper()
	var d libvirtxml.Domain
	if err := d.Unmarshal(xml); err != nil {
		e.t.Fatal(err)
	}
	f := filepath.Join(e.t.TempDir(), d.Name+".xml")
	if err := os.WriteFile(f, []byte(xml), 0o600); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = libvirttest.Destroy(d.Name) })
	start := time.Now()
	_, err := libvirttest.Virsh("create", f)
	return time.Since(start), err
}

// hookResult is one direct run of the installed hook.
type hookResult struct {
	code           int
	stdout, stderr string
}

// callHook runs the installed qemu.d entry exactly as libvirtd does: argv
// <domain> <op> <subop> <extra>, the domain XML on stdin, LC_ALL=C and PATH
// only, working directory /.
func (e *env) callHook(xml string, args ...string) hookResult {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.entry, args...)
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(xml)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := hookResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		e.t.Fatalf("hook %v: %v", args, err)
	}
	if r.stdout != "" {
		e.t.Fatalf("hook %v wrote to stdout (libvirt reads it as a new domain XML): %q", args, r.stdout)
	}
	return r
}

// watchers returns the addresses of the image's watchers (`rbd status`).
func (e *env) watchers(image string) []string {
	e.t.Helper()
	out := e.ceph.Admin(e.t, "rbd", "status", "--format", "json", image)
	var st struct {
		Watchers []struct {
			Address string `json:"address"`
		} `json:"watchers"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		e.t.Fatalf("rbd status %s: %v\n%s", image, err, out)
	}
	var addrs []string
	for _, w := range st.Watchers {
		addrs = append(addrs, strings.TrimPrefix(w.Address, "v1:"))
	}
	return addrs
}

// waitWatchers waits until image has n watchers and returns them.
func (e *env) waitWatchers(image string, n int) []string {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		w := e.watchers(image)
		if len(w) == n {
			return w
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("image %s: watchers %v, want %d", image, w, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (e *env) blocklisted(addr string) bool {
	e.t.Helper()
	_, ok := e.ceph.BlocklistEntries(e.t)[addr]
	return ok
}

// auditRecords returns the hook's audit log.
func (e *env) auditRecords() []audit.Record {
	e.t.Helper()
	recs, bad, err := audit.Read(e.audit)
	if err != nil || bad != 0 {
		e.t.Fatalf("audit log %s: %v (%d bad lines)", e.audit, err, bad)
	}
	return recs
}

// engine returns an engine on a real connection as client.libvirt.
func (e *env) engine() *engine.Engine {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ceph.Connect(ctx, ceph.Config{MonHost: e.ceph.Mon, User: e.ceph.User, Keyring: e.ceph.Keyring})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return engine.New(c, engine.Options{})
}

// removeClaimAtCleanup removes VM id's claim object when the test ends.
func (e *env) removeClaimAtCleanup(id int) {
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, "rados", "-c", e.ceph.AdminConf, "-p", e.ceph.Pool, "rm", engine.ClaimObject(id)).Run()
	})
}

// zombieFenced checks that dom can no longer write: its write fails with
// error 108 (blocklisted) or it paused on an I/O error.
func zombieFenced(t *testing.T, dom string) {
	t.Helper()
	out, err := libvirttest.WritePattern(t, dom, 0, 0xcc)
	if err == nil {
		t.Fatalf("the zombie %s still writes after the start:\n%s", dom, out)
	}
	log, _ := libvirttest.DomainLog(dom)
	state, _ := libvirttest.Virsh("domstate", dom)
	if !strings.Contains(out+log, "Cannot send after transport endpoint shutdown") && !strings.Contains(out+log, "-108") &&
		!strings.Contains(state, "paused") {
		t.Fatalf("the zombie's write failed, but not because it was blocklisted (want -108):\n%s\nstate %s", out, state)
	}
}

// zombieWrites checks that dom still writes (it was not fenced).
// startWriter creates the image hooktest-TAG and the test domain dom on
// it, makes it write once and returns the domain and its Ceph client
// address.
func (e *env) startWriter(tag, dom string) (name, addr string) {
	e.t.Helper()
	image := e.ceph.NewImage(e.t, "hooktest-"+tag)
	name, _ = libvirttest.Create(e.t, e.xml(dom, e.disk(image, false)))
	zombieWrites(e.t, name, 0xaa)
	return name, e.waitWatchers(image, 1)[0]
}

func zombieWrites(t *testing.T, dom string, p byte) {
	t.Helper()
	if out, err := libvirttest.WritePattern(t, dom, 0, p); err != nil {
		t.Fatalf("%s must still write: %v\n%s", dom, err, out)
	}
}

// ourLines counts the lines of s that the hook wrote.
func ourLines(s string) int { return strings.Count(s, "rbdfence: ") }
