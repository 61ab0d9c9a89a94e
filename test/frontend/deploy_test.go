package frontend_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/events"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestDeployEndToEnd: a VM with a persistent, a clone, a volatile and a
// shareable RBD disk; on host B a zombie writes to the persistent disk,
// another one keeps the clone open, and a legitimate writer uses the
// shareable disk. The deploy wrapper, run as oned runs a local deploy on
// host A, fences both zombies (their next writes fail with -108, their
// addresses are blocklisted), leaves the shareable disk alone, records the
// events in the VM's user template, runs the remote deploy on host A with
// the right arguments and stdin, prints its DEPLOY_ID, and records the new
// instance's address in the claim.
func TestDeployEndToEnd(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	const seq = 3
	vm, specs := f.newVM(a.Name, seq, "persistent", "clone", "volatile", "shareable")
	writer := testenv.StartZombieOn(t, f.ceph, b, specs[0].image, "write")
	idle := testenv.StartZombieOn(t, f.ceph, b, specs[1].image, "idle")
	shared := testenv.StartZombieOn(t, f.ceph, b, specs[3].image, "write")
	writer.WaitWrite(t, true, 30*time.Second)
	shared.WaitWrite(t, true, 30*time.Second)

	// The "new QEMU" the remote deploy starts on host A opens the clone.
	f.write(f.path("remote-calls", "starts"), specs[1].image, 0o644)
	local, sysDir, domain := f.deployFiles(vm, seq, specs)
	stdin := base64.StdEncoding.EncodeToString([]byte(domain))

	sessions := len(f.sshCalls())
	r := f.run(f.vmm("deploy-rbdfence"), stdin, local, a.Name, fmt.Sprint(vm), a.Name)
	t.Logf("deploy-rbdfence took %s\n%s", r.took, r.stderr)
	if r.code != 0 {
		t.Fatalf("deploy-rbdfence: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// One ssh session, as the driver's own deploy: the start step, vm.xml
	// and ds.xml, the remote deploy; the record runs on the host after it.
	if calls := f.sshCalls()[sessions:]; len(calls) != 1 {
		t.Errorf("deploy-rbdfence opened %d ssh sessions, want 1:\n%s", len(calls), strings.Join(calls, "\n"))
	}
	if strings.TrimSpace(r.stdout) != deployID {
		t.Fatalf("stdout %q, want the remote deploy's DEPLOY_ID %q", r.stdout, deployID)
	}

	// The zombies are fenced.
	if ev := writer.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the writing zombie's next write: errno %d, want 108", ev.Errno)
	}
	bl := f.ceph.BlocklistEntries(t)
	for _, z := range []*testenv.Zombie{writer, idle} {
		if _, ok := bl[z.Addr]; !ok {
			t.Errorf("zombie %s not in the blocklist", z.Addr)
		}
	}
	// The shareable disk is untouched: its writer goes on, not blocklisted.
	if _, ok := bl[shared.Addr]; ok {
		t.Fatalf("the shareable disk's client %s was blocklisted", shared.Addr)
	}
	shared.WaitWrite(t, true, 30*time.Second)
	if !strings.Contains(r.stderr, "INFO: "+fmt.Sprint(vm)+" rbdfence: fenced ") {
		t.Errorf("no INFO line for the fenced clients:\n%s", r.stderr)
	}

	// The remote deploy ran once, on host A, as oned would run it.
	calls := f.calls("deploy")
	if len(calls) != 1 {
		t.Fatalf("remote deploy ran %d times", len(calls))
	}
	wantArgs := strings.Join([]string{sysDir + "/" + filepath.Base(local), a.Name, fmt.Sprint(vm), a.Name}, "\n") + "\n"
	if got := readFile(t, calls[0]+".args"); got != wantArgs {
		t.Errorf("remote deploy args %q, want %q", got, wantArgs)
	}
	if got := readFile(t, calls[0]+".stdin"); got != domain {
		t.Errorf("remote deploy stdin differs from the domain XML:\n%s", got)
	}
	if where := readFile(t, calls[0]+".where"); !strings.Contains(where, " "+a.IP+"/") {
		t.Errorf("remote deploy did not run on %s:\n%s", a, where)
	}
	// vm.xml and ds.xml went to the VM's directory on the host as XML, as
	// in a normal (remote) deploy, although the driver wrote them base64
	// next to the local deployment file.
	for _, n := range []string{"vm.xml", "ds.xml"} {
		if got, want := readFile(t, filepath.Join(sysDir, n)), vmDirXML(vm, n); got != want {
			t.Errorf("%s on the host %q, want %q", n, got, want)
		}
	}

	// Events: in the VM's user template (through oned), one per zombie.
	ut, _ := f.sim.UserTemplate(vm)
	text := ut.String()
	if !strings.Contains(text, `RBDFENCE_COLLISIONS="2"`) || strings.Count(text, "RBDFENCE_EVENT") != 2 {
		t.Fatalf("user template:\n%s", text)
	}
	for _, z := range []*testenv.Zombie{writer, idle} {
		if !strings.Contains(text, z.Addr) {
			t.Errorf("no event for %s in the user template", z.Addr)
		}
	}
	// ... and listed cluster-wide by rbdfence events (goca, infoextended).
	lr := f.run(testenv.Bin(t, "rbdfence"), "", "events", "--vm", fmt.Sprint(vm), "--json")
	var evs []events.Event
	if lr.code != 0 || json.Unmarshal([]byte(lr.stdout), &evs) != nil || len(evs) != 2 {
		t.Fatalf("rbdfence events: exit %d: %s %s", lr.code, lr.stdout, lr.stderr)
	}
	for _, ev := range evs {
		if ev.Host != a.Name || ev.Source != "prestart" || ev.Expire.IsZero() || !strings.HasPrefix(ev.Address, b.IP+":") {
			t.Errorf("event %+v", ev)
		}
	}
	// ... and in the front-end audit log.
	if got := strings.Count(readFile(t, f.path("frontend-audit.log")), "\n"); got != 2 {
		t.Errorf("front-end audit log has %d lines, want 2", got)
	}

	// The claim: this deploy on host A, with the new instance's address.
	c := f.claim(vm)
	if c.Host != a.Name || c.Seq != seq || c.State != "running" || len(c.Addrs) != 1 || !strings.HasPrefix(c.Addrs[0].String(), a.IP+":") {
		t.Fatalf("claim %+v", c)
	}
}

// TestRestoreRunsRemoteRestore: the restore wrapper runs the start check
// and then the remote restore with the same arguments and the decoded
// driver action on stdin.
func TestRestoreRunsRemoteRestore(t *testing.T) {
	f := setup(t)
	a := f.hs.A
	vm, specs := f.newVM(a.Name, 2, "persistent", "volatile")
	z := testenv.StartZombieOn(t, f.ceph, f.hs.B, specs[0].image, "write")
	z.WaitWrite(t, true, 30*time.Second)
	msg := fmt.Sprintf("<VMM_DRIVER_ACTION_DATA><HOST>%s</HOST><DEPLOY_ID>%s</DEPLOY_ID><DATASTORE><TM_MAD>ceph</TM_MAD></DATASTORE><VM><ID>%d</ID></VM></VMM_DRIVER_ACTION_DATA>", a.Name, deployID, vm)
	ckpt := fmt.Sprintf("/var/lib/one//datastores/0/%d/checkpoint", vm)
	sessions := len(f.sshCalls())
	r := f.run(f.vmm("restore-rbdfence"), base64.StdEncoding.EncodeToString([]byte(msg)), ckpt, a.Name, deployID, fmt.Sprint(vm), a.Name)
	if r.code != 0 {
		t.Fatalf("restore-rbdfence: exit %d\n%s", r.code, r.stderr)
	}
	if n := len(f.sshCalls()) - sessions; n != 1 {
		t.Errorf("restore-rbdfence opened %d ssh sessions, want 1 (the start step and the restore)", n)
	}
	if c := f.claim(vm); c.State != "running" || c.Seq != 2 || c.Host != a.Name {
		t.Errorf("claim after the restore and the host's background record: %+v", c)
	}
	if ev := z.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("zombie errno %d", ev.Errno)
	}
	calls := f.calls("restore")
	if len(calls) != 1 {
		t.Fatalf("remote restore ran %d times", len(calls))
	}
	if got, want := readFile(t, calls[0]+".args"), strings.Join([]string{ckpt, a.Name, deployID, fmt.Sprint(vm), a.Name}, "\n")+"\n"; got != want {
		t.Errorf("args %q, want %q", got, want)
	}
	if got := readFile(t, calls[0]+".stdin"); got != msg {
		t.Errorf("stdin %q, want %q", got, msg)
	}
	if where := readFile(t, calls[0]+".where"); !strings.Contains(where, " "+a.IP+"/") {
		t.Errorf("remote restore did not run on %s", a)
	}
}

// TestDeployRecordFailureVisible: the host records the new instance's
// addresses in the background after the deploy, so the deploy's result
// cannot carry a failed record. Here the claim changes under it (a newer
// deploy on another host is recorded while the remote deploy runs): the
// deploy succeeds, and the record's refusal lands in the host's audit log.
func TestDeployRecordFailureVisible(t *testing.T) {
	f := setup(t)
	a := f.hs.A
	const seq = 1
	vm, specs := f.newVM(a.Name, seq, "clone")
	thief := engine.Claim{VM: vm, Stime: onedsim.DefaultSTime, Seq: seq + 1, Host: f.hs.B.Name, Source: engine.SourceFrontend, State: engine.StateRunning, Run: "thief", Updated: time.Now().UTC()}
	b, err := json.Marshal(thief)
	if err != nil {
		t.Fatal(err)
	}
	f.write(f.path("remote-calls", "claim.steal"), string(b), 0o644)
	r := f.deployVM(vm, seq, a.Name, specs)
	if r.code != 0 || strings.TrimSpace(r.stdout) != deployID {
		t.Fatalf("deploy: exit %d stdout %q\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "in the background") {
		t.Errorf("the deploy does not say where the record runs:\n%s", r.stderr)
	}
	// f.run waited for the background record.
	var found bool
	for _, l := range strings.Split(strings.TrimSpace(readFile(t, f.path("host-audit.log"))), "\n") {
		var rec struct {
			Op, Run, Result, Error string
			VM                     int
		}
		if json.Unmarshal([]byte(l), &rec) == nil && rec.VM == vm && rec.Op == "record" && rec.Result == "error" && strings.Contains(rec.Error, "#2") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no failed record of VM %d in the host's audit log:\n%s", vm, readFile(t, f.path("host-audit.log")))
	}
	if c := f.claim(vm); c.Run != "thief" {
		t.Fatalf("the failed record changed the claim: %+v", c)
	}
}

// TestDeployFailureKeepsRemoteCodeAndText: when the remote deploy fails,
// the wrapper exits with its code and relays its error text.
func TestDeployFailureKeepsRemoteCodeAndText(t *testing.T) {
	f := setup(t)
	a := f.hs.A
	vm, specs := f.newVM(a.Name, 0, "clone")
	f.write(f.path("remote-calls", "deploy.fail"), "", 0o644)
	local, _, domain := f.deployFiles(vm, 0, specs)
	r := f.run(f.vmm("deploy-rbdfence"), base64.StdEncoding.EncodeToString([]byte(domain)), local, a.Name, fmt.Sprint(vm), a.Name)
	if r.code != 255 || !strings.Contains(r.stderr, "Could not create domain from "+f.path("datastores", "0", fmt.Sprint(vm), "deployment.0")) {
		t.Fatalf("exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q on failure", r.stdout)
	}
	if _, err := os.Stat(f.path("remote-calls")); err != nil {
		t.Fatal(err)
	}
}

// TestLocalMode: with opennebula.remote: local the front-end runs the start
// check itself (it reaches Ceph) with the same config, the audit log gets
// each record once, and the record step still runs on the host.
func TestLocalMode(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	f.extra = fmt.Sprintf("ceph:\n  mon_host: %s\n  user: %s\n  keyring: %s\n", f.ceph.Mon, f.ceph.User, f.ceph.Keyring)
	f.writeConfig()
	f.write(f.cfgPath, strings.Replace(readFile(t, f.cfgPath), "remote: ssh", "remote: local\n  local_binary: "+filepath.Join(f.remotes, "rbdfence/rbdfence-host"), 1), 0o644)
	vm, specs := f.newVM(a.Name, 0, "persistent", "clone")
	z := testenv.StartZombieOn(t, f.ceph, b, specs[0].image, "write")
	z.WaitWrite(t, true, 30*time.Second)
	f.write(f.path("remote-calls", "starts"), specs[1].image, 0o644)
	r := f.deployVM(vm, 0, a.Name, specs)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if ev := z.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("errno %d", ev.Errno)
	}
	var steps []string
	for _, c := range f.sshCalls() {
		if strings.Contains(c, "rbdfence-host") {
			steps = append(steps, c)
		}
	}
	// Over ssh: the step "versions" first (what runs on the start host: the
	// local step's hook is the front-end's), then the record step.
	if len(steps) != 2 || !strings.Contains(steps[0], " "+a.Name+" ") || !strings.Contains(steps[1], " "+a.Name+" ") {
		t.Errorf("host steps over ssh %q, want the versions and the record step on %s", steps, a.Name)
	}
	if n := strings.Count(readFile(t, f.path("frontend-audit.log")), "\n"); n != 1 {
		t.Errorf("front-end audit log has %d lines, want 1 (written once by the local step)", n)
	}
	if c := f.claim(vm); len(c.Addrs) != 1 || !strings.HasPrefix(c.Addrs[0].String(), a.IP+":") {
		t.Fatalf("claim %+v: the record step must run on %s", c, a)
	}
}
