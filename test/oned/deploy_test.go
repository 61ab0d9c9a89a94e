package oned

import (
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
)

// TestDeployAndLiveMigrate: the real oned 7.4.0 deploys a VM with an RBD disk
// on a real KVM host (its own libvirtd) through rbdfence's deploy action, the
// guest writes its disk, and OpenNebula's own live migration (vmm/kvm/migrate:
// virsh migrate --live ... qemu+ssh://DST/system) moves it to the other host
// through migrate-rbdfence; the guest still writes there and nothing was
// fenced.
func TestDeployAndLiveMigrate(t *testing.T) {
	// Not parallel: it runs alone, before the others. Beside the four
	// parallel tests it failed once on this 2-core machine (oned showed the
	// VM RUNNING on the destination while virsh there had no one-N yet);
	// alone it passed every time (Dec 2).
	s := Start(t, "fe74")
	testDeployAndLiveMigrate(t, s)
	// Here too, alone: the HA hook test counts the state hooks.
	t.Run("PrologSSHHook", func(t *testing.T) { testPrologSSHHook(t, s) })
}

// testPrologSSHHook (README: Performance, "ssh without multiplexing"): the
// PROLOG hook install.sh frontend ships, created with onehook create, opens
// rbdfence's own ssh master to the VM's host while PROLOG runs (the stack's
// ssh does not multiplex: no ControlPath in its config), and the deploy
// action that follows rides that master: after RUNNING, the master that
// runs is the one the hook's execution record says it opened (had the
// deploy opened one first, the hook would have found it open).
func testPrologSSHHook(t *testing.T, s *Stack) {
	b := s.Hosts[1]
	check := "ssh -o ControlPath=$HOME/.ssh/rbdfence/%C -O check " + b.Name + " 2>&1"
	// The deploy and migration above left rbdfence's master to b open.
	_, _ = s.Try("sh", "-c", "ssh -o ControlPath=$HOME/.ssh/rbdfence/%C -O exit "+b.Name)
	if out, err := s.Try("sh", "-c", check); err == nil {
		t.Fatalf("rbdfence's master to %s still runs after ssh -O exit: %s", b.Name, out)
	}
	out := s.One(t, "onehook", "create", "/var/lib/one/remotes/hooks/rbdfence/prolog_ssh.hook")
	hook, err := parseID(out)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = s.Try("onehook", "delete", strconv.Itoa(hook)) }()
	vm, _, _ := s.DeployNew(t, "prolog-ssh", false, b)

	var said string
	hx := s.One(t, "onehook", "show", "-x", strconv.Itoa(hook))
	for _, rec := range strings.Split(hx, "<HOOK_EXECUTION_RECORD>")[1:] {
		if !strings.Contains(rec, "<CODE>0</CODE>") {
			continue
		}
		for _, tag := range []string{"STDERR", "STDOUT"} {
			if _, v, ok := strings.Cut(rec, "<"+tag+">"); ok {
				v, _, _ = strings.Cut(v, "</"+tag+">")
				v = strings.TrimSuffix(strings.TrimPrefix(v, "<![CDATA["), "]]>")
				if d, err := base64.StdEncoding.DecodeString(v); err == nil {
					v = string(d)
				}
				if strings.Contains(v, "INFO: "+strconv.Itoa(vm)+" rbdfence: ssh master to "+b.Name+" opened for the deploy") {
					said = v
				}
			}
		}
	}
	_, pid, ok := strings.Cut(said, "(pid ")
	pid, _, _ = strings.Cut(pid, ",")
	if !ok || pid == "" {
		t.Fatalf("hook %d has no successful execution that opened the master for VM %d:\n%s", hook, vm, hx)
	}
	now, err := s.Try("sh", "-c", check)
	if err != nil || !strings.Contains(now, "(pid="+pid+")") {
		t.Fatalf("after the deploy of VM %d the master to %s is %q (%v), not the one the PROLOG hook opened (pid %s)", vm, b.Name, now, err, pid)
	}
}

func testDeployAndLiveMigrate(t *testing.T, s *Stack) {
	a, b := s.Hosts[0], s.Hosts[1]
	img := s.NewImage(t, "deploy-migrate", false)
	vm := s.NewVM(t, VMTemplate("deploy-migrate", img))
	v := s.Deploy(t, vm, a)
	if v.Host() != a.Name {
		t.Fatalf("VM %d runs on %q, want %s", vm, v.Host(), a.Name)
	}
	if len(v.Disks) != 1 || !strings.HasPrefix(v.Disks[0].Source, s.Ceph.Pool+"/one-") {
		t.Fatalf("VM %d disks %+v: want one RBD disk in pool %s", vm, v.Disks, s.Ceph.Pool)
	}
	disk := v.Disks[0].Image(vm)
	if !s.GuestWrite(t, a, vm, 0xa1) {
		t.Fatalf("the guest of VM %d cannot write its disk on %s", vm, a.Name)
	}
	onA := s.QEMUClients(t, a, disk)
	if len(onA) != 1 {
		t.Fatalf("VM %d's QEMU on %s: clients %v of %s, want 1", vm, a.Name, onA, disk)
	}
	s.One(t, "onevm", "migrate", "--live", strconv.Itoa(vm), b.Name)
	v = s.WaitVM(t, vm, "RUNNING on "+b.Name, CmdTimeout, func(v *VM) bool { return v.MigratedTo(b.Name) })
	if !s.GuestWrite(t, b, vm, 0xa2) {
		t.Fatalf("the guest of VM %d cannot write its disk on %s after the live migration", vm, b.Name)
	}
	if out := s.OnHost(t, a, "virsh -q list --all --name"); strings.Contains(out, "one-"+strconv.Itoa(vm)) {
		t.Fatalf("one-%d still defined on %s after the live migration: %q", vm, a.Name, out)
	}
	// The handover fenced neither instance (other tests fence their own
	// zombies meanwhile: only this VM's clients count).
	onB := s.QEMUClients(t, b, disk)
	if w := s.Watchers(t, disk); len(onB) != 1 || len(w) != 1 {
		t.Fatalf("after the live migration %s has watchers %v, want only one, from %s", disk, w, b.Name)
	}
	for _, c := range append(onA, onB...) {
		if s.Blocklisted(t, c) {
			t.Fatalf("VM %d's client %s was blocklisted across a clean deploy and live migration", vm, c)
		}
	}
	if len(v.User.Events()) != 0 {
		t.Fatalf("VM %d has collision events after a clean deploy and migration: %+v", vm, v.User.Events())
	}
}
