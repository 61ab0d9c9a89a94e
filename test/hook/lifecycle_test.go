package hook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"github.com/rbdfence/rbdfence/internal/domxml"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hook"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/libvirt"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// asVM returns the live XML of the running domain src renamed to VM id's
// domain, as libvirtd hands it to the destination's hook.
func asVM(t *testing.T, src string, id int) string {
	t.Helper()
	live, err := libvirttest.Virsh("dumpxml", src)
	if err != nil {
		t.Fatal(err)
	}
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(live); err != nil {
		t.Fatal(err)
	}
	dom.Name, dom.UUID, dom.ID = oneName(id), "", nil
	xml, err := dom.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return xml
}

// frontendClaim writes VM id's claim as the front-end's prestart leaves it
// (deploy seq on host, starting), without fencing anything.
func (e *env) frontendClaim(id, seq int, host string) {
	e.t.Helper()
	who := engine.Who{VM: id, Seq: seq, Host: host, Source: engine.SourceFrontend, Run: "hooktest-fe", Pool: e.ceph.Pool}
	if err := e.engine().WriteClaim(context.Background(), who, engine.Claim{VM: id, Seq: seq, Host: host, Source: engine.SourceFrontend, State: engine.StateStarting}); err != nil {
		e.t.Fatal(err)
	}
}

// premigrate opens the handover window src -> dst for deploy seq as the
// front-end's premigrate does.
func (e *env) premigrate(id, seq int, src, dst string) *engine.Window {
	e.t.Helper()
	who := engine.Who{VM: id, Seq: seq, Host: src, Source: engine.SourceFrontend, Run: "hooktest-premigrate", Pool: e.ceph.Pool}
	res, err := e.engine().OpenWindow(context.Background(), who, src, dst, 10*time.Minute)
	if err != nil {
		e.t.Fatal(err)
	}
	return res.Claim.Window
}

// TestHookRefusesMigrationWithoutHandover (issue 11 item 1): a stale
// domain of VM id (deploy #5's) is live-migrated to this host by libvirt
// alone (an evacuation script, `virsh migrate`) while the claim holds
// deploy #9 on another host and the front-end opened no migration. The
// hook must refuse at `migrate begin`; then, once the front-end opens the
// window to this host, the same call is accepted, the prepare that follows
// fences nothing, and started records this host's instance in the window.
func TestHookRefusesMigrationWithoutHandover(t *testing.T) {
	e := newEnv(t, "")
	id := vmID(11)
	e.removeClaimAtCleanup(id)
	src, srcAddr := e.startWriter("nohandover", plainName("stale-source"))
	xml := asVM(t, src, id)
	name := oneName(id)
	mark := filepath.Join(e.stateDir, hook.MarkDir, name)

	e.frontendClaim(id, 9, "kvm-h3")
	r := e.callHook(xml, name, "migrate", "begin", "-")
	want := "rbdfence: not accepting the incoming migration of " + name + ": VM "
	if r.code == 0 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "no live migration to "+hostName) {
		t.Fatalf("migrate begin without a handover must be refused with %q: exit %d\n%s", want, r.code, r.stderr)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("a refused migration left a mark")
	}
	// A window of the current deploy to another host admits nothing here.
	e.premigrate(id, 10, "kvm-h3", "kvm-h4")
	if r := e.callHook(xml, name, "migrate", "begin", "-"); r.code == 0 {
		t.Fatalf("migrate begin with a window to another host must be refused:\n%s", r.stderr)
	}

	// The front-end migrates deploy #9 from kvm-h3 to this host.
	win := e.premigrate(id, 10, "kvm-h3", hostName)
	for _, op := range []string{"migrate begin -", "prepare begin -", "start begin -"} {
		if r := e.callHook(xml, append([]string{name}, strings.Fields(op)...)...); r.code != 0 {
			t.Fatalf("%s of the opened migration: exit %d: %s", op, r.code, r.stderr)
		}
		if e.blocklisted(srcAddr) {
			t.Fatalf("after %s: the running source was fenced", op)
		}
	}
	b, err := os.ReadFile(mark)
	if err != nil {
		t.Fatal(err)
	}
	var mk hook.Mark
	if err := json.Unmarshal(b, &mk); err != nil || !win.Same(mk.Window) {
		t.Fatalf("the mark must hold the accepted window %+v: %s (%v)", win, b, err)
	}
	if r := e.callHook(xml, name, "started", "begin", "-"); r.code != 0 {
		t.Fatalf("started: %s", r.stderr)
	}
	cl := waitClaim(t, e, id, func(c *engine.Claim) bool { return c.Window != nil && len(c.Window.DstAddrs) > 0 })
	if cl.Host != "kvm-h3" || cl.Seq != 9 || cl.Window.DstAddrs[0].String() != srcAddr {
		t.Fatalf("started must record this host's instance in the window and leave kvm-h3's deploy the claim's: %+v", cl)
	}
	zombieWrites(t, src, 0xab)
}

// withDeployTime returns xml with OpenNebula's metadata carrying
// deployment_time t, as every deployment file has it
// (src/vmm/LibVirtDriverKVM.cc:2805-2838 of release-7.4.0) and a live
// migration keeps it; t 0 removes the metadata.
func withDeployTime(t *testing.T, xml string, dt int64) string {
	t.Helper()
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(xml); err != nil {
		t.Fatal(err)
	}
	dom.Metadata = nil
	if dt != 0 {
		dom.Metadata = &libvirtxml.DomainMetadata{XML: fmt.Sprintf(`<one:vm xmlns:one="http://opennebula.org/xmlns/libvirt/1.0">`+
			`<one:name>stale-or-live</one:name><one:deployment_time>%d</one:deployment_time></one:vm>`, dt)}
	}
	out, err := dom.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if d, err := domxml.Parse([]byte(out)); err != nil || d.Instance() != dt {
		t.Fatalf("the test's domain XML does not carry deployment_time %d: %v", dt, err)
	}
	return out
}

// TestHookRefusesStaleCopyInWindow (issue 11's residual of items 1 and 2):
// VM id was recreated as deploy #2 on kvm-h3 from a deployment file
// written at liveTime; a stale domain of deploy #0 (deployment_time
// staleTime) still runs elsewhere. The front-end opens the live migration
// of deploy #2 from kvm-h3 to this host, and meanwhile somebody migrates
// the stale domain here with virsh: the hook cannot see where a migration
// comes from, only the domain XML. `migrate begin` (and a `prepare` that
// would follow) must refuse the stale copy, and a copy without the
// metadata, naming both deployment times; the genuine migration (the same
// deployment_time) is accepted and nothing is fenced.
func TestHookRefusesStaleCopyInWindow(t *testing.T) {
	const liveTime, staleTime = int64(1767225600), int64(1767139200)
	e := newEnv(t, "")
	id := vmID(14)
	e.removeClaimAtCleanup(id)
	src, srcAddr := e.startWriter("stalewindow", plainName("stalewindow-source"))
	base := asVM(t, src, id)
	name := oneName(id)
	mark := filepath.Join(e.stateDir, hook.MarkDir, name)

	// Deploy #2 on kvm-h3, its instance recorded as the front-end's start
	// (deployment file) and the hook's started (domain XML) leave it.
	who := engine.Who{VM: id, Seq: 2, Host: "kvm-h3", Source: engine.SourceFrontend, Run: "hooktest-fe", Pool: e.ceph.Pool}
	if err := e.engine().WriteClaim(context.Background(), who, engine.Claim{VM: id, Seq: 2, Host: "kvm-h3", Source: engine.SourceFrontend,
		State: engine.StateRunning, Instance: liveTime}); err != nil {
		t.Fatal(err)
	}
	win := e.premigrate(id, 3, "kvm-h3", hostName)
	if win.Instance != liveTime {
		t.Fatalf("premigrate's window must hand over the claim's instance %d: %+v", liveTime, win)
	}

	for _, tc := range []struct {
		what string
		xml  string
		want []string
	}{
		{"the stale copy of deploy #0", withDeployTime(t, base, staleTime),
			[]string{fmt.Sprint(staleTime), fmt.Sprint(liveTime), "stale copy"}},
		{"a copy without OpenNebula metadata", withDeployTime(t, base, 0),
			[]string{"no <one:deployment_time>", fmt.Sprint(liveTime)}},
	} {
		r := e.callHook(tc.xml, name, "migrate", "begin", "-")
		if r.code == 0 || !strings.Contains(r.stderr, "not accepting the incoming migration of "+name) {
			t.Fatalf("migrate begin of %s into the open window must be refused: exit %d\n%s", tc.what, r.code, r.stderr)
		}
		for _, s := range tc.want {
			if !strings.Contains(r.stderr, s) {
				t.Errorf("the refusal of %s does not say %q:\n%s", tc.what, s, r.stderr)
			}
		}
		if _, err := os.Stat(mark); err == nil {
			t.Fatalf("the refused migration of %s left a mark", tc.what)
		}
		// Had libvirt gone on anyway: its prepare is a start on a host the
		// deploy is not claimed for.
		if r := e.callHook(tc.xml, name, "prepare", "begin", "-"); r.code == 0 {
			t.Fatalf("prepare of %s must be refused:\n%s", tc.what, r.stderr)
		}
		if e.blocklisted(srcAddr) {
			t.Fatalf("refusing %s fenced the running source", tc.what)
		}
	}

	// The front-end's own migration of deploy #2: the same domain XML.
	genuine := withDeployTime(t, base, liveTime)
	for _, op := range []string{"migrate begin -", "prepare begin -", "started begin -"} {
		if r := e.callHook(genuine, append([]string{name}, strings.Fields(op)...)...); r.code != 0 {
			t.Fatalf("%s of the genuine migration: exit %d: %s", op, r.code, r.stderr)
		}
		if e.blocklisted(srcAddr) {
			t.Fatalf("after %s: the running source was fenced", op)
		}
	}
	cl := waitClaim(t, e, id, func(c *engine.Claim) bool { return c.Window != nil && len(c.Window.DstAddrs) > 0 })
	if cl.Host != "kvm-h3" || cl.Seq != 2 || cl.Instance != liveTime || cl.Window.Instance != liveTime {
		t.Fatalf("started must record this host's instance in the window of deploy #2's instance: %+v", cl)
	}
	zombieWrites(t, src, 0xab)
}

// TestHookStaleMarkFences (issue 11 item 3): an incoming migration is
// accepted (its mark written), then aborted without a `release end`
// (libvirtd died); failmigrate closes the window. The front-end then admits
// deploy #12 on this host. The old mark must not skip the fence of that
// start: the zombie writing to the image is fenced.
func TestHookStaleMarkFences(t *testing.T) {
	e := newEnv(t, "")
	id := vmID(12)
	e.removeClaimAtCleanup(id)
	zombie, zaddr := e.startWriter("stalemark", plainName("stalemark-zombie"))
	xml := asVM(t, zombie, id)
	name := oneName(id)

	e.frontendClaim(id, 10, "kvm-src")
	e.premigrate(id, 11, "kvm-src", hostName)
	if r := e.callHook(xml, name, "migrate", "begin", "-"); r.code != 0 {
		t.Fatalf("migrate begin: %s", r.stderr)
	}
	// failmigrate: the window is closed; the claim stays on kvm-src (the
	// source's libvirt said one-N runs there with no job, as the front-end
	// relays it).
	who := engine.Who{VM: id, Seq: 11, Host: hostName, Source: engine.SourceFrontend, Run: "hooktest-failmigrate", Pool: e.ceph.Pool,
		Domain: engine.Domain{Seen: engine.DomainActive, Said: "running", Job: engine.JobNone, JobSaid: "Job type: None"}}
	if _, err := e.engine().CloseWindow(context.Background(), who, nil, "kvm-src", hostName, nil, engine.Failed); err != nil {
		t.Fatal(err)
	}
	// The front-end admits deploy #12 here (its own fence found nothing
	// to do then); libvirt starts the domain: prepare with the old mark.
	e.frontendClaim(id, 12, hostName)
	r := e.callHook(xml, name, "prepare", "begin", "-")
	if r.code != 0 {
		t.Fatalf("prepare of deploy #12: exit %d: %s", r.code, r.stderr)
	}
	if !e.blocklisted(zaddr) {
		t.Fatalf("the stale mark skipped the fence: zombie %s is not blocklisted", zaddr)
	}
	zombieFenced(t, zombie)
}

// TestHostStepRefusesRunningDomain (issue 11 item 4): VM id runs on this
// host (domain one-<id>, deploy #3). `onevm resume` of the VM in UNKNOWN,
// or `onevm recover --retry` of that deploy, makes the front-end run the
// start step for the same deploy on the same host. Fencing first would
// make the running VM I/O-dead before the deploy fails with "domain
// already exists": the step must refuse without fencing.
func TestHostStepRefusesRunningDomain(t *testing.T) {
	e := newEnv(t, "")
	id := vmID(13)
	live, addr, req := e.runningVM(t, id, "hooktest-running")
	resp, code := e.hostStep(req, libvirttest.URI())
	if code == 0 {
		t.Fatalf("the start step for a running domain must fail: %+v", resp)
	}
	if resp.OK || resp.Kind != outcome.Refused || !strings.Contains(resp.Error, oneName(id)+" is already running on host "+hostName) {
		t.Fatalf("want a refusal naming the running domain, exit %d: %+v", code, resp)
	}
	if e.blocklisted(addr) {
		t.Fatal("the running VM was fenced")
	}
	zombieWrites(t, live, 0xab)
}

// runningVM starts VM id's domain on this host (deploy #3 claimed here,
// its instance writing and recorded by the hook's started) and returns the
// domain, its client's address and the request of the front-end's start
// step for that deploy on this host (a resume of the VM in UNKNOWN).
func (e *env) runningVM(t *testing.T, id int, tag string) (dom, addr string, start hoststep.Request) {
	t.Helper()
	e.removeClaimAtCleanup(id)
	image := e.ceph.NewImage(t, tag)
	e.frontendClaim(id, 3, hostName)
	dom, _ = libvirttest.Create(t, e.xml(oneName(id), e.disk(image, false)))
	zombieWrites(t, dom, 0xaa)
	addr = e.waitWatchers(image, 1)[0]
	waitClaim(t, e, id, func(c *engine.Claim) bool { return c.State == engine.StateRunning && len(c.Addrs) == 1 })
	pool, img, _ := strings.Cut(image, "/")
	return dom, addr, hoststep.Request{Version: hoststep.Version, Op: hoststep.OpStart, VM: id, Seq: 3, Host: hostName, Run: "hooktest-resume",
		Source: engine.SourceFrontend, Disks: []vmdisk.Disk{{ID: "0", Pool: pool, Name: img}}}
}

// hostStep runs the host step `rbdfence host` with req on stdin and
// libvirt at uri, as the front-end's ssh does, and returns its response and
// exit code.
func (e *env) hostStep(req hoststep.Request, uri string) (hoststep.Response, int) {
	e.t.Helper()
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Bin(e.t, "rbdfence"), "host", "--config", e.cfgPath)
	cmd.Env = append(os.Environ(), "LIBVIRT_DEFAULT_URI="+uri)
	cmd.Stdin = bytes.NewReader(body)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		e.t.Fatalf("host step: %v\n%s", err, errb.String())
	}
	var resp hoststep.Response
	if jerr := json.Unmarshal(out.Bytes(), &resp); jerr != nil {
		e.t.Fatalf("host step output (exit %d): %v\n%s\n%s", code, jerr, out.String(), errb.String())
	}
	return resp, code
}

// silentLibvirt returns a libvirt URI whose daemon accepts connections and
// never answers (libvirtd hung), closed at cleanup.
func silentLibvirt(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "hung-libvirt.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "qemu+unix:///system?socket=" + sock
}

// TestHostStepRefusesWhenLibvirtSilent (issue 18 item 1): VM id runs on
// this host, deploy #3 recorded in its claim. libvirtd stops answering
// (down for a package upgrade, restarting, or hung) while QEMU goes on;
// oned's probes fail, the host goes ERROR and the VM UNKNOWN, and `onevm
// resume` deploys the same HISTORY on the same host: the front-end's start
// step. Without libvirt's answer the recorded instance may be the running
// VM: the step must refuse in the "unavailable" class, fence nothing, and
// say it cannot tell. The same with opennebula.remote: local, where the
// step runs on the front-end and cannot ask the host's libvirt.
func TestHostStepRefusesWhenLibvirtSilent(t *testing.T) {
	e := newEnv(t, "")
	id := vmID(16)
	live, addr, req := e.runningVM(t, id, "hooktest-silent")
	local := req
	local.Local = true
	for _, tc := range []struct {
		name string
		req  hoststep.Request
		uri  string
		said string
	}{
		{"libvirtd down", req, "qemu+unix:///system?socket=" + filepath.Join(t.TempDir(), "no-libvirtd.sock"), "libvirt did not answer"},
		{"libvirtd hung", req, silentLibvirt(t), "no answer within"},
		{"opennebula.remote: local", local, libvirttest.URI(), "opennebula.remote is local"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, code := e.hostStep(tc.req, tc.uri)
			want := "cannot tell whether " + oneName(id) + " still runs on " + hostName + ": libvirt "
			if resp.OK || code != outcome.Unavailable.Code() || resp.Kind != outcome.Unavailable || !strings.Contains(resp.Error, want) || !strings.Contains(resp.Error, tc.said) {
				t.Fatalf("want exit %d (%s) saying %q ... %q, got exit %d: %+v", outcome.Unavailable.Code(), outcome.Unavailable, want, tc.said, code, resp)
			}
			if e.blocklisted(addr) || (resp.Report != nil && resp.Report.Fenced > 0) {
				t.Fatalf("the running VM was fenced: %+v", resp.Report)
			}
		})
	}
	zombieWrites(t, live, 0xab)
}

// TestPremigrateLearnsInstance: VM id runs on this host from a deployment
// file written at deployTime. The hook's `started` records that identity
// in the claim. A claim written by an older rbdfence has none: the
// front-end's premigrate step, run on this host (the source), reads it
// from libvirt (`virsh dumpxml`), so the window is bound to the running
// instance anyway and a stale copy is refused at the destination.
func TestPremigrateLearnsInstance(t *testing.T) {
	const deployTime = int64(1767225600)
	e := newEnv(t, "")
	id := vmID(15)
	e.removeClaimAtCleanup(id)
	image := e.ceph.NewImage(t, "hooktest-learn")
	e.frontendClaim(id, 3, hostName)
	live, _ := libvirttest.Create(t, withDeployTime(t, e.xml(oneName(id), e.disk(image, false)), deployTime))
	zombieWrites(t, live, 0xaa)
	cl := waitClaim(t, e, id, func(c *engine.Claim) bool { return c.State == engine.StateRunning && len(c.Addrs) == 1 })
	if cl.Instance != deployTime {
		t.Fatalf("the hook's started must record the domain's deployment_time %d: %+v", deployTime, cl)
	}
	// As an older rbdfence leaves the claim: no identity.
	old := *cl
	old.Instance = 0
	who := engine.Who{VM: id, Seq: 3, Host: hostName, Source: engine.SourceFrontend, Run: "hooktest-old", Pool: e.ceph.Pool}
	if err := e.engine().WriteClaim(context.Background(), who, old); err != nil {
		t.Fatal(err)
	}

	pool, img, _ := strings.Cut(image, "/")
	req := hoststep.Request{Version: hoststep.Version, Op: hoststep.OpPremigrate, VM: id, Seq: 4, Host: hostName, Src: hostName, Dst: "kvm-dst",
		Run: "hooktest-premigrate", Source: engine.SourceFrontend, Disks: []vmdisk.Disk{{ID: "0", Pool: pool, Name: img}}}
	body, _ := json.Marshal(req)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Bin(t, "rbdfence"), "host", "--config", e.cfgPath)
	cmd.Env = append(os.Environ(), "LIBVIRT_DEFAULT_URI="+libvirttest.URI())
	cmd.Stdin = bytes.NewReader(body)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("premigrate step: %v\n%s\n%s", err, out.String(), errb.String())
	}
	var resp hoststep.Response
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil || !resp.OK || resp.Claim == nil || resp.Claim.Window == nil {
		t.Fatalf("premigrate step output: %v\n%s", err, out.String())
	}
	if resp.Claim.Window.Instance != deployTime || resp.Claim.Instance != deployTime {
		t.Fatalf("premigrate must bind the window to the running domain's deployment_time %d: %+v", deployTime, resp.Claim)
	}
	zombieWrites(t, live, 0xab)
}

// sleeperBoot is a boot sector that suspends the guest to RAM once (ACPI
// S3: SLP_TYP 1 | SLP_EN written to PIIX4's PM1 control register at its
// PMBASE, read from PCI 00:01.3 register 0x40) and halts after the wake-up
// (a byte of CMOS RAM, which survives the reset of an S3 resume, says it
// slept already): a guest that suspends itself, as `systemctl suspend` in a
// VM does, which libvirt reports as pmsuspended.
var sleeperBoot = func() []byte {
	code := []byte{
		0xFA,       // cli
		0xB0, 0x50, // mov al, 0x50
		0xE6, 0x70, // out 0x70, al
		0xE4, 0x71, // in al, 0x71
		0x3C, 0xA5, // cmp al, 0xa5
		0x74, 0x24, // je hang
		0xB0, 0x50, // mov al, 0x50
		0xE6, 0x70, // out 0x70, al
		0xB0, 0xA5, // mov al, 0xa5
		0xE6, 0x71, // out 0x71, al: slept once
		0x66, 0xB8, 0x40, 0x0B, 0x00, 0x80, // mov eax, 0x80000b40 (PCI 0:1.3 reg 0x40)
		0xBA, 0xF8, 0x0C, // mov dx, 0xcf8
		0x66, 0xEF, // out dx, eax
		0xBA, 0xFC, 0x0C, // mov dx, 0xcfc
		0x66, 0xED, // in eax, dx
		0x25, 0xC0, 0xFF, // and ax, 0xffc0 (PMBASE)
		0x05, 0x04, 0x00, // add ax, 4 (PM1 control)
		0x89, 0xC2, // mov dx, ax
		0xB8, 0x00, 0x24, // mov ax, SLP_EN | SLP_TYP 1
		0xEF,       // out dx, ax: S3
		0xF4,       // hang: hlt
		0xEB, 0xFD, // jmp hang
	}
	b := make([]byte, 1<<20)
	copy(b, code)
	b[510], b[511] = 0x55, 0xAA
	return b
}()

// sleeperDomain is the domain one-<id> on image with ACPI and S3 on, booting
// image, whose first sector is sleeperBoot.
func (e *env) sleeperDomain(t *testing.T, id int, image string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "sleeper.img")
	if err := os.WriteFile(f, sleeperBoot, 0o644); err != nil {
		t.Fatal(err)
	}
	e.ceph.Admin(t, "rbd", "rm", "--no-progress", image)
	e.ceph.Admin(t, "rbd", "import", "--no-progress", f, image)
	var dom libvirtxml.Domain
	if err := dom.Unmarshal(e.xml(oneName(id), e.disk(image, false))); err != nil {
		t.Fatal(err)
	}
	dom.Features = &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}}
	dom.PM = &libvirtxml.DomainPM{SuspendToMem: &libvirtxml.DomainPMPolicy{Enabled: "yes"}}
	dom.OS.BootDevices = []libvirtxml.DomainBootDevice{{Dev: "hd"}}
	xml, err := dom.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return xml
}

// waitState waits until libvirt reports dom in state want.
func waitState(t *testing.T, dom, want string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, err := libvirttest.Virsh("domstate", dom)
		if err == nil && strings.TrimSpace(out) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not become %s: %q %v", dom, want, out, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestHostStepWakesSleepingGuest (issue 18 item 10): the guest of VM id
// suspended itself to RAM (libvirt pmsuspended; oned shows SUSPENDED). `onevm
// resume` runs the restore action, whose start step on the host must admit
// the wake-up (OpenNebula's restore then only runs `virsh dompmwakeup`:
// release-7.4.0 src/vmm_mad/remotes/kvm/restore:61-71) and fence nothing;
// the guest runs on, its disk writable. A deploy of the same VM there is
// still refused: the domain runs.
func TestHostStepWakesSleepingGuest(t *testing.T) {
	e := newEnv(t, "")
	id := vmID(17)
	e.removeClaimAtCleanup(id)
	image := e.ceph.NewImage(t, "hooktest-sleeper")
	e.frontendClaim(id, 3, hostName)
	live, _ := libvirttest.Create(t, e.sleeperDomain(t, id, image))
	waitState(t, live, "pmsuspended")
	addr := e.waitWatchers(image, 1)[0]
	waitClaim(t, e, id, func(c *engine.Claim) bool { return c.State == engine.StateRunning && len(c.Addrs) == 1 })

	pool, img, _ := strings.Cut(image, "/")
	req := hoststep.Request{Version: hoststep.Version, Op: hoststep.OpStart, VM: id, Seq: 3, Host: hostName, Run: "hooktest-deploy", Source: engine.SourceFrontend,
		Disks: []vmdisk.Disk{{ID: "0", Pool: pool, Name: img}}}
	resp, code := e.hostStep(req, libvirttest.URI())
	if code != outcome.Refused.Code() || !strings.Contains(resp.Error, "is already pmsuspended on host "+hostName) {
		t.Fatalf("a deploy of the sleeping VM must be refused as running: exit %d %+v", code, resp)
	}
	req.Restore, req.Run = true, "hooktest-restore"
	resp, code = e.hostStep(req, libvirttest.URI())
	if code != 0 || !resp.OK || (resp.Report != nil && resp.Report.Fenced > 0) || len(resp.Audit) > 0 {
		t.Fatalf("the restore of the sleeping guest must be admitted and fence nothing: exit %d %+v", code, resp)
	}
	if e.blocklisted(addr) {
		t.Fatal("the sleeping VM was fenced")
	}
	if _, err := libvirttest.Virsh("dompmwakeup", live); err != nil {
		t.Fatal(err)
	}
	waitState(t, live, "running")
	zombieWrites(t, live, 0xab)
	if cl := waitClaim(t, e, id, func(c *engine.Claim) bool { return true }); cl.Seq != 3 || cl.Host != hostName || len(cl.Addrs) != 1 || cl.Addrs[0].String() != addr {
		t.Fatalf("the wake-up must leave the claim as it was: %+v", cl)
	}
}
