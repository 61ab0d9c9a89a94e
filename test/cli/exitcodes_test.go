package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestExitCodeTable produces every row of the exit-code table (the one
// table of internal/outcome, printed in the README) with the real
// binaries, through the very case the row's text names: each case quotes
// its row, and every kind has at least one case.
//
// The table's last row (a driver exits with the wrapped remote action's
// own code) needs a KVM host over ssh: test/frontend's
// TestDeployFailureKeepsRemoteCodeAndText proves it; ssh unreachable (3):
// TestSSHHopFails there.
func TestExitCodeTable(t *testing.T) {
	c := testenv.StartCeph(t)
	clean := c.NewImage(t, "xclean")
	dirty := c.NewImage(t, "xdirty")
	fenced := c.NewImage(t, "xfence")
	testenv.StartZombie(t, c, dirty, "idle")
	zombie := testenv.StartZombie(t, c, fenced, "idle")

	// oned (the test stand-in): one healthy host, one VM.
	sim, cfg, auth := withOned(t, c, "exitpw")
	sim.PutHost(onedsim.Host{ID: 7, Name: "healthy", State: onedsim.HostMonitored, LastMonitored: time.Now()})
	vm := newVMID()
	sim.Put(onedsim.VM{ID: vm, Name: "x", Host: "healthy", Seq: 1, Disks: []onedsim.Disk{{ID: 0, Source: clean, Persistent: true, CephHost: c.Mon, CephUser: c.User, CephKey: c.Keyring}}})
	dir := t.TempDir()
	base, _ := writeConfig(t, c, "")
	b, _ := os.ReadFile(base)
	deadOned := filepath.Join(dir, "dead-oned.yaml")
	os.WriteFile(deadOned, append(b, []byte("opennebula:\n  endpoint: http://127.0.0.1:1/RPC2\n  auth_file: "+auth+"\n")...), 0o600)
	badCfg := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badCfg, []byte("fence:\n  expire: soon\n"), 0o600)
	badKey := filepath.Join(dir, "bad.keyring")
	os.WriteFile(badKey, []byte("[client.libvirt]\n\tkey = AQBnP0hlAAAAABAAq8bD4W0KQd1Iem1Hh7mYgg==\n"), 0o600)

	start := func(seq int, host string) string {
		b, _ := json.Marshal(hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: seq, Host: host, Run: fmt.Sprint("x", seq), Source: "frontend",
			Disks: []vmdisk.Disk{disk(clean)}})
		return string(b)
	}
	// The VM's claim: deploy 2 on hostA.
	if r := rbdfence(t, start(2, "hostA"), "host", "--config", cfg); r.code != 0 {
		t.Fatalf("start of deploy 2: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	type tc struct {
		kind   outcome.Kind
		row    string // the words of the row this case produces
		bin    string
		stdin  string
		args   []string
		stderr string // in the one-line message; "" for none
	}
	cases := []tc{
		{outcome.OK, "`check`: clean", "rbdfence", "", []string{"check", "--config", cfg, "--image", clean}, ""},
		{outcome.OK, "`fence`: every foreign client fenced", "rbdfence", "", []string{"fence", "--config", cfg, "--image", fenced}, ""},
		{outcome.OK, "the start (or migration step) may go on", "rbdfence", start(3, "hostA"), []string{"host", "--config", cfg}, ""},
		{outcome.Failure, "a check, fence or step did not complete (the message names the image", "rbdfence", "",
			[]string{"fence", "--config", cfg, "--image", c.Pool + "/xnone"}, c.Pool + "/xnone does not exist"},
		{outcome.Usage, "unknown VM", "rbdfence", "", []string{"check", "--config", cfg, "--vm", "99999"}, "check --vm 99999: not found in oned"},
		{outcome.Usage, "malformed stdin", "rbdfence", "{not json", []string{"host", "--config", cfg}, ""},
		{outcome.Usage, "bad domain XML", "rbdfence-hook", "<domain", []string{"--config", cfg, "one-1", "prepare", "begin", "-"}, "domain XML"},
		{outcome.Usage, "the message names the key", "rbdfence", "", []string{"check", "--config", badCfg, "--image", clean}, "fence.expire"},
		{outcome.Usage, "bad arguments", "rbdfence", "", []string{"check", "--vm", "forty-two"}, `--vm "forty-two": want a whole number`},
		{outcome.Unavailable, "Ceph (or ssh, oned) unreachable", "rbdfence", "", []string{"check", "--config", cfg, "--mon-host", "127.0.0.1:1", "--image", clean}, "timed out"},
		{outcome.Unavailable, "oned) unreachable", "rbdfence", "", []string{"check", "--config", deadOned, "--vm", fmt.Sprint(vm)}, "oned unreachable"},
		{outcome.Unavailable, "credentials refused", "rbdfence", "", []string{"check", "--config", cfg, "--mon-host", c.MonHost, "--keyring", badKey, "--image", clean}, "refused client.libvirt"},
		{outcome.Refused, "a newer deploy", "rbdfence", start(1, "hostB"), []string{"host", "--config", cfg}, ""},
		{outcome.Refused, "`fence-host`: the host is not failed", "rbdfence", "", []string{"fence-host", "--config", cfg, "--host", "healthy"}, "healthy"},
		{outcome.Found, "foreign clients found that `fence` would fence", "rbdfence", "", []string{"check", "--config", cfg, "--image", dirty}, ""},
	}
	covered := map[outcome.Kind]bool{}
	for _, tc := range cases {
		covered[tc.kind] = true
		t.Run(fmt.Sprintf("%d %s", tc.kind.Code(), tc.row), func(t *testing.T) {
			if !strings.Contains(tc.kind.Meaning(), tc.row) {
				t.Fatalf("exit %d's row says %q, not %q", tc.kind.Code(), tc.kind.Meaning(), tc.row)
			}
			r := runBin(t, tc.bin, tc.stdin, tc.args...)
			if r.code != tc.kind.Code() {
				t.Fatalf("%s %v: exit %d, want %d\n%s%s", tc.bin, tc.args, r.code, tc.kind.Code(), r.stdout, r.stderr)
			}
			if tc.stderr != "" && (!strings.Contains(r.stderr, tc.stderr) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0) {
				t.Fatalf("stderr must be one line naming %q:\n%s", tc.stderr, r.stderr)
			}
		})
	}
	for _, k := range outcome.All() {
		if !covered[k] {
			t.Errorf("no case produces exit %d (%s)", k.Code(), k.Meaning())
		}
	}
	if _, ok := c.BlocklistEntries(t)[zombie.Addr]; !ok {
		t.Errorf("the fence that exited 0 did not blocklist %s", zombie.Addr)
	}
}
