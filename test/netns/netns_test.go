// Tests of the test hosts (test/netns/hosts.sh, testenv.StartHosts): two
// network namespaces with their own addresses reached over ssh, and a Ceph
// cluster on the bridge that sees each host's clients with that host's
// address. Everything is real; nothing skips.
package netns_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestSSHLandsOnEachHost: ssh -F <ssh_config> <host> runs inside that host's
// network namespace, passes stdin, stdout, stderr and the exit code through.
func TestSSHLandsOnEachHost(t *testing.T) {
	hs := testenv.StartHosts(t)
	if hs.BridgeIP != "10.77.0.1" || hs.A != (testenv.Host{Name: "rbdf-a", IP: "10.77.0.11"}) ||
		hs.B != (testenv.Host{Name: "rbdf-b", IP: "10.77.0.12"}) {
		t.Fatalf("unexpected hosts: %+v", hs)
	}
	for _, f := range []string{hs.SSHConfig, hs.SSHKey} {
		if _, err := os.Stat(f); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []testenv.Host{hs.A, hs.B} {
		t.Run(h.Name, func(t *testing.T) {
			out, errOut, code := hs.SSH(t, h, "", "ip", "-4", "-o", "addr", "show")
			if code != 0 {
				t.Fatalf("ssh %s: exit %d: %s", h, code, errOut)
			}
			if !strings.Contains(out, " inet "+h.IP+"/24 ") {
				t.Fatalf("ssh %s does not run in its namespace: ip -4 addr there:\n%s", h, out)
			}
			for _, other := range []string{hs.A.IP, hs.B.IP, hs.BridgeIP} {
				if other != h.IP && strings.Contains(out, " inet "+other+"/") {
					t.Fatalf("ssh %s: namespace also has %s:\n%s", h, other, out)
				}
			}
			// the same view through ip netns exec
			b, err := h.Command("ip", "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
			if err != nil || !strings.Contains(string(b), " inet "+h.IP+"/24 ") {
				t.Fatalf("ip netns exec %s: %v\n%s", h.Name, err, b)
			}
			// the default route goes to the bridge
			out, _, code = hs.SSH(t, h, "", "ip", "route", "show", "default")
			if code != 0 || !strings.Contains(out, "via "+hs.BridgeIP+" ") {
				t.Fatalf("ssh %s: default route: exit %d: %q", h, code, out)
			}
			// stdin, stderr, exit code, shell words
			out, errOut, code = hs.SSH(t, h, "hello from the front-end\n", "cat; echo err >&2; exit 3")
			if out != "hello from the front-end\n" || errOut != "err\n" || code != 3 {
				t.Fatalf("ssh %s: got stdout %q stderr %q exit %d", h, out, errOut, code)
			}
			out, _, code = hs.SSH(t, h, "", "printf", "'%s|'", "\"a b\"", "c")
			if out != "a b|c|" || code != 0 {
				t.Fatalf("ssh %s: shell words: %q exit %d", h, out, code)
			}
		})
	}
	// the hosts reach each other over the bridge
	out, _, code := hs.SSH(t, hs.A, "", "timeout", "5", "bash", "-c", "'exec 3<>/dev/tcp/"+hs.B.IP+"/22; head -c 7 <&3'")
	if code != 0 || out != "SSH-2.0" {
		t.Fatalf("rbdf-a cannot reach rbdf-b's sshd: exit %d, %q", code, out)
	}
}

// TestHostsUpIsIdempotent: a second `up` finds everything up, keeps the
// running sshds and prints the same env.
func TestHostsUpIsIdempotent(t *testing.T) {
	hs := testenv.StartHosts(t)
	pids := func() map[string]string {
		m := map[string]string{}
		for _, h := range []testenv.Host{hs.A, hs.B} {
			b, err := os.ReadFile(filepath.Join(filepath.Dir(hs.SSHConfig), h.Name, "sshd.pid"))
			if err != nil {
				t.Fatal(err)
			}
			m[h.Name] = strings.TrimSpace(string(b))
		}
		return m
	}
	before := pids()
	out, err := exec.Command("bash", filepath.Join(testenv.Root(), "test/netns/hosts.sh"), "up").Output()
	if err != nil {
		t.Fatalf("hosts.sh up again: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !strings.HasPrefix(line, "export RBDFENCE_TEST_") {
			t.Fatalf("hosts.sh up printed a non-export line on stdout: %q", line)
		}
	}
	env := testenv.ParseExports(string(out))
	if env["RBDFENCE_TEST_SSH_CONFIG"] != hs.SSHConfig || env["RBDFENCE_TEST_HOST_B_IP"] != hs.B.IP || len(env) != 7 {
		t.Fatalf("second up printed another env: %v", env)
	}
	if after := pids(); after["rbdf-a"] != before["rbdf-a"] || after["rbdf-b"] != before["rbdf-b"] {
		t.Fatalf("second up restarted the sshds: %v -> %v", before, after)
	}
	envOut, err := exec.Command("bash", filepath.Join(testenv.Root(), "test/netns/hosts.sh"), "env").Output()
	if err != nil || string(envOut) != string(out) {
		t.Fatalf("hosts.sh env differs from up: %v\n%s\n%s", err, envOut, out)
	}
}

type statusJSON struct {
	Watchers []struct {
		Address string `json:"address"`
	} `json:"watchers"`
}

func watchers(t *testing.T, c *testenv.Ceph, image string) []string {
	t.Helper()
	var st statusJSON
	out := c.AsLibvirt(t, "rbd", "status", "--format", "json", image)
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &st); err != nil {
		t.Fatalf("rbd status: %v\n%s", err, out)
	}
	var a []string
	for _, w := range st.Watchers {
		a = append(a, strings.TrimPrefix(w.Address, "v1:"))
	}
	return a
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var clientAddr = regexp.MustCompile(`^(\d+\.\d+\.\d+\.\d+):0/(\d+)$`)

// TestClientsShowTheirHostsAddress: on the net cluster, librbd clients on
// host A and host B (started in the namespace, and over ssh) are seen by
// Ceph with their own host's address, and a host reaches the cluster as
// client.libvirt.
func TestClientsShowTheirHostsAddress(t *testing.T) {
	hs := testenv.StartHosts(t)
	c := testenv.StartCephNet(t)
	if c.Mon != hs.BridgeIP+":"+testenv.NetCephPort || c.Dir != testenv.NetCephDir() {
		t.Fatalf("net cluster: mon %s dir %s", c.Mon, c.Dir)
	}
	img := c.NewImage(t, "netns")

	za := testenv.StartZombieOn(t, c, hs.A, img, "write")
	zb := testenv.StartZombieOn(t, c, hs.B, img, "idle")
	for _, z := range []*testenv.Zombie{za, zb} {
		if !clientAddr.MatchString(z.Addr) {
			t.Fatalf("zombie address %q is not IP:0/nonce", z.Addr)
		}
	}
	za.WaitWrite(t, true, 30*time.Second)
	w := watchers(t, c, img)
	if len(w) != 2 || !has(w, za.Addr) || !has(w, zb.Addr) {
		t.Fatalf("rbd status watchers %v, want A %s and B %s", w, za.Addr, zb.Addr)
	}
	if !strings.HasPrefix(za.Addr, hs.A.IP+":") || !strings.HasPrefix(zb.Addr, hs.B.IP+":") {
		t.Fatalf("addresses: A %s, B %s", za.Addr, zb.Addr)
	}
	locks := c.AsLibvirt(t, "rbd", "lock", "ls", "--format", "json", img)
	if !strings.Contains(locks, za.Addr) {
		t.Fatalf("A's writer holds no lock: %s", locks)
	}

	// a host runs the Ceph CLI as client.libvirt (OpenNebula's scripts run
	// rbd on a host): over ssh from B, it sees both clients.
	out, errOut, code := hs.SSH(t, hs.B, "", "rbd", "-c", c.Conf, "--id", c.User, "--keyring", c.Keyring,
		"status", "--format", "json", img)
	if code != 0 || !strings.Contains(out, za.Addr) || !strings.Contains(out, zb.Addr) {
		t.Fatalf("rbd status over ssh on %s: exit %d\n%s\n%s", hs.B, code, out, errOut)
	}

	// a client started over ssh (as the front-end starts things on a
	// host): B's address too. -tt gives it a terminal, so that it gets
	// SIGHUP and ends when the ssh client is stopped.
	img2 := c.NewImage(t, "netns-ssh")
	zs := testenv.StartZombieCmd(t, exec.Command("ssh", "-F", hs.SSHConfig, "-tt", hs.B.Name,
		testenv.Bin(t, "zombie"), "--mon", c.Mon, "--id", c.User, "--keyring", c.Keyring, "--image", img2, "--mode", "idle"))
	if !strings.HasPrefix(zs.Addr, hs.B.IP+":") {
		t.Fatalf("zombie started over ssh on %s has address %s", hs.B, zs.Addr)
	}
	if w := watchers(t, c, img2); len(w) != 1 || w[0] != zs.Addr {
		t.Fatalf("rbd status of %s: watchers %v, want %s", img2, w, zs.Addr)
	}
	zs.Stop()
	deadline := time.Now().Add(15 * time.Second)
	for remoteZombieRunning(t, img2) {
		if time.Now().After(deadline) {
			t.Fatalf("the zombie started over ssh outlived its ssh client")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// SIGHUP ended it without closing the image: its watch would linger
	// for the watch timeout (30 s) and keep the image from being removed.
	// Blocklisting the dead instance drops the watch at once.
	t.Cleanup(func() {
		_ = exec.Command("ceph", "-c", c.AdminConf, "osd", "blocklist", "rm", zs.Addr).Run()
	})
	c.Admin(t, "ceph", "osd", "blocklist", "add", zs.Addr, "600")
	deadline = time.Now().Add(15 * time.Second)
	for len(watchers(t, c, img2)) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the dead ssh zombie's watch on %s stays after blocklisting it: %v", img2, watchers(t, c, img2))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// remoteZombieRunning: a process with image in its command line runs (the
// namespaces share the machine's process table).
func remoteZombieRunning(t *testing.T, image string) bool {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) == "zombie" && has(args, image) {
			return true
		}
	}
	return false
}

// TestBlocklistFencesOnlyHostA: with a writer on A and one on B on the same
// image, blocklisting A's exact client address as client.libvirt (the
// documented caps) makes A's next write fail with EBLOCKLISTED (108) while
// B keeps writing.
func TestBlocklistFencesOnlyHostA(t *testing.T) {
	hs := testenv.StartHosts(t)
	c := testenv.StartCephNet(t)
	img := c.NewImage(t, "netns-fence")

	za := testenv.StartZombieOn(t, c, hs.A, img, "write")
	za.WaitWrite(t, true, 30*time.Second)
	zb := testenv.StartZombieOn(t, c, hs.B, img, "write")
	// both write in turns: the exclusive lock moves on request
	zb.WaitWrite(t, true, 30*time.Second)
	za.WaitWrite(t, true, 30*time.Second)

	t.Cleanup(func() {
		_ = exec.Command("ceph", "-c", c.AdminConf, "osd", "blocklist", "rm", za.Addr).Run()
	})
	c.AsLibvirt(t, "ceph", "osd", "blocklist", "add", za.Addr, "600")
	if _, ok := c.BlocklistEntries(t)[za.Addr]; !ok {
		t.Fatalf("%s is not in the blocklist: %v", za.Addr, c.BlocklistEntries(t))
	}
	// Only B's own client is checked: other tests share this cluster and
	// legitimately fence other clients on host B.
	if _, ok := c.BlocklistEntries(t)[zb.Addr]; ok {
		t.Fatalf("B's address %s is blocklisted", zb.Addr)
	}

	ev := za.WaitWrite(t, false, 30*time.Second)
	if ev.Errno != 108 {
		t.Fatalf("A's write after the blocklist failed with errno %d (%s), want 108", ev.Errno, ev.Error)
	}
	// B goes on: several successful writes after A was fenced, while A's
	// following writes fail too.
	for i := 0; i < 5; i++ {
		zb.WaitWrite(t, true, 60*time.Second)
	}
	next := za.WaitWrite(t, false, 10*time.Second)
	if next.N != ev.N+1 || next.Errno != 108 {
		t.Fatalf("A's write after #%d: #%d failed with errno %d (%s); want #%d with 108 (no success in between)",
			ev.N, next.N, next.Errno, next.Error, ev.N+1)
	}
	w := watchers(t, c, img)
	if has(w, za.Addr) || !has(w, zb.Addr) {
		t.Fatalf("watchers after fencing A: %v (A %s, B %s)", w, za.Addr, zb.Addr)
	}
}
