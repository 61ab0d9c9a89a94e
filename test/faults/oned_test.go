package faults_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestOnedSlowOrFailing: oned answers later than its timeout, or with
// errors. The fence and the start go on (events are not a reason to keep a
// VM down), nothing waits longer than the oned timeout, the events wait in
// the spool, and once oned is healthy they arrive exactly once.
func TestOnedSlowOrFailing(t *testing.T) {
	c := testenv.StartCeph(t)
	for _, tc := range []struct {
		name  string
		fault func(*onedsim.Sim)
	}{
		{"slow", func(s *onedsim.Sim) { s.SetDelay(4 * time.Second) }},
		{"errors", func(s *onedsim.Sim) { s.SetFailCalls("one.vm.update", 100); s.SetFailCalls("one.vm.info", 100) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := c.NewImage(t, "oned-"+tc.name)
			pool, name, _ := strings.Cut(img, "/")
			vm := 4800 + len(tc.name)
			sim := onedsim.New("oneadmin:pw")
			sim.Put(onedsim.VM{ID: vm, Host: "hostA", Seq: 1})
			if err := sim.Start("127.0.0.1:0"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sim.Close() })
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "one_auth"), []byte("oneadmin:pw\n"), 0o600)
			cfg := filepath.Join(dir, "rbdfence.yaml")
			os.WriteFile(cfg, []byte(fmt.Sprintf("ceph:\n  mon_host: %s\n  user: %s\n  keyring: %s\ntimeouts:\n  oned: 1s\naudit_log: %s/audit.log\nspool_dir: %s/spool\nopennebula:\n  endpoint: %s\n  auth_file: %s/one_auth\n",
				c.Mon, c.User, c.Keyring, dir, dir, sim.URL(), dir)), 0o600)
			z := testenv.StartZombie(t, c, img, "idle")
			tc.fault(sim)

			req, _ := json.Marshal(hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 1, Host: "hostA", Run: "oned-" + tc.name, Source: "hook",
				Disks: []vmdisk.Disk{{ID: "0", Pool: pool, Name: name}}})
			cmd := exec.Command(testenv.Bin(t, "rbdfence"), "host", "--config", cfg)
			cmd.Stdin = bytes.NewReader(req)
			start := time.Now()
			out, err := cmd.Output()
			took := time.Since(start)
			var resp hoststep.Response
			if err != nil || json.Unmarshal(out, &resp) != nil || !resp.OK || resp.Report.Fenced != 1 {
				t.Fatalf("the start must go on with the zombie fenced: %v %s", err, out)
			}
			if took > 8*time.Second {
				t.Fatalf("a slow oned held the step for %s (oned timeout 1s)", took)
			}
			spooled, _ := filepath.Glob(filepath.Join(dir, "spool", "*.json"))
			if len(spooled) != 1 {
				t.Fatalf("the event must wait in the spool: %v", spooled)
			}

			sim.SetDelay(0)
			sim.SetFailCalls("one.vm.update", 0)
			sim.SetFailCalls("one.vm.info", 0)
			for i := 0; i < 2; i++ {
				if out, err := exec.Command(testenv.Bin(t, "rbdfence"), "events", "flush", "--config", cfg).CombinedOutput(); err != nil {
					t.Fatalf("flush #%d: %v\n%s", i, err, out)
				}
			}
			ut, _ := sim.UserTemplate(vm)
			if v, _ := ut.Single("RBDFENCE_COLLISIONS"); v != "1" || !strings.Contains(ut.String(), z.Addr) {
				t.Fatalf("the event must arrive exactly once: count %q\n%s", v, ut.String())
			}
		})
	}
}
