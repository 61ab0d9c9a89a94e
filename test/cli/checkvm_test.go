package cli_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/checkjson"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

func TestCheckVMAndAll(t *testing.T) {
	c := testenv.StartCeph(t)
	running := c.NewImage(t, "vmrun")
	stopped := c.NewImage(t, "vmstop")
	vmRun, vmStop := newVMID(), newVMID()
	sim, cfg, _ := withOned(t, c, "checkpw")
	disk := func(spec string) onedsim.Disk {
		return onedsim.Disk{ID: 0, Source: spec, Persistent: true, CephHost: c.Mon, CephUser: c.User, CephKey: c.Keyring}
	}
	sim.Put(onedsim.VM{ID: vmRun, Name: "web", Host: "hostA", Seq: 2, Disks: []onedsim.Disk{disk(running)}})
	sim.Put(onedsim.VM{ID: vmStop, Name: "db", Host: "hostB", Seq: 5, State: onedsim.StatePoweroff, Disks: []onedsim.Disk{disk(stopped)}})

	// The running VM's instance starts and is recorded; then a zombie appears.
	req := hoststep.Request{VM: vmRun, Seq: 2, Host: "hostA", Run: "cv", Source: "frontend", Disks: []vmdisk.Disk{{ID: "0", Pool: "one", Name: strings.TrimPrefix(running, "one/")}}}
	req.Op = hoststep.OpStart
	if r, resp := hostStep(t, cfg, req); r.code != 0 {
		t.Fatalf("start: %+v", resp)
	}
	inst := testenv.StartZombie(t, c, running, "idle")
	req.Op = hoststep.OpRecord
	if r, resp := hostStep(t, cfg, req); r.code != 0 {
		t.Fatalf("record: %+v", resp)
	}
	zombie := testenv.StartZombie(t, c, running, "write")
	zombie.WaitWrite(t, true, 10*time.Second)

	r := rbdfence(t, "", "check", "--config", cfg, "--vm", fmt.Sprint(vmRun), "--json")
	if r.code != 5 {
		t.Fatalf("check --vm: exit %d (want 5)\n%s%s", r.code, r.stdout, r.stderr)
	}
	// One object, the documented type (docs/CLI.md), every field printed.
	var out checkjson.VMs
	decodeStrict(t, r.stdout, &out)
	res := out.VMs
	if len(res) != 1 || res[0].VM != vmRun || out.WouldFence != 1 || !out.DryRun || res[0].Claim == nil || res[0].Claim.Host != "hostA" {
		t.Fatalf("check --vm %d --json: %+v", vmRun, out)
	}
	got := map[string]engine.Decision{}
	for _, cl := range res[0].Report.Images[0].Clients {
		got[cl.Address] = cl.Decision
	}
	if !res[0].Running || got[inst.Addr] != engine.DecideInstance || got[zombie.Addr] != engine.DecideFence {
		t.Fatalf("the running instance must be kept and the zombie reported: %v (running %v)", got, res[0].Running)
	}
	// --all --json: both VMs, by id; the stopped one has no claim (null).
	r = rbdfence(t, "", "check", "--config", cfg, "--all", "-j")
	out = checkjson.VMs{}
	decodeStrict(t, r.stdout, &out)
	if r.code != 5 || len(out.VMs) != 2 || out.VMs[0].VM != min(vmRun, vmStop) || out.VMs[1].VM != max(vmRun, vmStop) {
		t.Fatalf("check --all -j: exit %d %+v", r.code, out)
	}
	for _, v := range out.VMs {
		if v.VM == vmStop && (v.Running || v.Claim != nil || !strings.Contains(r.stdout, `"claim": null`)) {
			t.Fatalf("the stopped VM %d: %+v", vmStop, v)
		}
	}
	zombie.WaitWrite(t, true, 5*time.Second) // a check changes nothing

	// --all, piped: both VMs, no progress noise on stderr.
	r = rbdfence(t, "", "check", "--config", cfg, "--all")
	if r.code != 5 || !strings.Contains(r.stdout, fmt.Sprintf("VM %d web on hostA", vmRun)) || !strings.Contains(r.stdout, fmt.Sprintf("VM %d db on hostB", vmStop)) {
		t.Fatalf("check --all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stderr, "checking VM") {
		t.Fatalf("progress must stay off when piped: %q", r.stderr)
	}
	// On a terminal (a pty made by script(1)), --all shows its progress.
	pty := exec.Command("script", "-qfec", testenv.Bin(t, "rbdfence")+" check --config "+cfg+" --all", "/dev/null")
	tty, _ := pty.CombinedOutput()
	if !strings.Contains(string(tty), "checking VM") {
		t.Fatalf("no progress on a terminal:\n%s", tty)
	}
	// Unknown VM: bad input (2), one line naming it.
	r = rbdfence(t, "", "check", "--config", cfg, "--vm", "999999")
	if r.code != 2 || !strings.Contains(r.stderr, "check --vm 999999: not found in oned") || len(strings.Split(strings.TrimSpace(r.stderr), "\n")) != 1 {
		t.Fatalf("unknown VM: exit %d %q", r.code, r.stderr)
	}
}
