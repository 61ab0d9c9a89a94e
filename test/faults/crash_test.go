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
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestKilledBetweenBlocklistAndEvent kills the host step (SIGKILL, no
// deferred code) right after the blocklist, before the lock break, the audit
// log and any event delivery. The zombie stays fenced; the event is in the
// spool and the next run delivers it exactly once.
func TestKilledBetweenBlocklistAndEvent(t *testing.T) {
	c := testenv.StartCeph(t)
	img := c.NewImage(t, "crash")
	pool, name, _ := strings.Cut(img, "/")
	const vm = 4711
	sim := onedsim.New("oneadmin:pw")
	if err := sim.Put(onedsim.VM{ID: vm, Name: "crash", Host: "hostA", Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	dir := t.TempDir()
	auth := filepath.Join(dir, "one_auth")
	os.WriteFile(auth, []byte("oneadmin:pw\n"), 0o600)
	cfg := filepath.Join(dir, "rbdfence.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("ceph:\n  mon_host: %s\n  user: %s\n  keyring: %s\naudit_log: %s/audit.log\nspool_dir: %s/spool\nopennebula:\n  endpoint: %s\n  auth_file: %s\n",
		c.Mon, c.User, c.Keyring, dir, dir, sim.URL(), auth)), 0o600)

	z := testenv.StartZombie(t, c, img, "write")
	z.WaitWrite(t, true, 10*time.Second)
	req, _ := json.Marshal(hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 1, Host: "hostA", Run: "crash1", Source: "hook",
		Disks: []vmdisk.Disk{{ID: "0", Pool: pool, Name: name}}})
	cmd := exec.Command(testenv.Bin(t, "rbdfence"), "host", "--config", cfg)
	cmd.Stdin = bytes.NewReader(req)
	cmd.Env = append(os.Environ(), "RBDFENCE_FAILPOINT=after-blocklist")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != -1 {
		t.Fatalf("the step must die by SIGKILL at the failpoint: %v\n%s", err, out)
	}
	if ev := z.WaitWrite(t, false, 10*time.Second); ev.Errno != 108 {
		t.Fatalf("the zombie was blocklisted before the crash: errno %d", ev.Errno)
	}
	if _, err := os.Stat(filepath.Join(dir, "audit.log")); err == nil {
		t.Fatal("the crash came before the audit log: it must not exist yet (the spool carries the fence)")
	}
	if n := len(sim.Updates()); n != 0 {
		t.Fatalf("no event can have been sent before the crash, got %d updates", n)
	}
	spooled, _ := filepath.Glob(filepath.Join(dir, "spool", "*.json"))
	if len(spooled) != 1 {
		t.Fatalf("the fence must be in the spool: %v", spooled)
	}

	// The next run (here: an explicit flush) delivers it, once.
	for i := 0; i < 2; i++ {
		r := exec.Command(testenv.Bin(t, "rbdfence"), "events", "flush", "--config", cfg)
		if out, err := r.CombinedOutput(); err != nil {
			t.Fatalf("events flush #%d: %v\n%s", i, err, out)
		}
	}
	ut, _ := sim.UserTemplate(vm)
	n := 0
	for _, a := range ut {
		if opennebula.IsEventAttr(a.Name) {
			n++
			if a.Vector["ADDRESS"] != z.Addr {
				t.Fatalf("event for the wrong client: %+v", a.Vector)
			}
		}
	}
	if v, _ := ut.Single("RBDFENCE_COLLISIONS"); n != 1 || v != "1" {
		t.Fatalf("the event must arrive exactly once: %d events, count %q\n%s", n, v, ut.String())
	}
	// The lock the crash left behind is broken by the next start.
	r := exec.Command(testenv.Bin(t, "rbdfence"), "fence", "--config", cfg, "--image", img)
	if out, err := r.CombinedOutput(); err != nil || !strings.Contains(string(out), "fenced 1") {
		t.Fatalf("next fence: %v\n%s", err, out)
	}
}
