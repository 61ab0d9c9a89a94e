package oned

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// refusalShown is how oned shows a refusal of rbdfence's in the VM's ERROR
// (issue 30 item 3): ctime, then the first 100 characters of "<ACTION>: "
// and the driver's line (src/vmm/VirtualMachineManagerProtocol.cc:43-58,
// src/vm/VirtualMachine.cc:3092-3097, src/common/NebulaUtil.cc:66-79 of
// release-7.4.0): rbdfence's headline, what was fenced, and the whole brief
// (what happened and what to run), which " | " ends within those 100.
var refusalShown = regexp.MustCompile(`^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}: (DEPLOY|MIGRATE|RESTORE|ATTACHDISK): rbdfence: refused, (nothing fenced|fencing unknown|\d+ clients? fenced): ([^|]+) \| `)

// wantRefusalShown checks that v's ERROR is a refusal of action, fenced
// as said, whose brief holds brief, and logs it as the operator sees it.
func wantRefusalShown(t *testing.T, v *VM, action, fenced, brief string) {
	t.Helper()
	m := refusalShown.FindStringSubmatch(v.User.Error)
	if m == nil || m[1] != action || m[2] != fenced || !strings.Contains(m[3], brief) {
		t.Fatalf("VM %d's ERROR %q\nwant \"<time>: %s: rbdfence: refused, %s: <brief naming %q> | ...\" within oned's 100 characters", v.ID, v.User.Error, action, fenced, brief)
	}
	t.Logf("onevm show %d: ERROR=%q", v.ID, v.User.Error)
}

// testRefusalsInERROR (issue 30 item 3): refusals the real oned shows in
// the VM's ERROR as the operator reads it in `onevm show`, each followed by
// the fix its brief names, after which the start goes on. The other
// refusals on this stack are checked the same way where they happen
// (resumeRefused, testFailClosedThenRecoverRetry).
//   - no host binary on the host (a host added without `onehost sync`):
//     "no rbdfence on H; run onehost sync --force";
//   - a claim of a newer deploy than oned's (oned's database restored from
//     an older backup): "... rbdfence claim show", then `rbdfence claim
//     reset`;
//   - a claim by an older rbdfence that nothing shows to be this VM's:
//     "old claim not shown ours; rbdfence claim show", then `claim reset
//     --legacy`.
func testRefusalsInERROR(t *testing.T, s *Stack) {
	a := s.Victim
	t.Run("NoHostBinary", func(t *testing.T) {
		img := s.NewImage(t, "refuse-nobin", true)
		vm := s.NewVM(t, VMTemplate("refuse-nobin", img))
		s.OnHost(t, a, "mv /var/tmp/one/rbdfence/rbdfence-host /var/tmp/one/rbdfence/rbdfence-host.away")
		healed := false
		heal := func() {
			if !healed {
				healed = true
				s.OnHost(t, a, "mv /var/tmp/one/rbdfence/rbdfence-host.away /var/tmp/one/rbdfence/rbdfence-host")
			}
		}
		t.Cleanup(heal)
		s.One(t, "onevm", "deploy", strconv.Itoa(vm), a.Name, strconv.Itoa(s.SystemDS))
		v := s.WaitVM(t, vm, "BOOT_FAILURE", 3*time.Minute, func(v *VM) bool { return v.LCM == LCMBootFailure })
		wantRefusalShown(t, v, "DEPLOY", "nothing fenced", "no rbdfence on "+a.Name+"; run onehost sync --force")
		if st := s.DomainState(t, a, vm); st != "" {
			t.Fatalf("one-%d exists on %s after the refused deploy: %q", vm, a.Name, st)
		}
		heal() // what onehost sync --force does on this host
		s.One(t, "onevm", "recover", "--retry", strconv.Itoa(vm))
		s.WaitRunning(t, vm)
	})
	for _, c := range []struct {
		name   string
		plant  func(c *engine.Claim, v *VM)
		brief  string
		reset  []string
		wantIn string // what the VM log's whole line says besides
	}{
		{"NewerClaim", func(c *engine.Claim, v *VM) {
			c.Seq, c.SeqStime, c.Host, c.HostAddrs, c.Addrs, c.Images = 9, 0, "elsewhere", nil, nil, nil
		}, "#9", nil, "database"},
		{"LegacyClaim", func(c *engine.Claim, v *VM) {
			c.Stime, c.SeqStime, c.Instance, c.Seq, c.Host, c.HostAddrs, c.Addrs, c.Images, c.Window = 0, 0, 0, 7, "elsewhere", nil, nil, nil, nil
		}, "old claim not shown ours; rbdfence claim show", []string{"--legacy"}, "claim reset --vm"},
	} {
		t.Run(c.name, func(t *testing.T) {
			vm, _, _ := s.DeployNew(t, "refuse-"+strings.ToLower(c.name), true, a)
			id := strconv.Itoa(vm)
			s.One(t, "onevm", "undeploy", "--hard", id)
			s.WaitVM(t, vm, "UNDEPLOYED", CmdTimeout, func(v *VM) bool { return v.State == StateUndeploy })
			cl := s.claim(t, vm)
			c.plant(&cl, s.ShowVM(t, vm))
			cl.State, cl.Updated = "running", time.Now().UTC()
			b, err := json.Marshal(cl)
			if err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(t.TempDir(), "claim.json")
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			s.Ceph.Admin(t, "rados", "-p", engine.DefaultClaimPool, "put", engine.ClaimObject(vm), f)
			s.One(t, "onevm", "deploy", id, a.Name, strconv.Itoa(s.SystemDS))
			v := s.WaitVM(t, vm, "BOOT_UNDEPLOY_FAILURE", 3*time.Minute, func(v *VM) bool { return v.LCM == LCMBootUndeployFailure })
			wantRefusalShown(t, v, "DEPLOY", "nothing fenced", c.brief)
			wantRefusalShown(t, v, "DEPLOY", "nothing fenced", "rbdfence claim show")
			if l := s.VMLog(t, vm); !strings.Contains(l, c.wantIn) {
				t.Fatalf("VM %d's log lacks the whole reason (%q):\n%s", vm, c.wantIn, tail(l, 20))
			}
			// The fix the brief names: look, then reset.
			if out, code := s.Rbdfence(t, "claim", "show", "--vm", id); code != 0 || !strings.Contains(out, "elsewhere") {
				t.Fatalf("rbdfence claim show --vm %s: exit %d\n%s", id, code, out)
			}
			if out, code := s.Rbdfence(t, append([]string{"claim", "reset", "--vm", id}, c.reset...)...); code != 0 {
				t.Fatalf("rbdfence claim reset --vm %s %v: exit %d\n%s", id, c.reset, code, out)
			}
			s.One(t, "onevm", "recover", "--retry", id)
			s.WaitRunning(t, vm)
			if !s.GuestWrite(t, a, vm, 0xd7) {
				t.Fatalf("VM %d cannot write after the claim reset and recover --retry", vm)
			}
		})
	}
}
