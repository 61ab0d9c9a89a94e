// Package frontend_test runs the OpenNebula front-end drivers through their
// real contracts: installed by packaging/install-frontend.sh into a prefix
// tree, run as oned runs them (argv, base64 stdin, exit code), talking to
// the oned stand-in only through goca, reaching two test hosts (network
// namespaces with their own addresses) over a real sshd, where the real
// host binary works on the real Ceph test cluster. Zombies are real librbd
// clients on those hosts. Nothing here skips.
package frontend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

const (
	oneAuth  = "oneadmin:opennebula"
	deployID = "0b5a7d1e-6c1f-4f0e-9c3e-5e1f2a3b4c5d"
)

// fe is one front-end under test: an installed prefix tree, its config, the
// oned stand-in, the test hosts and the Ceph cluster they reach.
type fe struct {
	t       *testing.T
	hs      *testenv.Hosts
	ceph    *testenv.Ceph
	sim     *onedsim.Sim
	dir     string // scratch: configs, logs, recordings
	prefix  string // the installed front-end tree
	remotes string // prefix/var/lib/one/remotes
	cfgPath string
	extra   string // extra YAML appended to the front-end config
	// timeouts.ssh, .total and .action of the front-end config ("": 60s,
	// 90s and the default)
	sshTimeout, totalTimeout, action string
	// sshPersist is opennebula.ssh_persist: "0s" unless a test sets it, so
	// that a test's ssh fault (a host's sshd stopped, its route cut) meets
	// a new connection, not a master a step before it opened.
	sshPersist string
	// env is added to every driver's environment.
	env []string
}

var vmSeq struct {
	sync.Mutex
	next int
}

// newVMID returns a VM id no earlier run used (claims live in the pool).
func newVMID() int {
	vmSeq.Lock()
	defer vmSeq.Unlock()
	if vmSeq.next == 0 {
		vmSeq.next = 100000 + rand.IntN(800000)*10
	}
	vmSeq.next++
	return vmSeq.next
}

// setup brings up the hosts, the cluster on their bridge and an oned
// stand-in, and installs the front-end into a fresh prefix tree.
func setup(t *testing.T) *fe {
	t.Helper()
	f := &fe{t: t, hs: testenv.StartHosts(t), dir: t.TempDir()}
	f.ceph = testenv.StartCephNet(t)
	f.sim = onedsim.New(oneAuth)
	if err := f.sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.sim.Close() })
	f.install()
	f.hostStandIns()
	f.writeConfig()
	return f
}

func (f *fe) path(elem ...string) string { return filepath.Join(append([]string{f.dir}, elem...)...) }

func (f *fe) write(p, body string, mode os.FileMode) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), mode); err != nil {
		f.t.Fatal(err)
	}
}

// upstreamTM is a stand-in for an original Ceph TM script: it records how
// it was called, finds itself through $0 as OpenNebula's scripts do, and
// exits with the code in its .code file (default 0).
func upstreamTM(dir, op string) string {
	return fmt.Sprintf(`#!/bin/bash
DRIVER_PATH=$(dirname $0)
n=$(date +%%s%%N)
mkdir -p %[1]s
echo "$0" > %[1]s/%[2]s-$n.argv0
echo "${DRIVER_PATH##*/}/${0##*/}" > %[1]s/%[2]s-$n.self
printf '%%s\n' "$@" > %[1]s/%[2]s-$n.args
cat > %[1]s/%[2]s-$n.stdin
echo "upstream %[2]s done"
exit $(cat %[1]s/%[2]s.code 2>/dev/null || echo 0)
`, dir, op)
}

// install makes a front-end tree with the Ceph TM's scripts (stand-ins)
// and a stock oned.conf, then runs install.sh frontend --apply into it.
func (f *fe) install() {
	f.t.Helper()
	f.prefix = f.path("root")
	f.remotes = filepath.Join(f.prefix, "var/lib/one/remotes")
	for _, op := range []string{"premigrate", "postmigrate", "failmigrate"} {
		f.write(filepath.Join(f.remotes, "tm/ceph", op), upstreamTM(f.path("tm-calls"), op), 0o755)
	}
	if err := os.MkdirAll(filepath.Join(f.remotes, "vmm/kvm"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	f.write(filepath.Join(f.prefix, "etc/one/oned.conf"), onedConf(`"-t 15 -r 0 kvm -p"`), 0o640)
	r := runInstall(f.t, f.prefix, "--apply")
	if r.code != 0 {
		f.t.Fatalf("install.sh frontend --apply: exit %d\n%s", r.code, r.stderr)
	}
}

// hostStandIns writes the remote deploy/restore stand-ins, found on the
// hosts under opennebula.remote_dir (hosts share the file system). deploy
// records its args, stdin and the addresses of the host it ran on, starts
// a librbd client as the "new QEMU" on each image listed in STARTS (if any;
// in the mode named in STARTS.mode, default idle; qemu.images maps each
// image to the client's output file), and prints its DEPLOY_ID as the real
// one does.
func (f *fe) hostStandIns() {
	f.t.Helper()
	rec := f.path("remote-calls")
	zombie := testenv.Bin(f.t, "zombie")
	f.write(f.path("hostremotes/vmm/kvm/deploy"), fmt.Sprintf(`#!/bin/bash
n=$(date +%%s%%N)
mkdir -p %[1]s
printf '%%s\n' "$@" > %[1]s/deploy-$n.args
cat > %[1]s/deploy-$n.stdin
ip -4 -o addr show > %[1]s/deploy-$n.where
if [ -s %[1]s/starts ]; then
	mode=$(cat %[1]s/starts.mode 2>/dev/null || echo idle)
	k=0
	for img in $(cat %[1]s/starts); do
		k=$((k+1))
		setsid %[2]s --mon %[3]s --id %[4]s --keyring %[5]s --image "$img" --mode "$mode" </dev/null >%[1]s/qemu-$n-$k.out 2>&1 &
		echo $! >> %[1]s/qemu.pids
		echo "$img %[1]s/qemu-$n-$k.out" >> %[1]s/qemu.images
		for i in $(seq 300); do grep -qs '"ready"' %[1]s/qemu-$n-$k.out && break; sleep 0.1; done
	done
fi
if [ -f %[1]s/claim.steal ]; then rados -c %[7]s --id %[4]s --keyring %[5]s -p one put %[8]s$3 %[1]s/claim.steal; fi
if [ -f %[1]s/deploy.fail ]; then echo "ERROR MESSAGE --8<------" >&2; echo "Could not create domain from $1" >&2; echo "ERROR MESSAGE ------>8--" >&2; exit 255; fi
echo %[6]s
`, rec, zombie, f.ceph.Mon, f.ceph.User, f.ceph.Keyring, deployID, f.ceph.Conf, strings.TrimSuffix(engine.ClaimObject(0), "0")), 0o755)
	f.write(f.path("hostremotes/vmm/kvm/restore"), fmt.Sprintf(`#!/bin/bash
n=$(date +%%s%%N)
mkdir -p %[1]s
printf '%%s\n' "$@" > %[1]s/restore-$n.args
cat > %[1]s/restore-$n.stdin
ip -4 -o addr show > %[1]s/restore-$n.where
`, rec), 0o755)
	// The real vmm/kvm/migrate runs on the source with the driver action
	// XML on stdin (src/vmm_mad/remotes/kvm/migrate:281-286 of
	// release-7.4.0). The stand-in records its call, reads the VM's claim
	// as it is during the migration, and fails when migrate.fail exists.
	f.write(f.path("hostremotes/vmm/kvm/migrate"), fmt.Sprintf(`#!/bin/bash
n=$(date +%%s%%N)
mkdir -p %[1]s
printf '%%s\n' "$@" > %[1]s/migrate-$n.args
cat > %[1]s/migrate-$n.stdin
ip -4 -o addr show > %[1]s/migrate-$n.where
rados -c %[2]s --id %[3]s --keyring %[4]s -p one get %[5]s$4 %[1]s/migrate-$n.claim 2>%[1]s/migrate-$n.err
if [ -f %[1]s/migrate.sleep ]; then sleep "$(cat %[1]s/migrate.sleep)"; fi
if [ -f %[1]s/migrate.fail ]; then echo "Could not migrate $1 to $2" >&2; exit 1; fi
exit 0
`, rec, f.ceph.Conf, f.ceph.User, f.ceph.Keyring, strings.TrimSuffix(engine.ClaimObject(0), "0")), 0o755)
	f.t.Cleanup(func() {
		b, _ := os.ReadFile(filepath.Join(rec, "qemu.pids"))
		for _, p := range strings.Fields(string(b)) {
			_ = exec.Command("kill", p).Run()
		}
	})
	// ssh as the drivers run it, with every call logged.
	// One line per session (a remote script's newlines become spaces).
	f.write(f.path("ssh"), fmt.Sprintf("#!/bin/sh\n{ printf '%%s' \"$*\" | tr '\\n' ' '; echo; } >> %s\nexec ssh -F %s \"$@\"\n", f.path("ssh.log"), f.hs.SSHConfig), 0o755)
	f.write(f.path("one_auth"), oneAuth+"\n", 0o600)
}

// writeConfig writes the front-end config (and the host config the host
// binary reads on the hosts); f.extra is appended to the front-end one.
func (f *fe) writeConfig() {
	f.t.Helper()
	f.write(f.path("host.yaml"), f.ceph.HostConfig(f.path("")), 0o644)
	f.cfgPath = f.path("rbdfence.yaml")
	action := ""
	if f.action != "" {
		action = "  action: " + f.action + "\n"
	}
	f.write(f.cfgPath, fmt.Sprintf(`opennebula:
  endpoint: %s
  auth_file: %s
  remote: ssh
  ssh: %s
  ssh_persist: %s
  host_binary: %s
  host_package_binary: ""
  host_config: %s
  remote_dir: %s
timeouts:
  connect: 5s
  ceph_op: 10s
  oned: 3s
  ssh: %s
  total: %s
%saudit_log: %s
spool_dir: %s
state_dir: %s
%s`, f.sim.URL(), f.path("one_auth"), f.path("ssh"), or(f.sshPersist, "0s"), filepath.Join(f.remotes, "rbdfence/rbdfence-host"), f.path("host.yaml"),
		f.path("hostremotes"), or(f.sshTimeout, "60s"), or(f.totalTimeout, "90s"), action, f.path("frontend-audit.log"), f.path("spool"), f.path("state"), f.extra), 0o644)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// result is one driver run.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// plainLines returns the stderr lines oned would show as the VM's ERROR.
func (r result) plainLines() []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if l != "" && !strings.HasPrefix(l, "INFO:") && !strings.HasPrefix(l, "ERROR:") && !strings.HasPrefix(l, "DEBUG:") {
			out = append(out, l)
		}
	}
	return out
}

// run runs an installed driver as oned does: argv, stdin, RBDFENCE_CONFIG.
func (f *fe) run(prog string, stdin string, args ...string) result {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(append(os.Environ(), "RBDFENCE_CONFIG="+f.cfgPath), f.env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		f.t.Fatalf("%s %v: %v", prog, args, err)
	}
	if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
		f.t.Fatalf("%s %v panicked:\n%s", prog, args, r.stderr)
	}
	if b := filepath.Base(prog); b == "deploy-rbdfence" || b == "restore-rbdfence" {
		f.waitDetached()
	}
	return r
}

// waitDetached waits until no record that a host runs in the background
// after a deploy or restore (rbdfence host --detached, started by the
// session's script with a host config in this test's directory) is still
// running: the shell forks it before the session ends, so it is seen if it
// runs.
func (f *fe) waitDetached() {
	f.t.Helper()
	f.waitGone("the host's background record", []byte("--detached"), 2*time.Minute)
}

// waitGone waits until no process whose command line holds both needle and
// this test's directory runs (the test hosts share the machine's
// processes), failing the test after within.
func (f *fe) waitGone(what string, needle []byte, within time.Duration) {
	f.t.Helper()
	mark := []byte(f.dir + "/")
	deadline := time.Now().Add(within)
	for {
		busy := false
		m, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range m {
			b, err := os.ReadFile(p)
			if err == nil && bytes.Contains(b, needle) && bytes.Contains(b, mark) {
				busy = true
				break
			}
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s still runs after %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *fe) vmm(name string) string { return filepath.Join(f.remotes, "vmm/kvm", name) }

// diskSpec is one DISK of a test VM and the image it opens.
type diskSpec struct {
	kind  string // persistent, clone, volatile, shareable
	image string // pool/name QEMU opens
	disk  onedsim.Disk
}

// newVM creates the images of a VM with the given disk kinds in the test
// pool and registers the VM in oned (placed on host at seq).
func (f *fe) newVM(host string, seq int, kinds ...string) (int, []diskSpec) {
	f.t.Helper()
	vm := newVMID()
	var specs []diskSpec
	for i, k := range kinds {
		d := onedsim.Disk{ID: i, ImageID: vm*10 + i, CephHost: f.ceph.Mon, CephKey: f.keyFile()}
		var img string
		switch k {
		case "persistent":
			d.Persistent = true
			img = fmt.Sprintf("one/one-%d", d.ImageID)
		case "clone":
			img = fmt.Sprintf("one/one-%d-%d-%d", d.ImageID, vm, i)
		case "volatile":
			d.Volatile = true
			img = fmt.Sprintf("one/one-sys-%d-%d", vm, i)
		case "shareable":
			d.Shareable = true
			img = fmt.Sprintf("one/one-%d", d.ImageID)
		default:
			f.t.Fatalf("disk kind %q", k)
		}
		f.createImage(img)
		specs = append(specs, diskSpec{kind: k, image: img, disk: d})
	}
	var disks []onedsim.Disk
	for _, s := range specs {
		disks = append(disks, s.disk)
	}
	if err := f.sim.Put(onedsim.VM{ID: vm, Host: host, HostID: 1, Seq: seq, State: onedsim.StateActive, LCMState: onedsim.LCMBoot, Disks: disks}); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, "rados", "-c", f.ceph.AdminConf, "-p", "one", "rm", engine.ClaimObject(vm)).Run()
	})
	return vm, specs
}

// keyFile returns a bare key file for the test user, as OpenNebula's
// CEPH_KEY is: the output of `ceph auth get-key`, passed to `rbd --keyfile`
// by every Ceph script (src/tm_mad/ceph/clone:109,
// src/datastore_mad/remotes/ceph/cp:101 of release-7.4.0). Not a keyring.
func (f *fe) keyFile() string {
	f.t.Helper()
	p := f.path("ceph.client." + f.ceph.User + ".key")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	key := strings.TrimSpace(f.ceph.Admin(f.t, "ceph", "auth", "get-key", "client."+f.ceph.User))
	if key == "" || strings.ContainsAny(key, "[ \t\n") {
		f.t.Fatalf("ceph auth get-key printed %q", key)
	}
	f.write(p, key+"\n", 0o600)
	return p
}

func (f *fe) createImage(spec string) {
	f.t.Helper()
	f.ceph.Admin(f.t, "rbd", "create", spec, "--size", "64M")
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, "rbd", "-c", f.ceph.AdminConf, "rm", "--no-progress", spec).Run()
	})
}

// domainXML is a deployment file as OpenNebula's KVM driver writes it.
func domainXML(vm int, sysDir string, specs []diskSpec, mon string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>\n\t<name>one-%d</name>\n\t<vcpu>1</vcpu>\n\t<memory>1048576</memory>\n\t<devices>\n", vm)
	host, port, _ := strings.Cut(mon, ":")
	for i, s := range specs {
		fmt.Fprintf(&b, "\t\t<disk type='network' device='disk'>\n\t\t\t<source protocol='rbd' name='%s'>\n\t\t\t\t<host name='%s' port='%s'/>\n\t\t\t</source>\n", s.image, host, port)
		b.WriteString("\t\t\t<auth username='libvirt'>\n\t\t\t\t<secret type='ceph' uuid='8271ce8a-385d-44d7-a228-c42de4259c5e'/>\n\t\t\t</auth>\n")
		fmt.Fprintf(&b, "\t\t\t<target dev='vd%c' bus='virtio'/>\n", 'a'+i)
		if s.kind == "shareable" {
			b.WriteString("\t\t\t<shareable/>\n")
		}
		b.WriteString("\t\t</disk>\n")
	}
	fmt.Fprintf(&b, "\t</devices>\n\t<metadata>\n\t\t<one:vm xmlns:one=\"http://opennebula.org/xmlns/libvirt/1.0\">\n\t\t\t<one:system_datastore><![CDATA[%s]]></one:system_datastore>\n\t\t\t<one:name><![CDATA[vm-%d]]></one:name>\n\t\t</one:vm>\n\t</metadata>\n</domain>\n", sysDir, vm)
	return b.String()
}

// deployFiles writes the local deployment file (and vm.xml, ds.xml next to
// it, base64 as the real driver writes them for a local deploy action:
// onedsim.WriteLocalDeployFiles) and returns its path and the domain XML.
func (f *fe) deployFiles(vm, seq int, specs []diskSpec) (local, sysDir, domain string) {
	f.t.Helper()
	sysDir = f.path("datastores", "0", fmt.Sprint(vm))
	domain = domainXML(vm, sysDir, specs, f.ceph.Mon)
	local = filepath.Join(f.prefix, "var/lib/one/vms", fmt.Sprint(vm), fmt.Sprintf("deployment.%d", seq))
	f.write(local, domain, 0o644)
	if err := onedsim.WriteLocalDeployFiles(filepath.Dir(local), vmDirXML(vm, "vm.xml"), vmDirXML(vm, "ds.xml")); err != nil {
		f.t.Fatal(err)
	}
	return local, sysDir, domain
}

// vmDirXML is the VM or DATASTORE element the driver message carries.
func vmDirXML(vm int, name string) string {
	if name == "ds.xml" {
		return "<DATASTORE><ID>0</ID><TEMPLATE><TM_MAD><![CDATA[ceph]]></TM_MAD></TEMPLATE></DATASTORE>"
	}
	return fmt.Sprintf("<VM><ID>%d</ID><TEMPLATE><TPM><MODEL>tpm-crb</MODEL></TPM></TEMPLATE></VM>", vm)
}

// calls returns the recordings of a remote stand-in ("deploy", "restore"),
// oldest first, as base name without extension.
func (f *fe) calls(kind string) []string {
	m, _ := filepath.Glob(filepath.Join(f.path("remote-calls"), kind+"-*.args"))
	for i := range m {
		m[i] = strings.TrimSuffix(m[i], ".args")
	}
	return m
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// claim reads VM vm's claim object as the admin.
func (f *fe) claim(vm int) engine.Claim {
	f.t.Helper()
	out := f.ceph.Admin(f.t, "rados", "-p", "one", "get", engine.ClaimObject(vm), "/dev/stdout")
	var c engine.Claim
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		f.t.Fatalf("claim of VM %d: %v: %q", vm, err, out)
	}
	return c
}

// sshCalls counts the ssh invocations the drivers made.
func (f *fe) sshCalls() []string {
	b, _ := os.ReadFile(f.path("ssh.log"))
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// runInstall runs install.sh frontend with the built binaries.
func runInstall(t *testing.T, prefix string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(testenv.Root(), "install.sh"), "frontend", "--prefix", prefix}, args...)...)
	cmd.Env = append(os.Environ(), "RBDFENCE_BIN="+filepath.Dir(testenv.Bin(t, "rbdfence")))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// onedConf is a stock oned.conf excerpt with the kvm VM_MAD ARGUMENTS args,
// the "qemu" VM_MAD that runs the same kvm driver
// (share/etc/oned.conf:488-498 of release-7.4.0) and lxc.
func onedConf(args string) string {
	return `# oned.conf (excerpt)
DATASTORE_LOCATION = /var/lib/one/datastores

#VM_MAD = [
#    NAME           = "kvm",
#    ARGUMENTS      = "-t 15 -r 0 kvm",
#]

VM_MAD = [
    NAME           = "kvm",
    SUNSTONE_NAME  = "KVM",
    EXECUTABLE     = "one_vmm_exec",
    ARGUMENTS      = ` + args + `,
    DEFAULT        = "vmm_exec/vmm_exec_kvm.conf",
    TYPE           = "kvm",
    KEEP_SNAPSHOTS = "yes"
]

# This variant should be used for nested virtualization
VM_MAD = [
    NAME           = "qemu",
    SUNSTONE_NAME  = "QEMU",
    EXECUTABLE     = "one_vmm_exec",
    ARGUMENTS      = "-t 15 -r 0 kvm",
    DEFAULT        = "vmm_exec/vmm_exec_kvm.conf",
    TYPE           = "qemu"
]

VM_MAD = [
    NAME           = "lxc",
    EXECUTABLE     = "one_vmm_exec",
    ARGUMENTS      = "-t 15 -r 0 lxc -l deploy=deploy_lxc",
    TYPE           = "xml"
]
`
}
