package oned

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestDeployFencesZombie (lifecycle row "deploy"): a librbd client on the
// other host writes the persistent image a VM is about to use. `onevm deploy`
// through the real oned runs deploy-rbdfence: the zombie is blocklisted (its
// next write fails with errno 108), the VM runs and writes its disk, and
// `onevm show` displays the collision event in the USER TEMPLATE.
func TestDeployFencesZombie(t *testing.T) {
	t.Parallel()
	testDeployFencesZombie(t, Start(t, "fe74"))
}

func testDeployFencesZombie(t *testing.T, s *Stack) {
	a, b := s.Hosts[0], s.Hosts[1]
	img := s.NewImage(t, "zombie-deploy", true)
	z := testenv.StartZombieOn(t, s.Ceph, b.Net(), img.Source, "write")
	z.WaitWrite(t, true, 30*time.Second)
	vm := s.NewVM(t, VMTemplate("zombie-deploy", img))
	s.Deploy(t, vm, a)
	ev := s.ZombieFenced(t, vm, z, a, img.Source, 0xb1, "the deploy")
	if !strings.Contains(ev.Action, "blocklisted") {
		t.Fatalf("collision event %+v: want action blocklisted", ev)
	}
	if show := s.ShowText(t, vm); !strings.Contains(show, "RBDFENCE_EVENT_") || !strings.Contains(show, z.Addr) {
		t.Fatalf("onevm show %d does not display the collision event of %s:\n%s", vm, z.Addr, show)
	}
}

// TestAttachFencesZombie (row "hot-attach"): `onevm disk-attach` of a
// persistent image that a client on the other host still writes: the
// attach_disk local action fences it before the disk reaches the VM, and
// the guest's QEMU opens the attached disk.
func TestAttachFencesZombie(t *testing.T) {
	t.Parallel()
	testAttachFencesZombie(t, Start(t, "fe74"))
}

func testAttachFencesZombie(t *testing.T, s *Stack) {
	a, b := s.Hosts[0], s.Hosts[1]
	root := s.NewImage(t, "attach-root", false)
	vm := s.NewVM(t, VMTemplate("attach", root))
	s.Deploy(t, vm, a)
	data := s.NewImage(t, "attach-data", true)
	z := testenv.StartZombieOn(t, s.Ceph, b.Net(), data.Source, "write")
	z.WaitWrite(t, true, 30*time.Second)
	s.One(t, "onevm", "disk-attach", strconv.Itoa(vm), "--image", strconv.Itoa(data.ID), "--prefix", "vd")
	v := s.WaitVM(t, vm, "RUNNING with two disks", CmdTimeout, func(v *VM) bool { return v.Running() && len(v.Disks) == 2 })
	if ev := z.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the zombie's next write after the attach: errno %d, want 108", ev.Errno)
	}
	ev := s.FencedEvent(t, vm, z.Addr)
	if ev.Image != data.Source {
		t.Fatalf("collision event %+v: want image %s", ev, data.Source)
	}
	if got := s.QEMUClients(t, a, data.Source); len(got) != 1 {
		t.Fatalf("VM %d's QEMU on %s has %d clients of the attached %s, want 1 (disks %+v)", vm, a.Name, len(got), data.Source, v.Disks)
	}
}

// TestPoweroffResume (row "resume from POWEROFF"; the README's "See it work
// on a test VM", command by command, on the real oned): a VM with a
// persistent disk is powered off (`onevm poweroff`: ACPI, then the driver's
// destroy), `onevm show` names its image and host, and a second client
// opens the image on the other host (`rbd bench --io-type read`). `rbdfence
// check --vm` reports it (exit 5, would-fence); `onevm resume` (a deploy on
// the same host) fences it: the bench fails, the VM runs and writes, the
// check now finds only the VM's own instance (exit 0) and `rbdfence
// blocklist ls` lists the bench's entry.
func TestPoweroffResume(t *testing.T) {
	t.Parallel()
	testPoweroffResume(t, Start(t, "fe74"))
}

func testPoweroffResume(t *testing.T, s *Stack) {
	a, b := s.Hosts[0], s.Hosts[1]
	img := s.NewImage(t, "poweroff", true)
	vm := s.NewVM(t, VMTemplate("poweroff", img))
	id := strconv.Itoa(vm)
	s.Deploy(t, vm, a)
	s.One(t, "onevm", "poweroff", id)
	s.WaitVM(t, vm, "POWEROFF", CmdTimeout, func(v *VM) bool { return v.State == StatePoweroff })
	if st := s.DomainState(t, a, vm); st != "" {
		t.Fatalf("one-%d on %s after poweroff: %q, want no domain", vm, a.Name, st)
	}
	// The README's `onevm show 42 --all | grep -E 'SOURCE|HOST'`: without
	// --all, 7.4.0's onevm show drops the template's DISKs, and with them
	// SOURCE (src/cli/one_helper/onevm_helper.rb:957-958).
	show := s.One(t, "onevm", "show", id, "--all")
	if !strings.Contains(show, img.Source) || !strings.Contains(show, a.Name) {
		t.Fatalf("onevm show %d names neither its image %s nor its host %s:\n%s", vm, img.Source, a.Name, show)
	}
	bench := s.startBench(t, b, img.Source)
	if out, code := s.Rbdfence(t, "check", "--vm", id); code != 5 || !strings.Contains(out, "would-fence") {
		t.Fatalf("rbdfence check --vm %d with the bench reading: exit %d, want 5 with would-fence:\n%s", vm, code, out)
	}
	s.One(t, "onevm", "resume", id)
	v := s.WaitRunning(t, vm)
	if v.Host() != a.Name {
		t.Fatalf("VM %d resumed on %s, want %s", vm, v.Host(), a.Name)
	}
	if err := bench.wait(time.Minute); err == nil {
		t.Fatalf("rbd bench on %s went on without an error after the resume fenced it", b.Name)
	}
	if !s.GuestWrite(t, a, vm, 0xc1) {
		t.Fatalf("the guest of VM %d cannot write after resume from POWEROFF", vm)
	}
	if out, code := s.Rbdfence(t, "check", "--vm", id); code != 0 {
		t.Fatalf("rbdfence check --vm %d after the resume: exit %d, want 0:\n%s", vm, code, out)
	}
	ev := s.FencedEvent(t, vm, bench.addr(t, s, v))
	if out, code := s.Rbdfence(t, "blocklist", "ls"); code != 0 || !strings.Contains(out, ev.Address) {
		t.Fatalf("rbdfence blocklist ls: exit %d, want 0 listing %s:\n%s", code, ev.Address, out)
	}
}

// bench is an `rbd bench --io-type read` on a host: a second client that
// opens the image as QEMU does and only reads (the README's zombie).
type bench struct {
	cmd   *exec.Cmd
	host  Host
	image string
	done  chan error
}

func (s *Stack) startBench(t *testing.T, h Host, image string) *bench {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", h.Name, "rbd", "--conf", s.Ceph.Conf, "--keyring", s.Ceph.Keyring,
		"--id", "libvirt", "bench", "--io-type", "read", "--io-size", "4096", "--io-threads", "1", "--io-total", "64G", image)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	b := &bench{cmd: cmd, host: h, image: image, done: make(chan error, 1)}
	go func() { b.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = b.wait(time.Minute)
	})
	// It has the image open once Ceph lists it as a watcher from h.
	deadline := time.Now().Add(time.Minute)
	for len(s.QEMUClients(t, h, image)) == 0 {
		select {
		case err := <-b.done:
			b.done <- err
			t.Fatalf("rbd bench on %s ended before it opened %s: %v", h.Name, image, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("rbd bench on %s has not opened %s after a minute", h.Name, image)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return b
}

// wait waits for the bench to end and returns how it ended.
func (b *bench) wait(within time.Duration) error {
	select {
	case err := <-b.done:
		b.done <- err
		return err
	case <-time.After(within):
		return errors.New("still running")
	}
}

// addr is the bench's client address: the fenced client of the image that
// is not the VM's QEMU (which runs on another host).
func (b *bench) addr(t *testing.T, s *Stack, v *VM) string {
	t.Helper()
	for _, e := range v.User.Events() {
		if e.Image == b.image && strings.HasPrefix(e.Address, b.host.IP+":") {
			return e.Address
		}
	}
	var evs []Event
	for _, e := range s.ShowVM(t, v.ID).User.Events() {
		if e.Image == b.image && strings.HasPrefix(e.Address, b.host.IP+":") {
			return e.Address
		}
		evs = append(evs, e)
	}
	t.Fatalf("VM %d has no event of a client on %s for %s: %+v", v.ID, b.host.Name, b.image, evs)
	return ""
}

// Rbdfence runs the rbdfence CLI on the front-end (as oneadmin's root does
// here, with /etc/one/rbdfence.yaml) and returns its stdout and exit code.
func (s *Stack) Rbdfence(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CmdTimeout)
	defer cancel()
	out, err := s.exec(ctx, append([]string{s.Bin + "/rbdfence"}, args...)...)
	if err == nil {
		return out, 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out + "\n" + err.Error(), ee.ExitCode()
	}
	t.Fatal(err)
	return "", -1
}

// TestSuspendResume (row "restore"): suspend saves the guest, resume runs
// restore-rbdfence, then OpenNebula's restore; the restored guest writes.
func TestSuspendResume(t *testing.T) {
	t.Parallel()
	testSuspendResume(t, Start(t, "fe74"))
}

func testSuspendResume(t *testing.T, s *Stack) {
	a := s.Hosts[0]
	vm, _, _ := s.DeployNew(t, "suspend", false, a)
	s.One(t, "onevm", "suspend", strconv.Itoa(vm))
	s.WaitVM(t, vm, "SUSPENDED", CmdTimeout, func(v *VM) bool { return v.State == StateSuspended })
	if st := s.DomainState(t, a, vm); st != "" {
		t.Fatalf("one-%d on %s after suspend: %q, want no domain (saved to a file)", vm, a.Name, st)
	}
	s.One(t, "onevm", "resume", strconv.Itoa(vm))
	s.WaitRunning(t, vm)
	if !strings.Contains(s.VMLog(t, vm), "restored on "+a.Name) {
		t.Fatalf("VM %d's log does not show rbdfence's restore:\n%s", vm, s.VMLog(t, vm))
	}
	if !s.GuestWrite(t, a, vm, 0xc2) {
		t.Fatalf("the guest of VM %d cannot write after resume from SUSPENDED", vm)
	}
}

// TestUndeployResumeElsewhere (row "resume from UNDEPLOYED" with a stale
// client): a VM with a persistent disk is undeployed from one host, a
// client of that disk is left there (a zombie writing), and `onevm resume`
// (UNDEPLOYED -> PENDING; the scheduler places it, here on the other host
// by SCHED_REQUIREMENTS) starts it on the other host through
// deploy-rbdfence: the zombie's next write fails (blocklisted), `onevm show`
// has its collision event, and the guest writes on the new host.
func TestUndeployResumeElsewhere(t *testing.T) {
	t.Parallel()
	testResumeElsewhere(t, Start(t, "fe74"), "undeploy")
}

// TestStopResumeElsewhere (row "restore", from STOPPED): as above with
// `onevm stop`: the guest's memory is saved and the VM's directory moved to
// the front-end (the Ceph TM's mv, over ssh to fe74's sshd); the resume
// moves it to the other host (PROLOG_RESUME) and runs restore-rbdfence
// there, which fences the stale client before OpenNebula's restore.
func TestStopResumeElsewhere(t *testing.T) {
	t.Parallel()
	testResumeElsewhere(t, Start(t, "fe74"), "stop")
}

// testResumeElsewhere: leave (how: "undeploy" --hard or "stop") a running
// VM's host A with a zombie of its persistent disk there, resume it on B.
func testResumeElsewhere(t *testing.T, s *Stack, how string) {
	a, b := s.Hosts[0], s.Hosts[1]
	img := s.NewImage(t, how, true)
	vm := s.NewVM(t, VMTemplate(how, img)+`SCHED_REQUIREMENTS = "NAME = \"`+b.Name+`\""`+"\n")
	s.One(t, "onevm", "deploy", strconv.Itoa(vm), a.Name, strconv.Itoa(s.SystemDS))
	s.WaitRunning(t, vm)
	state, what := StateUndeploy, "UNDEPLOYED"
	args := []string{"onevm", "undeploy", "--hard", strconv.Itoa(vm)}
	if how == "stop" {
		state, what = StateStopped, "STOPPED"
		args = []string{"onevm", "stop", strconv.Itoa(vm)}
	}
	s.One(t, args...)
	s.WaitVM(t, vm, what, CmdTimeout, func(v *VM) bool { return v.State == state })
	if st := s.DomainState(t, a, vm); st != "" {
		t.Fatalf("one-%d on %s after %s: %q, want no domain", vm, a.Name, how, st)
	}
	z := testenv.StartZombieOn(t, s.Ceph, a.Net(), img.Source, "write")
	z.WaitWrite(t, true, 30*time.Second)
	s.One(t, "onevm", "resume", strconv.Itoa(vm))
	v := s.WaitRunning(t, vm)
	if v.Host() != b.Name {
		t.Fatalf("VM %d resumed on %s, want %s", vm, v.Host(), b.Name)
	}
	if how == "stop" && !strings.Contains(s.VMLog(t, vm), "restored on "+b.Name) {
		t.Fatalf("VM %d's log does not show rbdfence's restore on %s:\n%s", vm, b.Name, s.VMLog(t, vm))
	}
	s.ZombieFenced(t, vm, z, b, img.Source, 0xc3, "the resume")
}

// TestColdMigrateFencesZombie (row "cold migrate"): a VM with a persistent
// disk runs on A next to a zombie client of that disk on A (a QEMU nobody
// stopped, writing); `onevm migrate` without --live saves the guest on A
// (SAVE_MIGRATE), moves its directory to B (PROLOG_MIGRATE, the Ceph TM's
// mv) and restores it there (BOOT: restore-rbdfence, then OpenNebula's
// restore): the zombie's next write fails (blocklisted), `onevm show` has
// its collision event on B, and the guest writes on B.
func TestColdMigrateFencesZombie(t *testing.T) {
	t.Parallel()
	s := Start(t, "fe74")
	a, b := s.Hosts[0], s.Hosts[1]
	img := s.NewImage(t, "cold", true)
	vm := s.NewVM(t, VMTemplate("cold", img))
	s.One(t, "onevm", "deploy", strconv.Itoa(vm), a.Name, strconv.Itoa(s.SystemDS))
	s.WaitRunning(t, vm)
	z := testenv.StartZombieOn(t, s.Ceph, a.Net(), img.Source, "write")
	z.WaitWrite(t, true, 30*time.Second)
	s.One(t, "onevm", "migrate", strconv.Itoa(vm), b.Name)
	s.WaitVM(t, vm, "RUNNING on "+b.Name+" after the cold migration", CmdTimeout, func(v *VM) bool { return v.MigratedTo(b.Name) })
	if !strings.Contains(s.VMLog(t, vm), "restored on "+b.Name) {
		t.Fatalf("VM %d's log does not show rbdfence's restore on %s:\n%s", vm, b.Name, s.VMLog(t, vm))
	}
	if st := s.DomainState(t, a, vm); st != "" {
		t.Fatalf("one-%d on %s after the cold migration: %q, want no domain", vm, a.Name, st)
	}
	s.ZombieFenced(t, vm, z, b, img.Source, 0xc6, "the cold migration")
}

// TestTerminatedDomainRefused (row "terminate, then a new VM on the
// images"; found by the soak, seed 29 step 33): VM A with two persistent
// disks runs on host a and is terminated; VM B, created on the same images,
// is deployed on a too; then A's domain XML is started there again by hand
// (`virsh create`, a stale domain an admin brings back). A's claim still
// holds A's last deploy on a, running: without the rule the hook admitted
// the copy and blocklisted B's QEMU on both images. It must refuse the
// copy, fencing nothing, and B must go on writing both disks.
func TestTerminatedDomainRefused(t *testing.T) {
	t.Parallel()
	s := Start(t, "fe74")
	a := s.Hosts[0]
	disks := []Image{s.NewImage(t, "term-a", true), s.NewImage(t, "term-b", true)}
	old := s.NewVM(t, VMTemplate("term-old", disks...))
	s.Deploy(t, old, a)
	xml := s.OnHost(t, a, fmt.Sprintf("virsh -q dumpxml --inactive one-%d", old))
	s.One(t, "onevm", "terminate", "--hard", strconv.Itoa(old))
	s.WaitVM(t, old, "DONE", CmdTimeout, func(v *VM) bool { return v.State == StateDone })
	vm := s.NewVM(t, VMTemplate("term-new", disks...))
	s.Deploy(t, vm, a)
	_, err := s.TryHost(a, "virsh -q create /dev/stdin >/dev/null <<'RBDFENCE_XML'\n"+xml+"\nRBDFENCE_XML")
	if err == nil {
		s.OnHost(t, a, fmt.Sprintf("virsh -q destroy one-%d", old))
		t.Fatalf("the terminated VM %d's domain started again by hand on %s", old, a.Name)
	}
	if !strings.Contains(err.Error(), "already started on "+a.Name) || !strings.Contains(err.Error(), "refusing a copy started by hand") {
		t.Fatalf("the terminated VM %d's domain: refused, but not as a copy started by hand: %v", old, err)
	}
	for d := range disks {
		if !s.GuestWriteDisk(t, a, vm, d, byte(0xa0+d)) {
			t.Fatalf("VM %d on %s cannot write its disk %d after the terminated VM %d's domain was refused: fenced", vm, a.Name, d, old)
		}
	}
}
