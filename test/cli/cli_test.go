// Package cli_test runs the built rbdfence binary through its real contract
// against the real test cluster, as client.libvirt with the documented caps.
package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/checkjson"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/metrics"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

type result struct {
	code   int
	stdout string
	stderr string
	took   time.Duration
}

// writeConfig writes a config for client.libvirt with a private audit log.
// fenceExtra is added under "fence:".
func writeConfig(t *testing.T, c *testenv.Ceph, fenceExtra string) (cfgPath, auditPath string) {
	t.Helper()
	dir := t.TempDir()
	auditPath = filepath.Join(dir, "audit.log")
	cfg := fmt.Sprintf(`ceph:
  mon_host: %s
  user: %s
  keyring: %s
timeouts:
  connect: 5s
  ceph_op: 10s
fence:
  expire: 2h
%saudit_log: %s
spool_dir: %s
state_dir: %s
`, c.Mon, c.User, c.Keyring, fenceExtra, auditPath, filepath.Join(dir, "spool"), filepath.Join(dir, "state"))
	cfgPath = filepath.Join(dir, "rbdfence.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, auditPath
}

// withOned starts the oned stand-in (user oneadmin, password pass) and
// writes a config for client.libvirt that reaches it.
func withOned(t *testing.T, c *testenv.Ceph, pass string) (sim *onedsim.Sim, cfg, auth string) {
	t.Helper()
	sim = onedsim.New("oneadmin:" + pass)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	auth = filepath.Join(t.TempDir(), "one_auth")
	os.WriteFile(auth, []byte("oneadmin:"+pass+"\n"), 0o600)
	cfg, _ = writeConfig(t, c, "")
	b, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, append(b, []byte("opennebula:\n  endpoint: "+sim.URL()+"\n  auth_file: "+auth+"\n")...), 0o600)
	return sim, cfg, auth
}

func rbdfence(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runBin(t, "rbdfence", stdin, args...)
}

// runBin runs one of the built binaries (bin/NAME) with stdin and args.
func runBin(t *testing.T, name, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, testenv.Bin(t, name), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "goroutine ") {
		t.Fatalf("%s %v panicked:\n%s", name, args, r.stderr)
	}
	return r
}

// report decodes the --json output of check or fence: the documented
// type (internal/checkjson), strictly.
func report(t *testing.T, s string) checkjson.Check {
	t.Helper()
	var r checkjson.Check
	decodeStrict(t, s, &r)
	return r
}

// decodeStrict decodes --json output s into v: no field v does not know,
// and none of v's fields left out (false, empty and null are printed).
func decodeStrict(t *testing.T, s string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("--json output is not the documented type %T: %v\n%s", v, err, s)
	}
	var raw, typed any
	b, _ := json.Marshal(v)
	if json.Unmarshal([]byte(s), &raw) != nil || json.Unmarshal(b, &typed) != nil {
		t.Fatalf("--json output does not parse:\n%s", s)
	}
	if missing := missingKeys(typed, raw, ""); len(missing) > 0 {
		t.Fatalf("--json output leaves out %v:\n%s", missing, s)
	}
}

// missingKeys lists the object keys of want that got lacks, by path.
func missingKeys(want, got any, path string) []string {
	var out []string
	switch w := want.(type) {
	case map[string]any:
		g, _ := got.(map[string]any)
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				out = append(out, path+"."+k)
				continue
			}
			out = append(out, missingKeys(wv, gv, path+"."+k)...)
		}
	case []any:
		g, _ := got.([]any)
		for i := range min(len(w), len(g)) {
			out = append(out, missingKeys(w[i], g[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	return out
}

func TestFenceWritingZombie(t *testing.T) {
	c := testenv.StartCeph(t)
	cfg, auditLog := writeConfig(t, c, "")
	img := c.NewImage(t, "writer")
	z := testenv.StartZombie(t, c, img, "write")
	z.WaitWrite(t, true, 10*time.Second)

	// check: reports the zombie, changes nothing, exit 5.
	before := c.BlocklistEntries(t)
	r := rbdfence(t, "", "check", "--config", cfg, "--image", img, "--json")
	if r.code != 5 {
		t.Fatalf("check with a zombie: exit %d, want 5\n%s%s", r.code, r.stdout, r.stderr)
	}
	rep := report(t, r.stdout)
	cl := rep.Images[0].Clients
	if len(cl) != 1 || cl[0].Address != z.Addr || !cl[0].Locker || !cl[0].Watcher || cl[0].Action != engine.ActWouldFence {
		t.Fatalf("check must show the zombie %s as locker+watcher, would-fence: %+v", z.Addr, cl)
	}
	if _, ok := c.BlocklistEntries(t)[z.Addr]; ok || len(c.BlocklistEntries(t)) != len(before) {
		t.Fatal("check must not blocklist")
	}
	z.WaitWrite(t, true, 5*time.Second) // still writing after check

	// fence: blocklists the exact address with the configured expiry, breaks the lock.
	r = rbdfence(t, "", "fence", "--config", cfg, "--image", img, "--json")
	if r.code != 0 {
		t.Fatalf("fence: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	rep = report(t, r.stdout)
	if rep.Fenced != 1 || rep.Images[0].Clients[0].Action != engine.ActUnlocked {
		t.Fatalf("fence report: %+v", rep)
	}
	ev := z.WaitWrite(t, false, 5*time.Second)
	if ev.Errno != 108 {
		t.Fatalf("the zombie's next write must fail with 108 (blocklisted), got errno %d: %s", ev.Errno, ev.Error)
	}
	exp, ok := c.BlocklistEntries(t)[z.Addr]
	if !ok {
		t.Fatalf("blocklist has no entry for the exact address %s", z.Addr)
	}
	until, err := time.Parse("2006-01-02T15:04:05.000000-0700", exp)
	if err != nil {
		until, err = time.Parse("2006-01-02T15:04:05.999999-0700", exp)
	}
	if err != nil {
		t.Fatalf("blocklist expiry %q: %v", exp, err)
	}
	if d := time.Until(until); d < 115*time.Minute || d > 125*time.Minute {
		t.Fatalf("blocklist expiry in %s, want the configured 2h", d)
	}
	if out := c.AsLibvirt(t, "rbd", "lock", "ls", "--format", "json", img); strings.TrimSpace(out) != "[]" {
		t.Fatalf("lock still held after fence: %s", out)
	}
	data, err := os.ReadFile(auditLog)
	if err != nil || !strings.Contains(string(data), z.Addr) || !strings.Contains(string(data), `"action":"blocklisted+unlocked"`) {
		t.Fatalf("audit log must hold the fence: %v\n%s", err, data)
	}
	// A CLI fence is for no VM: the line has no "vm" at all, no -1
	// (issue 30 item 4).
	var line map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(data), &line); err != nil {
		t.Fatalf("audit line: %v\n%s", err, data)
	}
	if v, ok := line["vm"]; ok {
		t.Fatalf("the audit line of a CLI fence has \"vm\": %v; fields that do not apply are absent:\n%s", v, data)
	}
	if !strings.Contains(r.stderr, "fenced client") || !strings.Contains(r.stderr, z.Addr) {
		t.Fatalf("stderr must log the fence:\n%s", r.stderr)
	}

	// Idempotent: a second fence finds nothing and succeeds.
	r = rbdfence(t, "", "fence", "--config", cfg, "--image", img, "--json")
	if r.code != 0 || report(t, r.stdout).Fenced != 0 {
		t.Fatalf("second fence: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestFenceIdleZombie(t *testing.T) {
	c := testenv.StartCeph(t)
	cfg, _ := writeConfig(t, c, "")
	img := c.NewImage(t, "idle")
	z := testenv.StartZombie(t, c, img, "idle")
	r := rbdfence(t, "", "fence", "--config", cfg, "--image", img, "--json")
	if r.code != 0 {
		t.Fatalf("fence: exit %d\n%s", r.code, r.stderr)
	}
	cl := report(t, r.stdout).Images[0].Clients
	if len(cl) != 1 || cl[0].Address != z.Addr || cl[0].Locker || !cl[0].Watcher || cl[0].Action != engine.ActBlocklisted {
		t.Fatalf("the idle zombie (watcher only) must be fenced: %+v", cl)
	}
	if _, ok := c.BlocklistEntries(t)[z.Addr]; !ok {
		t.Fatal("idle zombie not blocklisted")
	}
}

func TestCleanImageAddsNothing(t *testing.T) {
	c := testenv.StartCeph(t)
	cfg, _ := writeConfig(t, c, "")
	img := c.NewImage(t, "clean")
	before := c.BlocklistEntries(t)
	for _, verb := range []string{"check", "fence"} {
		r := rbdfence(t, "", verb, "--config", cfg, "--image", img)
		if r.code != 0 || !strings.Contains(r.stdout, "clean") {
			t.Fatalf("%s on a clean image: exit %d\n%s%s", verb, r.code, r.stdout, r.stderr)
		}
	}
	after := c.BlocklistEntries(t)
	for a := range after {
		if _, ok := before[a]; !ok {
			t.Fatalf("a clean image added blocklist entry %s", a)
		}
	}
}

func TestAllowlistedReportedNotFenced(t *testing.T) {
	c := testenv.StartCeph(t)
	ip, _, _ := strings.Cut(c.Mon, ":")
	cfg, _ := writeConfig(t, c, "  allow: [\""+ip+"/32\"]\n")
	img := c.NewImage(t, "allow")
	z := testenv.StartZombie(t, c, img, "write")
	z.WaitWrite(t, true, 10*time.Second)
	r := rbdfence(t, "", "fence", "--config", cfg, "--image", img, "--json")
	if r.code != 0 {
		t.Fatalf("fence: exit %d\n%s", r.code, r.stderr)
	}
	cl := report(t, r.stdout).Images[0].Clients
	if len(cl) != 1 || cl[0].Decision != engine.DecideAllowlisted || cl[0].Action != engine.ActNone {
		t.Fatalf("allowlisted client must be reported, not fenced: %+v", cl)
	}
	if _, ok := c.BlocklistEntries(t)[z.Addr]; ok {
		t.Fatal("allowlisted client was blocklisted")
	}
	z.WaitWrite(t, true, 5*time.Second)
}

func hostStep(t *testing.T, cfg string, req hoststep.Request) (result, hoststep.Response) {
	t.Helper()
	b, _ := json.Marshal(req)
	r := rbdfence(t, string(b), "host", "--config", cfg)
	var resp hoststep.Response
	if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil {
		t.Fatalf("host step output is not a response: %v\n%s\n%s", err, r.stdout, r.stderr)
	}
	return r, resp
}

func disk(spec string) vmdisk.Disk {
	pool, name, _ := strings.Cut(spec, "/")
	return vmdisk.Disk{ID: "0", Pool: pool, Name: name}
}

var vmSeq struct {
	sync.Mutex
	n int
}

func newVMID() int {
	vmSeq.Lock()
	defer vmSeq.Unlock()
	vmSeq.n++
	return int(time.Now().Unix()%100000)*100 + vmSeq.n
}

func TestConcurrentClaimsOneWins(t *testing.T) {
	c := testenv.StartCeph(t)
	cfg, _ := writeConfig(t, c, "")
	img := c.NewImage(t, "race")
	testenv.StartZombie(t, c, img, "idle") // makes the winner's fence take a while
	vm := newVMID()
	var wg sync.WaitGroup
	res := make([]hoststep.Response, 2)
	codes := make([]int, 2)
	hosts := []string{"hostA", "hostB"}
	for i := range hosts {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, resp := hostStep(t, cfg, hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 1, Host: hosts[i], Run: hosts[i], Source: "frontend", Disks: []vmdisk.Disk{disk(img)}})
			res[i], codes[i] = resp, r.code
		}(i)
	}
	wg.Wait()
	wins := 0
	for i := range res {
		if res[i].OK {
			wins++
			continue
		}
		other := hosts[1-i]
		if res[i].Kind != outcome.Refused || codes[i] != 4 || !strings.Contains(res[i].Error, other) {
			t.Fatalf("the loser must be refused (exit 4) naming the winner %s: exit %d %+v", other, codes[i], res[i])
		}
	}
	if wins != 1 {
		t.Fatalf("exactly one start must win, %d did: %+v", wins, res)
	}
}

func TestClaimNewerDeployAndRecordedAddress(t *testing.T) {
	c := testenv.StartCeph(t)
	cfg, _ := writeConfig(t, c, "")
	img := c.NewImage(t, "claim")
	vm := newVMID()
	req := func(op string, seq int, host string) hoststep.Request {
		return hoststep.Request{Op: op, VM: vm, Seq: seq, Host: host, Run: fmt.Sprint(host, seq), Source: "frontend", Disks: []vmdisk.Disk{disk(img)}}
	}
	if r, resp := hostStep(t, cfg, req(hoststep.OpStart, 5, "hostA")); r.code != 0 || !resp.OK {
		t.Fatalf("start deploy 5: exit %d %+v", r.code, resp)
	}
	// The instance of deploy 5 runs (a real client) and is recorded.
	inst := testenv.StartZombie(t, c, img, "idle")
	if r, resp := hostStep(t, cfg, req(hoststep.OpRecord, 5, "hostA")); r.code != 0 || resp.Claim == nil || len(resp.Claim.Addrs) != 1 || resp.Claim.Addrs[0].String() != inst.Addr {
		t.Fatalf("record: exit %d %+v", r.code, resp)
	}
	// An older deploy elsewhere is refused and fences nothing.
	r, resp := hostStep(t, cfg, req(hoststep.OpStart, 4, "hostB"))
	if r.code != 4 || resp.Kind != outcome.Refused || !strings.Contains(resp.Error, "hostA") {
		t.Fatalf("older deploy must be refused naming hostA: exit %d %+v", r.code, resp)
	}
	if _, ok := c.BlocklistEntries(t)[inst.Addr]; ok {
		t.Fatal("a refused start fenced the running instance")
	}
	// The instance goes invisible (its host is cut off; here: it closes its
	// image). Deploy 6 elsewhere still blocklists its recorded address.
	inst.Stop()
	r, resp = hostStep(t, cfg, req(hoststep.OpStart, 6, "hostB"))
	if r.code != 0 || !resp.OK {
		t.Fatalf("deploy 6: exit %d %+v", r.code, resp)
	}
	if len(resp.Report.Recorded) != 1 || resp.Report.Recorded[0].Address != inst.Addr {
		t.Fatalf("recorded address not fenced: %+v", resp.Report)
	}
	if _, ok := c.BlocklistEntries(t)[inst.Addr]; !ok {
		t.Fatalf("recorded address %s not in the blocklist", inst.Addr)
	}
	if len(resp.Audit) != 1 || resp.Audit[0].Address != inst.Addr {
		t.Fatalf("the response must carry the audit record: %+v", resp.Audit)
	}
}

func TestBadInput(t *testing.T) {
	c := testenv.StartCeph(t)
	cfg, _ := writeConfig(t, c, "")
	dir := t.TempDir()
	badCfg := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badCfg, []byte("fence:\n  expire: soon\n"), 0o600)
	unknownCfg := filepath.Join(dir, "unknown.yaml")
	os.WriteFile(unknownCfg, []byte("ceph:\n  mon_hosts: 1.2.3.4\n"), 0o600)
	badKey := filepath.Join(dir, "bad.keyring")
	os.WriteFile(badKey, []byte("[client.libvirt]\n\tkey = AQBnP0hlAAAAABAAq8bD4W0KQd1Iem1Hh7mYgg==\n"), 0o600)
	missing := c.Pool + "/does-not-exist"
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
		max  time.Duration
	}{
		// A check is not a fence: it never says "fence incomplete".
		{"missing image", []string{"check", "--config", cfg, "--image", missing}, 1, "check incomplete (1 problem(s)): image " + missing + " does not exist", time.Minute},
		{"missing image, fence", []string{"fence", "--config", cfg, "--image", missing}, 1, "fence incomplete (1 problem(s)): image " + missing + " does not exist", time.Minute},
		{"bad image spec", []string{"check", "--config", cfg, "--image", "noslash"}, 2, "noslash", time.Minute},
		{"no image", []string{"fence", "--config", cfg}, 2, "--image", time.Minute},
		{"unknown verb", []string{"frobnicate"}, 2, "frobnicate", time.Minute},
		{"bad value names the key", []string{"check", "--config", badCfg, "--image", missing}, 2, "fence.expire", time.Minute},
		{"unknown key names the key", []string{"check", "--config", unknownCfg, "--image", missing}, 2, "mon_hosts", time.Minute},
		{"missing explicit config", []string{"check", "--config", filepath.Join(dir, "nope.yaml"), "--image", missing}, 2, "nope.yaml", time.Minute},
		{"wrong monitor within the timeout", []string{"check", "--config", cfg, "--mon-host", "127.0.0.1:1", "--image", missing}, 3, "timed out", 10 * time.Second},
		// The monitor as a production ceph.conf names it (v1: on a port
		// other than 6789; the test cluster runs on 16789): a bad key is then
		// refused at once. A bare IP:PORT on such a port tries msgr2 first,
		// and a refused key reads as a timeout (README, troubleshooting).
		{"bad key", []string{"check", "--config", cfg, "--mon-host", c.MonHost, "--keyring", badKey, "--image", missing}, 3, "refused client.libvirt", 10 * time.Second},
		// librados alone says "rados: ret=-22" and prints "server name not found" on stdout.
		{"unresolvable monitor name", []string{"check", "--config", cfg, "--mon-host", "nosuchmon.invalid:6789", "--image", missing}, 3, "cannot resolve monitor host nosuchmon.invalid", 10 * time.Second},
		{"unresolvable monitor name, v1: form", []string{"fence", "--config", cfg, "--mon-host", "v1:nosuchmon.invalid:16789", "--image", missing}, 3, "cannot resolve monitor host nosuchmon.invalid", 10 * time.Second},
		// The one* habits: flags named with two dashes, the fix said.
		{"unknown flag", []string{"check", "--config", cfg, "--imgae", missing}, 2, "unknown flag: --imgae (try: rbdfence check --help)", time.Minute},
		{"single-dash long flag", []string{"check", "-config", cfg, "--image", missing}, 2, "-config: long flags take two dashes: --config", time.Minute},
		{"not a number", []string{"check", "--config", cfg, "--vm", "web"}, 2, `--vm "web": want a whole number`, time.Minute},
		{"flag without its value", []string{"fence", "--config", cfg, "--image"}, 2, "flag needs an argument: --image", time.Minute},
		{"stray argument", []string{"fence", "--config", cfg, "one/x"}, 2, `unexpected argument "one/x"`, time.Minute},
		{"verb flag before the verb", []string{"--image", missing, "check"}, 2, "--image before the verb: not a common flag", time.Minute},
		{"common flag before the verb", []string{"--config", badCfg, "check", "--image", missing}, 2, "fence.expire", time.Minute},
		{"--vm and --all", []string{"check", "--config", cfg, "--vm", "1", "--all"}, 2, "give one of --image, --vm or --all", time.Minute},
		{"fence --vm", []string{"fence", "--config", cfg, "--vm", "1"}, 2, "--vm and --all are for check only", time.Minute},
		{"bad --quiet", []string{"fence-host", "--config", cfg, "--host", "h", "--quiet", "-5m"}, 2, "--quiet must not be negative", time.Minute},
		{"bad --host-addr", []string{"fence-host", "--config", cfg, "--host", "h", "--host-addr", "node1"}, 2, `--host-addr "node1" is not an IP address`, time.Minute},
		{"bad --since", []string{"events", "--config", cfg, "--since", "42"}, 2, "--since: a bare number is ambiguous", time.Minute},
		{"bad --role", []string{"doctor", "--config", cfg, "--role", "both"}, 2, "--role must be auto, host, frontend or all", time.Minute},
		{"unfence, not an address", []string{"unfence", "10.0.0.5", "--config", cfg, "--yes"}, 2, "not an exact client address ip:port/nonce", time.Minute},
		{"unfence, two targets", []string{"unfence", "--config", cfg, "--vm", "1", "--host", "h"}, 2, "exactly one of ADDRESS, --vm ID or --host NAME", time.Minute},
		{"claim without sub-verb", []string{"claim", "--config", cfg}, 2, "claim: want 'claim show --vm ID'", time.Minute},
		{"claim show without --vm", []string{"claim", "show", "--config", cfg}, 2, "claim show: give --vm ID", time.Minute},
		{"blocklist without ls", []string{"blocklist", "rm"}, 2, "blocklist: want 'blocklist ls", time.Minute},
		{"fence-host, garbage on stdin", []string{"fence-host", "--config", cfg}, 2, "or give --host NAME", time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rbdfence(t, "", tc.args...)
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || len(lines) != 1 {
				t.Fatalf("exit %d (want %d), stderr must be one line containing %q:\n%s", r.code, tc.code, tc.want, r.stderr)
			}
			if r.took > tc.max {
				t.Fatalf("took %s, bound %s", r.took, tc.max)
			}
			if strings.Contains(r.stderr, "AQ") {
				t.Fatal("stderr leaks key material")
			}
		})
	}
	// Every verb answers --help on stdout, exit 0; an unresolvable monitor
	// prints nothing on stdout either (librados would: the host step's channel).
	for _, args := range [][]string{{"check", "--help"}, {"claim", "gc", "-h"}, {"help", "fence-host"}, {"claim", "--help"}} {
		r := rbdfence(t, "", args...)
		if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "usage: rbdfence ") {
			t.Errorf("rbdfence %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := rbdfence(t, "", "check", "--config", cfg, "--mon-host", "nosuchmon.invalid", "--image", missing); r.stdout != "" {
		t.Errorf("stdout %q", r.stdout)
	}
	// fence-host without --host on a terminal (a pty made by script(1))
	// says what it waits for; stdin at its end, it stops with exit 2.
	pty := exec.Command("script", "-qfec", testenv.Bin(t, "rbdfence")+" fence-host --config "+cfg, "/dev/null")
	pty.Stdin = strings.NewReader("")
	out, err := pty.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "reading the host's XML, base64, from stdin") {
		t.Errorf("fence-host on a terminal: %v\n%s", err, out)
	}
	t.Run("host step garbage", func(t *testing.T) {
		r := rbdfence(t, "{not json", "host", "--config", cfg)
		var resp hoststep.Response
		if r.code != 2 || json.Unmarshal([]byte(r.stdout), &resp) != nil || resp.Kind != outcome.Usage {
			t.Fatalf("garbage request: exit %d stdout %q", r.code, r.stdout)
		}
	})
}

func TestBlocklistLsAndUnfence(t *testing.T) {
	c := testenv.StartCeph(t)
	cfg, _ := writeConfig(t, c, "")
	img := c.NewImage(t, "unfence")
	vm := newVMID()
	z := testenv.StartZombie(t, c, img, "write")
	z.WaitWrite(t, true, 10*time.Second)
	if r, resp := hostStep(t, cfg, hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 1, Host: "hostA", Run: "u1", Source: "frontend", Disks: []vmdisk.Disk{disk(img)}}); r.code != 0 || resp.Report.Fenced != 1 {
		t.Fatalf("start: exit %d %+v", r.code, resp)
	}
	r := rbdfence(t, "", "blocklist", "ls", "--config", cfg, "--json")
	var es []struct {
		Address string `json:"address"`
		VM      int    `json:"vm"`
		Image   string `json:"image"`
		Ours    bool   `json:"ours"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &es); err != nil || r.code != 0 {
		t.Fatalf("blocklist ls: exit %d %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	found := false
	for _, e := range es {
		if e.Address == z.Addr {
			found = e.VM == vm && e.Image == img && e.Ours
		}
	}
	if !found {
		t.Fatalf("blocklist ls must show %s with VM %d and image %s: %+v", z.Addr, vm, img, es)
	}
	// A fence of no VM (rbdfence fence): "vm": null, never a -1.
	img2 := c.NewImage(t, "unfence2")
	z2 := testenv.StartZombie(t, c, img2, "idle")
	if r := rbdfence(t, "", "fence", "--config", cfg, "--image", img2); r.code != 0 {
		t.Fatalf("fence: exit %d %s", r.code, r.stderr)
	}
	r = rbdfence(t, "", "blocklist", "ls", "--config", cfg, "-j")
	var raw []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil || strings.Contains(r.stdout, `"vm": -1`) {
		t.Fatalf("blocklist ls -j: %v\n%s", err, r.stdout)
	}
	for _, e := range raw {
		if v, ok := e["vm"]; e["address"] == z2.Addr && (!ok || v != nil) {
			t.Fatalf("the entry of a fence of no VM: %v", e)
		}
	}
	if r = rbdfence(t, "", "blocklist", "ls", "--config", cfg); strings.Contains(r.stdout, " -1 ") {
		t.Fatalf("blocklist ls:\n%s", r.stdout)
	}
	// Without a terminal and without --yes nothing is removed.
	r = rbdfence(t, "", "unfence", z.Addr, "--config", cfg)
	if r.code != 2 || !strings.Contains(r.stderr, "--yes") {
		t.Fatalf("unfence without --yes: exit %d %s", r.code, r.stderr)
	}
	// client.libvirt lacks the rm cap: a clear message naming it.
	r = rbdfence(t, "", "unfence", "--vm", fmt.Sprint(vm), "--yes", "--config", cfg)
	if r.code != 3 || !strings.Contains(r.stderr, "blocklistop=rm") {
		t.Fatalf("unfence as client.libvirt: exit %d, want 3 naming the cap: %s", r.code, r.stderr)
	}
	if _, ok := c.BlocklistEntries(t)[z.Addr]; !ok {
		t.Fatal("the entry must still be there")
	}
	r = rbdfence(t, "", "unfence", "--vm", fmt.Sprint(vm), "--yes", "--config", cfg, "--id", c.RMUser, "--keyring", c.RMUserKeyring)
	if r.code != 0 || !strings.Contains(r.stdout, z.Addr) {
		t.Fatalf("unfence with the rm user: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, ok := c.BlocklistEntries(t)[z.Addr]; ok {
		t.Fatal("entry not removed")
	}
	r = rbdfence(t, "", "unfence", z2.Addr, "--yes", "--config", cfg, "--id", c.RMUser, "--keyring", c.RMUserKeyring)
	if r.code != 0 || !strings.Contains(r.stdout, "unfenced "+z2.Addr+" (added by rbdfence fence for host ") || strings.Contains(r.stdout, "VM -1") {
		t.Fatalf("unfence of a fence of no VM: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestMetricsScriptedRun(t *testing.T) {
	c := testenv.StartCeph(t)
	prom := filepath.Join(t.TempDir(), "rbdfence.prom")
	cfg, _ := writeConfig(t, c, "")
	b, _ := os.ReadFile(cfg)
	os.WriteFile(cfg, append(b, []byte("metrics: "+prom+"\n")...), 0o600)
	clean := c.NewImage(t, "mclean")
	dirty := c.NewImage(t, "mdirty")
	testenv.StartZombie(t, c, dirty, "idle")
	vm := newVMID()
	rbdfence(t, "", "check", "--config", cfg, "--image", clean)
	rbdfence(t, "", "check", "--config", cfg, "--image", clean, "--image", dirty)
	rbdfence(t, "", "fence", "--config", cfg, "--image", dirty)
	hostStep(t, cfg, hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 3, Host: "hostA", Run: "m1", Source: "frontend", Disks: []vmdisk.Disk{disk(clean)}})
	hostStep(t, cfg, hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 2, Host: "hostB", Run: "m2", Source: "frontend", Disks: []vmdisk.Disk{disk(clean)}})
	rbdfence(t, "", "check", "--config", cfg, "--mon-host", "127.0.0.1:1", "--image", clean)

	mfs, err := metrics.Read(prom)
	if err != nil {
		t.Fatalf("metrics file must parse with the Prometheus text parser: %v", err)
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{metrics.Runs, map[string]string{"op": "check"}, 3},
		{metrics.Images, map[string]string{"op": "check"}, 3},
		{metrics.Runs, map[string]string{"op": "fence"}, 1},
		{metrics.Fences, map[string]string{"op": "fence"}, 1},
		{metrics.Runs, map[string]string{"op": "host_start"}, 2},
		{metrics.Refusals, map[string]string{"op": "host_start"}, 1},
		{metrics.Errors, map[string]string{"op": "host_start", "kind": "refused"}, 1},
		{metrics.Errors, map[string]string{"op": "check", "kind": "ceph"}, 1},
		{metrics.LastOK, map[string]string{"op": "fence"}, 1},
		{metrics.Durations, map[string]string{"op": "check"}, 3},
	} {
		if got, ok := metrics.Value(mfs, tc.name, tc.labels); !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
}
