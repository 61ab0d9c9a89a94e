// Package hostfence_test runs rbdfence fence-host through its real contract
// on this process's own test cluster (no shared host namespaces): installed
// by install.sh frontend into a prefix tree and run as OpenNebula's HA hook
// runs ft/fence_host.sh (the host's XML, base64, on stdin), against the oned
// stand-in through goca. The failed host's "QEMU" clients are real librbd
// writers bound to 127.0.0.2 (host A), recorded in the VM's claim by the
// real host step; another host's client is bound to 127.0.0.3.
package hostfence_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

const (
	auth  = "oneadmin:hostfence"
	hostA = "hostA"
	ipA   = "127.0.0.2"
	ipB   = "127.0.0.3"
)

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, env []string, stdin, prog string, args ...string) result {
	t.Helper()
	r := testenv.Run(t, 2*time.Minute, env, stdin, prog, args...)
	return result{code: r.Code, stdout: r.Stdout, stderr: r.Stderr}
}

func write(t *testing.T, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestFenceHostOnOwnCluster: refused while host A is healthy or still
// reports; once A is in ERROR and silent, the installed fence_host.sh fed as
// host_error.rb feeds it blocklists A's recorded writers (errno 108) and
// nothing of host B; the claim says fenced; events, host summary, audit,
// metrics; the reschedule's start on B is admitted and fences A's recorded
// instances again; doctor shows A's live fence; unfence --host removes it.
func TestFenceHostOnOwnCluster(t *testing.T) {
	g := newRig(t)
	c, rbd, dir, sim, env, fenceHost, prefix := g.c, g.rbd, g.dir, g.sim, g.env, g.fenceHost, g.prefix
	feCfg, aCfg := g.feCfg, g.hostCfg("a", ipA)
	// The steps below run "on host A" as local steps: the claims record
	// A's clients but not A's own address. fence-host knows A by the
	// address its operator set once in A's template (issue 18 item 11);
	// recorded client addresses never identify a host (item 3).
	g.putHost(onedsim.Host{ID: 1, Name: hostA, State: onedsim.HostMonitored, LastMonitored: time.Now()}, ipA)

	// VM 'vm' with two disks, deployed on host A: the start step, QEMU's
	// clients (writers on A), the record step.
	vm := 800000 + rand.IntN(90000)*10
	imgs := []string{c.NewImage(t, "hf0"), c.NewImage(t, "hf1")}
	var disks []vmdisk.Disk
	var odisks []onedsim.Disk
	for i, im := range imgs {
		pool, name, _ := strings.Cut(im, "/")
		disks = append(disks, vmdisk.Disk{ID: fmt.Sprint(i), Pool: pool, Name: name, Monitors: []string{c.Mon}})
		odisks = append(odisks, onedsim.Disk{ID: i, Source: im, Persistent: true, CephHost: c.Mon, CephKey: c.Keyring})
	}
	step := func(cfg string, op string, seq int, host string) hoststep.Response {
		t.Helper()
		return g.step(cfg, hoststep.Request{Op: op, VM: vm, Seq: seq, Host: host, Disks: disks})
	}
	step(aCfg, hoststep.OpStart, 3, hostA)
	var writers []*testenv.Zombie
	for _, im := range imgs {
		writers = append(writers, testenv.StartZombie(t, c, im, "write", "--bind", ipA))
	}
	step(aCfg, hoststep.OpRecord, 3, hostA)
	cl := claim(t, c, vm)
	if cl.Host != hostA || len(cl.Addrs) != 2 {
		t.Fatalf("claim after the deploy on A: %+v", cl)
	}
	// A client of the same image on host B (not the VM's): never touched by
	// the host fence.
	onB := testenv.StartZombie(t, c, imgs[0], "idle", "--bind", ipB)
	for _, w := range writers {
		w.WaitWrite(t, true, 30*time.Second)
	}
	if err := sim.Put(onedsim.VM{ID: vm, Host: hostA, HostID: 1, Seq: 3, Disks: odisks}); err != nil {
		t.Fatal(err)
	}

	hookStdin := func() string { return g.hookStdin(1) }
	refused := func(says string) {
		t.Helper()
		r := run(t, env, hookStdin(), fenceHost)
		if r.code != 4 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, says) {
			t.Fatalf("fence-host: exit %d, want 4 and one line saying %q:\n%s", r.code, says, r.stderr)
		}
		bl := c.BlocklistEntries(t)
		for _, w := range writers {
			if _, ok := bl[w.Addr]; ok {
				t.Fatalf("a refused fence-host blocklisted %s", w.Addr)
			}
		}
	}
	refused("its state is MONITORED")
	sim.PutHost(onedsim.Host{ID: 1, Name: hostA, State: onedsim.HostError, LastMonitored: time.Now().Add(-30 * time.Second)})
	refused("still reports to oned")
	for _, w := range writers {
		w.WaitWrite(t, true, 30*time.Second)
	}

	// Host A fails: ERROR, silent. Its writers go on (cut off from oned only).
	sim.PutHost(onedsim.Host{ID: 1, Name: hostA, State: onedsim.HostError, LastMonitored: time.Now().Add(-10 * time.Minute)})
	r := run(t, env, hookStdin(), fenceHost)
	if r.code != 0 {
		t.Fatalf("fence-host: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	bl := c.BlocklistEntries(t)
	for _, w := range writers {
		if _, ok := bl[w.Addr]; !ok {
			t.Errorf("writer %s not blocklisted", w.Addr)
		}
		if ev := w.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
			t.Errorf("writer %s: errno %d, want 108", w.Addr, ev.Errno)
		}
	}
	if _, ok := bl[onB.Addr]; ok {
		t.Fatalf("host B's client %s was blocklisted", onB.Addr)
	}
	cl = claim(t, c, vm)
	if cl.State != engine.StateFenced || cl.Host != hostA || cl.Seq != 3 || len(cl.Addrs) != 2 {
		t.Fatalf("claim after fence-host: %+v", cl)
	}
	ut, _ := sim.UserTemplate(vm)
	if strings.Count(ut.String(), `ACTION="host-fenced"`) != 1 || !strings.Contains(ut.String(), writers[0].Addr) || !strings.Contains(ut.String(), writers[1].Addr) {
		t.Errorf("VM event:\n%s", ut.String())
	}
	ht, _ := sim.HostTemplate(1)
	if !strings.Contains(ht.String(), `CLIENTS="2"`) || !strings.Contains(ht.String(), `RESULT="complete"`) {
		t.Errorf("host summary:\n%s", ht.String())
	}
	if a, _ := os.ReadFile(filepath.Join(dir, "fe-audit.log")); strings.Count(string(a), `"op":"fence-host"`) != 2 {
		t.Errorf("audit log:\n%s", a)
	}
	if m, _ := os.ReadFile(filepath.Join(dir, "metrics.prom")); !strings.Contains(string(m), `rbdfence_fences_total{op="fence-host"} 2`) {
		t.Errorf("metrics:\n%s", m)
	}

	// The reschedule: deploy 4 on host B. Admitted; A's recorded
	// instances are blocklisted again (they stay fenced).
	onB.Stop()
	resp := step(feCfg, hoststep.OpStart, 4, "hostB")
	if resp.Claim == nil || resp.Claim.Host != "hostB" || resp.Claim.Seq != 4 {
		t.Fatalf("reschedule start: %+v", resp.Claim)
	}
	again := map[string]bool{}
	for _, rc := range resp.Report.Recorded {
		again[rc.Address] = rc.Fenced()
	}
	for _, w := range writers {
		if !again[w.Addr] {
			t.Errorf("the reschedule did not fence A's recorded instance %s again: %+v", w.Addr, resp.Report.Recorded)
		}
	}

	// A is repaired: doctor shows the live fence; unfence --host removes it.
	d := run(t, env, "", rbd, "doctor", "--role", "frontend", "--root", prefix)
	if !strings.Contains(d.stdout, "host-fences") || !strings.Contains(d.stdout, hostA+" (2 entries") {
		t.Errorf("doctor:\n%s", d.stdout)
	}
	u := run(t, env, "", rbd, "unfence", "--host", hostA, "--yes", "--id", c.RMUser, "--keyring", c.RMUserKeyring)
	if u.code != 0 || strings.Count(u.stdout, "unfenced ") != 2 {
		t.Fatalf("unfence --host: exit %d\n%s%s", u.code, u.stdout, u.stderr)
	}
	bl = c.BlocklistEntries(t)
	for _, w := range writers {
		if _, ok := bl[w.Addr]; ok {
			t.Errorf("%s still blocklisted", w.Addr)
		}
	}
}

func claim(t *testing.T, c *testenv.Ceph, vm int) engine.Claim {
	t.Helper()
	out := c.Admin(t, "rados", "-p", c.Pool, "get", engine.ClaimObject(vm), "/dev/stdout")
	var cl engine.Claim
	if err := json.Unmarshal([]byte(out), &cl); err != nil {
		t.Fatalf("claim of VM %d: %v: %q", vm, err, out)
	}
	return cl
}
