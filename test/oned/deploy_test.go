package oned

import (
	"encoding/base64"
	"fmt"
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
	t.Run("SSHHooks", func(t *testing.T) { testSSHHooks(t, s) })
}

// testSSHHooks (README: "ssh without multiplexing"): the state hooks
// install.sh frontend ships, created with onehook create, open rbdfence's
// own ssh masters ahead of the actions (the stack's ssh does not
// multiplex: no ControlPath in its config), and doctor reads them from
// oned's hook pool.
//   - PROLOG: the master to the VM's host, and the deploy action that
//     follows rides it: after RUNNING, the master that runs is the one the
//     hook's execution record says it opened (had the deploy opened one
//     first, the hook would have found it open).
//   - MIGRATE (a live migration): the masters to its destination and its
//     source, each opened or found open, and the one it opened runs after.
func testSSHHooks(t *testing.T, s *Stack) {
	a, b := s.Hosts[0], s.Hosts[1]
	// The deploy and migration above left rbdfence's masters open.
	closeMasters(t, s, a, b)
	if l := doctorLine(t, s, "ssh-hooks"); !strings.HasPrefix(l, "PASS  ssh-hooks") || !strings.Contains(l, "none created; optional, not created:") {
		t.Fatalf("rbdfence doctor before onehook create: %q", l)
	}
	var ids []int
	for _, f := range []string{"prolog_ssh.hook", "migrate_ssh.hook"} {
		id, err := parseID(s.One(t, "onehook", "create", "/var/lib/one/remotes/hooks/rbdfence/"+f))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = s.Try("onehook", "delete", strconv.Itoa(id)) }()
		ids = append(ids, id)
	}
	prolog, migrate := ids[0], ids[1]
	// doctor reads them from oned's own hook pool (one.hookpool.info).
	want := fmt.Sprintf("hook %d (prolog_ssh_rbdfence) on PROLOG and hook %d (migrate_ssh_rbdfence) on MIGRATE open rbdfence's ssh masters before the action", prolog, migrate)
	if l := doctorLine(t, s, "ssh-hooks"); l != "PASS  ssh-hooks       "+want {
		t.Fatalf("rbdfence doctor after onehook create: %q, want %q", l, want)
	}

	vm, _, _ := s.DeployNew(t, "ssh-hooks", false, b)
	pid := masterSaid(t, s, prolog, vm, b, "opened for the action (pid ")
	if pid == "" {
		t.Fatalf("hook %d has no successful execution that opened the master to %s for VM %d:\n%s", prolog, b.Name, vm, s.One(t, "onehook", "show", "-x", strconv.Itoa(prolog)))
	}
	if now := masterPIDOf(t, s, b); now != pid {
		t.Fatalf("after the deploy of VM %d the master to %s has pid %q, not the one the PROLOG hook opened (pid %s)", vm, b.Name, now, pid)
	}

	closeMasters(t, s, a, b)
	s.One(t, "onevm", "migrate", "--live", strconv.Itoa(vm), a.Name)
	s.WaitVM(t, vm, "RUNNING on "+a.Name, CmdTimeout, func(v *VM) bool { return v.MigratedTo(a.Name) })
	for _, h := range []Host{a, b} {
		opened := masterSaid(t, s, migrate, vm, h, "opened for the action (pid ")
		found := masterSaid(t, s, migrate, vm, h, "already open (pid ")
		switch {
		case opened == "" && found == "":
			t.Fatalf("hook %d opened no master to %s for the live migration of VM %d (%s -> %s):\n%s", migrate, h.Name, vm, b.Name, a.Name, s.One(t, "onehook", "show", "-x", strconv.Itoa(migrate)))
		case opened != "":
			if now := masterPIDOf(t, s, h); now != opened {
				t.Fatalf("after the live migration of VM %d the master to %s has pid %q, not the one the MIGRATE hook opened (pid %s)", vm, h.Name, now, opened)
			}
		}
	}
}

// closeMasters ends rbdfence's own ssh masters to hosts.
func closeMasters(t *testing.T, s *Stack, hosts ...Host) {
	t.Helper()
	for _, h := range hosts {
		_, _ = s.Try("sh", "-c", "ssh -o ControlPath=$HOME/.ssh/rbdfence/%C -O exit "+h.Name)
		if pid := masterPIDOf(t, s, h); pid != "" {
			t.Fatalf("rbdfence's master to %s (pid %s) still runs after ssh -O exit", h.Name, pid)
		}
	}
}

// masterPIDOf is the pid of rbdfence's own ssh master to h ("": none runs).
func masterPIDOf(t *testing.T, s *Stack, h Host) string {
	t.Helper()
	out, err := s.Try("sh", "-c", "ssh -o ControlPath=$HOME/.ssh/rbdfence/%C -O check "+h.Name+" 2>&1")
	if err != nil {
		return ""
	}
	_, pid, ok := strings.Cut(out, "(pid=")
	pid, _, _ = strings.Cut(pid, ")")
	if !ok || pid == "" {
		t.Fatalf("ssh -O check %s: %q", h.Name, out)
	}
	return pid
}

// masterSaid is the pid in the line "ssh master to H <what>N" that a
// successful execution of hook logged for vm ("": no such line).
func masterSaid(t *testing.T, s *Stack, hook, vm int, h Host, what string) string {
	t.Helper()
	hx := s.One(t, "onehook", "show", "-x", strconv.Itoa(hook))
	line := "INFO: " + strconv.Itoa(vm) + " rbdfence: ssh master to " + h.Name + " " + what
	for _, rec := range strings.Split(hx, "<HOOK_EXECUTION_RECORD>")[1:] {
		if !strings.Contains(rec, "<CODE>0</CODE>") {
			continue
		}
		for _, tag := range []string{"STDERR", "STDOUT"} {
			_, v, ok := strings.Cut(rec, "<"+tag+">")
			if !ok {
				continue
			}
			v, _, _ = strings.Cut(v, "</"+tag+">")
			v = strings.TrimSuffix(strings.TrimPrefix(v, "<![CDATA["), "]]>")
			if d, err := base64.StdEncoding.DecodeString(v); err == nil {
				v = string(d)
			}
			if _, rest, ok := strings.Cut(v, line); ok {
				// The pid's digits ("-" when ssh did not say: none).
				if n := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' }); n > 0 {
					return rest[:n]
				}
			}
		}
	}
	return ""
}

// doctorLine is the line of check in `rbdfence doctor --role frontend` on
// the stack's front-end (its other checks may fail there: the stack's
// remotes are not in /var/lib/one).
func doctorLine(t *testing.T, s *Stack, check string) string {
	t.Helper()
	out, _ := s.Rbdfence(t, "doctor", "--role", "frontend")
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == check {
			return l
		}
	}
	t.Fatalf("rbdfence doctor has no %s line:\n%s", check, out)
	return ""
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
