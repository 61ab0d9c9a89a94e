package hostcompat_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// The commit whose hook the skew test runs: the last one before the hook
// reported a claim format (issue 18 item 6).
const oldRev = "0300e58"

var oldBuild struct {
	once sync.Once
	dir  string
	err  error
}

// buildOld builds pkg from oldRev's tree (git archive of this checkout:
// the real old binary, not a replay of its answer), once per process.
func buildOld(t *testing.T, name string) string {
	t.Helper()
	oldBuild.once.Do(func() {
		if err := os.MkdirAll(testenv.TestRoot(), 0o755); err != nil {
			oldBuild.err = err
			return
		}
		dir, err := os.MkdirTemp(testenv.TestRoot(), "old-"+oldRev+"-")
		if err != nil {
			oldBuild.err = err
			return
		}
		src := filepath.Join(dir, "src")
		os.MkdirAll(src, 0o755)
		arch := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "archive", testenv.Root(), oldRev, src)
		if out, err := arch.CombinedOutput(); err != nil {
			oldBuild.err = fmt.Errorf("git archive %s (this test needs the repository's history, not a shallow clone): %v\n%s", oldRev, err, out)
			return
		}
		b := exec.Command("go", "build", "-tags", "pacific", "-ldflags", "-X main.version="+oldRev, "-o", dir+"/", "./hooks/rbdfence-hook", "./cmd/rbdfence")
		b.Dir = src
		if out, err := b.CombinedOutput(); err != nil {
			oldBuild.err = fmt.Errorf("building %s's binaries: %v\n%s", oldRev, err, out)
			return
		}
		oldBuild.dir = dir
	})
	if oldBuild.err != nil {
		t.Fatal(oldBuild.err)
	}
	return filepath.Join(oldBuild.dir, name)
}

func newVMID() int { return 300000 + rand.IntN(600000)*10 + rand.IntN(10) }

// cephRig is a rig whose ns hosts reach the default test cluster.
type cephRig struct {
	*rig
	ceph    *testenv.Ceph
	hostCfg string
	cfg     string // the front-end config
}

func newCephRig(t *testing.T, extra string) *cephRig {
	t.Helper()
	r := &cephRig{rig: newRig(t), ceph: testenv.StartCeph(t)}
	r.hostCfg = r.write("host.yaml", r.ceph.HostConfig(r.path("")), 0o644)
	r.cfg = r.frontendConfig("rbdfence.yaml", "  host_config: "+r.hostCfg+"\n  host_package_binary: \"\"\n", extra)
	// The remote actions the local actions run on the host (remote_dir).
	r.write("hostremotes/vmm/kvm/deploy", "#!/bin/sh\ncat > /dev/null\necho \"$@\" >> "+r.path("deploy-ran")+"\necho 5cf0a9e1-0000-4000-8000-000000000042\n", 0o755)
	r.write("hostremotes/vmm/kvm/migrate", "#!/bin/sh\ncat > /dev/null\necho \"$@\" >> "+r.path("migrate-ran")+"\n", 0o755)
	return r
}

// newVM registers VM on host with one persistent RBD disk (a fresh image).
func (r *cephRig) newVM(h host) (int, onedsim.VM, string) {
	r.t.Helper()
	vm := newVMID()
	img := fmt.Sprintf("one/one-%d", vm)
	r.ceph.Admin(r.t, "rbd", "create", img, "--size", "16M")
	r.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = exec.CommandContext(ctx, "rbd", "-c", r.ceph.AdminConf, "rm", "--no-progress", img).Run()
		_ = exec.CommandContext(ctx, "rados", "-c", r.ceph.AdminConf, "-p", "one", "rm", engine.ClaimObject(vm)).Run()
	})
	v := onedsim.VM{ID: vm, Host: h.name, HostID: 1, Seq: 0, State: onedsim.StateActive, LCMState: onedsim.LCMBoot,
		Disks: []onedsim.Disk{{ID: 0, ImageID: vm, Persistent: true, CephHost: r.ceph.Mon}}}
	if err := r.sim.Put(v); err != nil {
		r.t.Fatal(err)
	}
	return vm, v, img
}

// waitDetached waits until the host's background record after a deploy
// (rbdfence host --detached with this rig's host config) has ended.
func (r *cephRig) waitDetached() {
	r.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		busy := false
		m, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range m {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), "--detached") && strings.Contains(string(b), r.hostCfg) {
				busy = true
				break
			}
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatal("the host's background record still runs after 2 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *cephRig) ran(name string) string {
	b, _ := os.ReadFile(r.path(name))
	return string(b)
}

// TestStartBesideOldHook (issue 18 item 6): an old hook (0300e58's, built
// from that commit) beside this build's host step: a start there is
// refused before anything is fenced, exit 3, one line with the fix, also
// with fence.fail_open; a live migration to that host is not started; the
// same start on a host with this build's hook goes on.
func TestStartBesideOldHook(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail_open=%v", failOpen), func(t *testing.T) {
			r := newCephRig(t, fmt.Sprintf("fence:\n  fail_open: %v\n", failOpen))
			oldHook := buildOld(t, "rbdfence-hook")
			old := r.nsHost("rbdf-oldhook", oldHook)
			cur := r.nsHost("rbdf-newhook", testenv.Bin(t, "rbdfence-hook"))

			// What 0300e58's hook says of itself, as the host step asks it.
			if out, code := r.ssh(old, "/etc/libvirt/hooks/rbdfence-hook --version"); code != 0 || strings.TrimSpace(out) != "rbdfence-hook "+oldRev {
				t.Fatalf("the old hook's --version: exit %d %q", code, out)
			}

			vm, v, _ := r.newVM(old)
			args, stdin := deployment(r.rig, vm, old, fmt.Sprintf("one/one-%d", vm), r.ceph.Mon)
			res := runBin(t, r.cfg, testenv.Bin(t, "deploy-rbdfence"), stdin, args...)
			want := fmt.Sprintf("rbdfence: refused, nothing fenced: rbdf-oldhook's rbdfence is too old; upgrade, onehost sync | start: host rbdf-oldhook's libvirt hook /etc/libvirt/hooks/rbdfence-hook (%s) reads claim format 1, older than claim format %d; "+
				"fix: run this release's 'install.sh host' on rbdf-oldhook (its hook is /etc/libvirt/hooks/rbdfence-hook), and run 'onehost sync --force' as oneadmin on the front-end",
				oldRev, engine.ClaimFormat)
			if p := res.plain(); res.code != 3 || len(p) != 1 || p[0] != want {
				t.Fatalf("exit %d, plain lines %q\nwant exactly %q\nstderr:\n%s", res.code, p, want, res.stderr)
			}
			if r.ran("deploy-ran") != "" {
				t.Fatal("the remote deploy ran beside the old hook")
			}
			if b, _ := os.ReadFile(r.path("host-audit.log")); len(b) > 0 {
				t.Fatalf("the refused start did something on the host:\n%s", b)
			}

			// A live migration to that host: not started.
			v.Host, v.LCMState = cur.name, onedsim.LCMMigrate
			if err := r.sim.Put(v); err != nil {
				t.Fatal(err)
			}
			action := fmt.Sprintf("<VMM_DRIVER_ACTION_DATA><HOST>%s</HOST><MIGR_HOST>%s</MIGR_HOST><DEPLOY_ID>one-%d</DEPLOY_ID>%s</VMM_DRIVER_ACTION_DATA>", cur.name, old.name, vm, v.XML())
			res = runBin(t, r.cfg, testenv.Bin(t, "migrate-rbdfence"), b64(action), fmt.Sprintf("one-%d", vm), old.name, cur.name, fmt.Sprint(vm), cur.name)
			want = fmt.Sprintf("rbdfence: refused, nothing fenced: rbdf-oldhook's rbdfence is too old; upgrade, onehost sync | migration: host rbdf-oldhook's libvirt hook /etc/libvirt/hooks/rbdfence-hook (%s) reads claim format 1", oldRev)
			if p := res.plain(); res.code != 3 || len(p) != 1 || !strings.HasPrefix(p[0], want) || !strings.HasSuffix(p[0], "; the migration was not started, the VM keeps running on rbdf-newhook") {
				t.Fatalf("migration: exit %d, plain lines %q\nwant %q...\nstderr:\n%s", res.code, p, want, res.stderr)
			}
			if r.ran("migrate-ran") != "" {
				t.Fatal("the migration ran to the host with the old hook")
			}

			// The control: this build's hook beside the same host step.
			v.Host, v.LCMState = cur.name, onedsim.LCMBoot
			if err := r.sim.Put(v); err != nil {
				t.Fatal(err)
			}
			args, stdin = deployment(r.rig, vm, cur, fmt.Sprintf("one/one-%d", vm), r.ceph.Mon)
			res = runBin(t, r.cfg, testenv.Bin(t, "deploy-rbdfence"), stdin, args...)
			r.waitDetached()
			if res.code != 0 || strings.TrimSpace(res.stdout) != "5cf0a9e1-0000-4000-8000-000000000042" || r.ran("deploy-ran") == "" {
				t.Fatalf("beside this build's hook: exit %d stdout %q\nstderr:\n%s", res.code, res.stdout, res.stderr)
			}
		})
	}
}

// TestPackageBinaryPreferred (issue 20 item 1): where the host has the
// rbdfence package's binary (opennebula.host_package_binary), the host
// step is that one, built for the host; the synced one is the fallback.
// Here the synced binary cannot start on the host (another architecture):
// a start goes on through the package's, and fails with the one line once
// the package's is gone.
func TestPackageBinaryPreferred(t *testing.T) {
	r := newCephRig(t, "")
	h := r.nsHost("rbdf-pkg", testenv.Bin(t, "rbdfence-hook"))
	elf := append([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"), make([]byte, 200)...)
	if err := os.WriteFile(h.at(syncedBinary), elf, 0o755); err != nil {
		t.Fatal(err)
	}
	pkg := r.path("pkg/usr/bin/rbdfence")
	copyFile(t, testenv.Bin(t, "rbdfence"), pkg)
	cfg := r.frontendConfig("rbdfence-pkg.yaml", "  host_config: "+r.hostCfg+"\n  host_package_binary: "+pkg+"\n", "")
	vm, _, _ := r.newVM(h)
	args, stdin := deployment(r.rig, vm, h, fmt.Sprintf("one/one-%d", vm), r.ceph.Mon)
	res := runBin(t, cfg, testenv.Bin(t, "deploy-rbdfence"), stdin, args...)
	r.waitDetached()
	if res.code != 0 || r.ran("deploy-ran") == "" {
		t.Fatalf("with the package's binary: exit %d\n%s", res.code, res.stderr)
	}
	d := runBin(t, cfg, testenv.Bin(t, "rbdfence"), "", "doctor", "--role", "frontend", "--root", r.path("no-frontend-files"))
	if !regexp.MustCompile(`PASS  host rbdf-pkg +host step ` + regexp.QuoteMeta(pkg) + ` `).MatchString(d.stdout) {
		t.Fatalf("doctor does not name the package's binary as the host step:\n%s", d.stdout)
	}
	os.Remove(pkg)
	res = runBin(t, cfg, testenv.Bin(t, "deploy-rbdfence"), stdin, args...)
	want := fmt.Sprintf("rbdfence: refused, nothing fenced: rbdfence cannot start on rbdf-pkg; fix in the VM log | host rbdf-pkg cannot start rbdfence's host binary %s (exec format error: built for another architecture)", syncedBinary)
	if p := res.plain(); res.code != 3 || len(p) != 1 || !strings.HasPrefix(p[0], want) {
		t.Fatalf("without the package's binary: exit %d %q\nwant %q...", res.code, p, want)
	}
}
