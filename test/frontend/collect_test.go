package frontend_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// hangHost is a host in oned's pool that never answers over ssh.
const hangHost = "rbdf-hang"

// collecting prepares the front-end for collection tests: hosts A and B
// (and hangHost) in oned's pool, each real host with its own host config
// and spool (the test hosts share one file system, a real host has its
// own: the ssh wrapper hands each host host-<name>.yaml), none with oned
// credentials. It returns the spool directory of each host.
func (f *fe) collecting() map[string]string {
	f.t.Helper()
	base := readFile(f.t, f.path("host.yaml"))
	if strings.Contains(base, "auth_file") {
		f.t.Fatal("the host config must hold no oned credentials")
	}
	spools := map[string]string{}
	for _, h := range []string{f.hs.A.Name, f.hs.B.Name} {
		spools[h] = f.path("host-spool-" + h)
		f.write(f.path("host-"+h+".yaml"), strings.Replace(base, f.path("host-spool"), spools[h], 1), 0o644)
	}
	// The drivers' ssh, with every call logged; the last two words are the
	// host and the remote command.
	f.write(f.path("ssh"), fmt.Sprintf(`#!/bin/bash
printf '%%s\n' "$*" >> %s
n=$#
host=${@:n-1:1}
cmd=${@:n:1}
[ "$host" = %s ] && exec sleep 600
exec ssh -F %s "${@:1:n-1}" "${cmd//host.yaml/host-$host.yaml}"
`, f.path("ssh.log"), hangHost, f.hs.SSHConfig), 0o755)
	now := time.Now()
	f.sim.PutHost(onedsim.Host{ID: 1, Name: f.hs.A.Name, State: onedsim.HostMonitored, LastMonitored: now})
	f.sim.PutHost(onedsim.Host{ID: 2, Name: f.hs.B.Name, State: onedsim.HostMonitored, LastMonitored: now})
	f.sim.PutHost(onedsim.Host{ID: 3, Name: hangHost, State: onedsim.HostOffline})
	return spools
}

// flush runs `rbdfence events flush` on the front-end with extra
// environment (a failpoint) and flags.
func (f *fe) flush(env []string, args ...string) result {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Bin(f.t, "rbdfence"), append([]string{"events", "flush", "--oned-conf", filepath.Join(f.prefix, "etc/one/oned.conf")}, args...)...)
	cmd.Env = append(append(os.Environ(), "RBDFENCE_CONFIG="+f.cfgPath), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		f.t.Fatal(err)
	}
	if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
		f.t.Fatalf("events flush panicked:\n%s", r.stderr)
	}
	return r
}

func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// eventCount counts the RBDFENCE_EVENT attributes of vm with a field equal
// to needle (an address, an id) and returns RBDFENCE_COLLISIONS.
func (f *fe) eventCount(vm int, needle string) (n int, collisions string) {
	f.t.Helper()
	ut, ok := f.sim.UserTemplate(vm)
	if !ok {
		f.t.Fatalf("VM %d not in oned", vm)
	}
	for _, a := range ut {
		if !opennebula.IsEventAttr(a.Name) {
			continue
		}
		for _, v := range a.Vector {
			if v == needle {
				n++
				break
			}
		}
	}
	collisions, _ = ut.Single("RBDFENCE_COLLISIONS")
	return n, collisions
}

// TestHostEventsCollected: a fence on host A, which holds no oned
// credentials (as the hook's own start, not driven by the front-end),
// leaves its event in A's spool; `rbdfence events flush` on the front-end
// collects it over ssh and delivers it to the VM's user template exactly
// once: a crash between delivery and the ack re-delivers it and oned keeps
// it once; a second flush delivers nothing new; a host that never answers
// is reported within the bound while A is collected.
func TestHostEventsCollected(t *testing.T) {
	f := setup(t)
	spools := f.collecting()
	a, b := f.hs.A, f.hs.B
	vm, specs := f.newVM(a.Name, 0, "persistent")
	z := testenv.StartZombieOn(t, f.ceph, b, specs[0].image, "write")
	z.WaitWrite(t, true, 30*time.Second)

	// The host-side fence, as the hook runs it on A (no front-end involved).
	pool, name, _ := strings.Cut(specs[0].image, "/")
	req, _ := json.Marshal(hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 0, Host: a.Name, Run: fmt.Sprintf("hook-%d", vm), Source: "hook",
		Disks: []vmdisk.Disk{{ID: "0", Pool: pool, Name: name}}})
	out, errOut, code := f.hs.SSH(t, a, string(req), filepath.Join(f.remotes, "rbdfence/rbdfence-host"), "host", "--config", f.path("host-"+a.Name+".yaml"))
	if code != 0 || !strings.Contains(out, `"ok":true`) {
		t.Fatalf("host step on %s: exit %d\n%s%s", a.Name, code, out, errOut)
	}
	if ev := z.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("zombie on %s: errno %d, want 108 (fenced)", b.Name, ev.Errno)
	}
	if n := len(spoolFiles(t, spools[a.Name])); n != 1 {
		t.Fatalf("%d events in %s's spool, want 1", n, a.Name)
	}
	if n, _ := f.eventCount(vm, z.Addr); n != 0 {
		t.Fatal("the host delivered its event itself: it has no credentials")
	}

	// The front-end dies between delivering and acknowledging.
	r := f.flush([]string{"RBDFENCE_FAILPOINT=collect-before-ack"}, "--host", a.Name)
	if r.code != -1 {
		t.Fatalf("flush with the failpoint: exit %d, want death by SIGKILL\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n, c := f.eventCount(vm, z.Addr); n != 1 || c != "1" {
		t.Fatalf("after the delivery: %d events for %s, RBDFENCE_COLLISIONS %q; want 1, 1", n, z.Addr, c)
	}
	if n := len(spoolFiles(t, spools[a.Name])); n != 1 {
		t.Fatalf("%d events in %s's spool after the crash, want the unacknowledged 1", n, a.Name)
	}

	// The next flush re-delivers it (oned keeps it once) and acknowledges;
	// the host that never answers is reported within the bound, one line,
	// and makes the exit non-zero; A's event is delivered all the same.
	f.sim.PutHost(onedsim.Host{ID: 3, Name: hangHost, State: onedsim.HostMonitored, LastMonitored: time.Now()})
	start := time.Now()
	r = f.flush(nil, "--host-timeout", "5s")
	took := time.Since(start)
	if r.code == 0 {
		t.Fatalf("flush with a host that never answers: exit 0\n%s%s", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "host "+a.Name+": delivered 1 event(s), 1 removed from its spool") ||
		!strings.Contains(r.stdout, "host "+b.Name+": delivered 0 event(s)") ||
		!strings.Contains(r.stdout, "host "+hangHost+": FAILED: delivered 0 event(s): spool list did not answer within 5s") ||
		!strings.Contains(r.stderr, "1 of 3 host(s) not collected: "+hangHost) {
		t.Fatalf("flush with a host that never answers: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if took > 60*time.Second {
		t.Fatalf("flush took %s with a 5s host bound", took)
	}
	t.Logf("flush with a host that never answers (--host-timeout 5s): %s", took.Round(time.Millisecond))
	if n, c := f.eventCount(vm, z.Addr); n != 1 || c != "1" {
		t.Fatalf("after the re-delivery: %d events for %s, RBDFENCE_COLLISIONS %q; want 1, 1", n, z.Addr, c)
	}
	if n := len(spoolFiles(t, spools[a.Name])); n != 0 {
		t.Fatalf("%d events left in %s's spool", n, a.Name)
	}

	// OFFLINE hosts are not visited; a second flush delivers nothing new.
	f.sim.PutHost(onedsim.Host{ID: 3, Name: hangHost, State: onedsim.HostOffline})
	start = time.Now()
	r = f.flush(nil)
	t.Logf("flush of 2 hosts with empty spools: %s", time.Since(start).Round(time.Millisecond))
	if r.code != 0 || !strings.Contains(r.stdout, "host "+a.Name+": delivered 0 event(s)") || strings.Contains(r.stdout, hangHost) {
		t.Fatalf("second flush: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if n, c := f.eventCount(vm, z.Addr); n != 1 || c != "1" {
		t.Fatalf("after the second flush: %d events, RBDFENCE_COLLISIONS %q", n, c)
	}
}

// TestHostEventsCollectedWhileSpooling: events spooled on both hosts while
// collections run (each round's spooling overlaps one flush) are all
// delivered, each once.
func TestHostEventsCollectedWhileSpooling(t *testing.T) {
	f := setup(t)
	spools := f.collecting()
	hosts := []string{f.hs.A.Name, f.hs.B.Name}
	var vms []int
	for i := 0; i < 4; i++ {
		vm, _ := f.newVM(f.hs.A.Name, 0)
		vms = append(vms, vm)
	}
	// rounds x hosts events per VM, below the 10 a template keeps: each
	// one stays visible, and RBDFENCE_COLLISIONS counts new ids only.
	const rounds = 4
	sps := map[string]*events.Spool{}
	for _, h := range hosts {
		sp, err := events.OpenSpool(spools[h])
		if err != nil {
			t.Fatal(err)
		}
		sps[h] = sp
	}
	id := func(h string, vm, i int) string { return fmt.Sprintf("c-%s-%d-%d", h, vm, i) }
	for i := 0; i < rounds; i++ {
		var wg sync.WaitGroup
		for _, h := range hosts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for _, vm := range vms {
					ev := events.Event{ID: id(h, vm, i), Time: time.Now(), VM: vm, Host: h, Image: "one/x",
						Client: "client.1", Address: fmt.Sprintf("10.0.0.%d:0/%d", i, vm), Action: "blocklist", Source: "hook/start"}
					if err := sps[h].Put(ev); err != nil {
						t.Error(err)
						return
					}
					time.Sleep(30 * time.Millisecond)
				}
			}()
		}
		r := f.flush(nil)
		wg.Wait()
		if r.code != 0 {
			t.Fatalf("flush while spooling: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	}
	if r := f.flush(nil); r.code != 0 {
		t.Fatalf("final flush: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, h := range hosts {
		if left := spoolFiles(t, spools[h]); len(left) != 0 {
			t.Fatalf("%s's spool still holds %v", h, left)
		}
	}
	for _, vm := range vms {
		for _, h := range hosts {
			for i := 0; i < rounds; i++ {
				if n, _ := f.eventCount(vm, id(h, vm, i)); n != 1 {
					t.Errorf("VM %d: event %s recorded %d times, want once", vm, id(h, vm, i), n)
				}
			}
		}
		if _, c := f.eventCount(vm, ""); c != fmt.Sprint(rounds*len(hosts)) {
			t.Errorf("VM %d: RBDFENCE_COLLISIONS %q, want %d", vm, c, rounds*len(hosts))
		}
	}
}
