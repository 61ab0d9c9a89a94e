package cli_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// readmeCommands returns every command of the README, in order: each line
// of a ```sh block (its comment cut off) and each "$ " line of a plain
// ``` block (an example's command).
func readmeCommands(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	block := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```") && block == "":
			block = strings.TrimPrefix(line, "```") + "."
		case line == "```":
			block = ""
		case block == "sh.":
			if cmd := strings.TrimSpace(cutComment(line)); cmd != "" {
				out = append(out, cmd)
			}
		case block == "." && strings.HasPrefix(line, "$ "):
			out = append(out, strings.TrimPrefix(line, "$ "))
		}
	}
	if len(out) < 20 {
		t.Fatalf("only %d commands found in README.md: %q", len(out), out)
	}
	return out
}

// cutComment drops a shell comment: a # after a blank, outside quotes.
func cutComment(line string) string {
	quote := rune(0)
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' '):
			return line[:i]
		}
	}
	return line
}

// readmeTried says how a test tries each README command. "run": this test
// runs it (below); "test PATH TestName WORD...": that test runs it (the
// file holds the function and every word); "oned FILE TestName[/Subtest]
// WORD...": that test (or subtest) of test/oned, which drives a real oned
// in make test, runs it (the file holds the function, the subtest's name
// and every word); "not run: why" is said to the reader.
var readmeTried = []struct{ re, how string }{
	{`^rbdfence `, "run"},
	{`^rbd bench --id libvirt --io-type read `, "run"},
	{`^rados -p one ls \| grep '\^rbdfence\\\.'`, "run"},
	{`^for o in \$\(rados -p one ls \| grep '\^rbdfence\\\.vm\\\.'\); do .* > /tmp/rbdfence-claims$`, "run"},
	{`^xargs -r -n1 rados -p one rm < /tmp/rbdfence-claims$`, "run"},
	{`^rados -p one ls \| grep '\^rbdfence\\\.image\\\.' \| xargs -r -n1 rados -p one rm$`, "run"},
	{`^ceph osd blocklist (ls|rm [0-9.:/]+)$`, "run"},
	{`^ceph auth get-or-create client\.libvirt mon 'profile rbd' osd 'profile rbd pool=one'$`, "run"},
	{`^make demo$`, "run"},
	{`^make test$`, "test .ci/run - make test"},
	{`^apt install \./rbdfence_\*\.deb \./rbdfence-frontend_\*\.deb`, "test test/packaging/deb_test.go TestFrontendDeb rbdfence-frontend"},
	{`^apt install \./rbdfence_\*\.deb \./rbdfence-host_\*\.deb`, "test test/packaging/deb_test.go TestHostDeb rbdfence-host"},
	{`^rbdfence-onedconf --apply$`, "test test/packaging/deb_test.go TestFrontendDeb rbdfence-onedconf --apply"},
	{`^\./install\.sh frontend( --apply)?$`, "test test/frontend/install_test.go TestInstallFrontend frontend --apply"},
	{`^\./install\.sh host$`, "test test/hook/install_test.go TestInstallHostQemuD host"},
	{`^onehost sync --force$`, "test test/frontend/install_test.go TestInstallFrontend onehost sync --force"},
	{`^onehook (create /var/lib/one/remotes/hooks/rbdfence/host_error\.hook|list)$`, "oned hostfail_test.go TestHostFailures/HostErrorHookFencesAndReschedules onehook create list host_error.hook"},
	{`^onehook create /var/lib/one/remotes/hooks/rbdfence/(prolog|migrate)_ssh\.hook$`, "oned deploy_test.go TestDeployAndLiveMigrate/SSHHooks onehook create prolog_ssh.hook migrate_ssh.hook"},
	{`^onevm (show|poweroff|resume) 42`, "oned lifecycle_test.go TestPoweroffResume onevm show poweroff resume"},
	{`^systemctl restart (opennebula|libvirtd)$`, "not run: no test restarts the machine's oned or libvirtd; the tests start their own"},
}

func howTried(cmd string) (string, int) {
	how, n := "", 0
	for _, r := range readmeTried {
		if regexp.MustCompile(r.re).MatchString(cmd) {
			how, n = r.how, n+1
		}
	}
	return how, n
}

// TestREADMECommands: every command in the README is tried. Each matches
// exactly one rule of readmeTried and every rule some command; the
// commands of the "run" rules run here, on the real binaries and the test
// cluster, with the README's examples (VM 42, one/one-7-42-0, node3,
// 10.0.0.5:0/3021474917, the rbdfence-admin keyring) replaced by the
// test's own: none may be refused as bad usage (exit 2), and the
// walk-through's zombie (rbd bench) is found by check --vm and stopped by
// the fence.
func TestREADMECommands(t *testing.T) {
	cmds := readmeCommands(t)
	used := map[string]bool{}
	var run []string
	for _, cmd := range cmds {
		how, n := howTried(cmd)
		if n != 1 {
			t.Errorf("README command %q matches %d rules of readmeTried, want 1", cmd, n)
			continue
		}
		for _, r := range readmeTried {
			if regexp.MustCompile(r.re).MatchString(cmd) {
				used[r.re] = true
			}
		}
		switch f := strings.Fields(how); {
		case how == "run":
			run = append(run, cmd)
		case f[0] == "test":
			b, err := os.ReadFile(filepath.Join(testenv.Root(), f[1]))
			if err != nil {
				t.Errorf("%q: %v", cmd, err)
				continue
			}
			if f[2] != "-" && !regexp.MustCompile(`func `+f[2]+`\w*\(`).Match(b) {
				t.Errorf("%q: %s has no %s", cmd, f[1], f[2])
			}
			for _, w := range f[3:] {
				if !strings.Contains(string(b), w) {
					t.Errorf("%q: %s does not say %q", cmd, f[1], w)
				}
			}
		case f[0] == "oned":
			// test/oned (real oned, under the machine lock) is merged
			// from its own branch; when it is here, the test must be.
			if _, err := os.Stat(filepath.Join(testenv.Root(), "test/oned")); err != nil {
				t.Logf("README command %q: test/oned is not in this tree yet", cmd)
				continue
			}
			top, sub, _ := strings.Cut(f[2], "/")
			b, err := os.ReadFile(filepath.Join(testenv.Root(), "test/oned", f[1]))
			if err != nil || !strings.Contains(string(b), "func "+top+"(") || (sub != "" && !strings.Contains(string(b), `"`+sub+`"`)) {
				t.Errorf("%q: test/oned/%s has no %s (%v)", cmd, f[1], f[2], err)
				continue
			}
			for _, w := range f[3:] {
				if !strings.Contains(string(b), `"`+w+`"`) && !strings.Contains(string(b), "/"+w) {
					t.Errorf("%q: test/oned/%s does not say %q", cmd, f[1], w)
				}
			}
		default:
			t.Logf("README command %q: %s", cmd, how)
		}
	}
	for _, r := range readmeTried {
		if !used[r.re] {
			t.Errorf("readmeTried rule %q matches no README command: remove it", r.re)
		}
	}
	runREADME(t, run)
}

// readmeStime is the README's VM's STIME in the stand-in oned.
const readmeStime = 1764600000

func runREADME(t *testing.T, cmds []string) {
	c := testenv.StartCeph(t)
	img := c.NewImage(t, "readme")
	vm := newVMID()
	sim, cfg, _ := withOned(t, c, "readmepw")
	sim.PutHost(onedsim.Host{ID: 3, Name: "node3", State: onedsim.HostMonitored, LastMonitored: time.Now()})
	sim.Put(onedsim.VM{ID: vm, Name: "readme", Host: "node1", Seq: 1, State: onedsim.StatePoweroff, STime: readmeStime,
		Disks: []onedsim.Disk{{ID: 0, Source: img, Persistent: true, CephHost: c.Mon, CephUser: c.User, CephKey: c.Keyring}}})

	// An entry for the README's unfence and blocklist rm lines.
	zimg := c.NewImage(t, "readmez")
	z := testenv.StartZombie(t, c, zimg, "idle")
	if r := rbdfence(t, "", "fence", "--config", cfg, "--image", zimg); r.code != 0 {
		t.Fatalf("fence: exit %d %s", r.code, r.stderr)
	}
	ours := []string{"rbdfence.vm." + strconv.Itoa(vm), "rbdfence.image." + strings.TrimPrefix(img, c.Pool+"/")}
	// Another installation's VM of the same id (another STIME): the
	// undo must leave its claim.
	theirs := engine.ClaimObjectOf(vm, readmeStime+1)
	theirsFile := filepath.Join(t.TempDir(), "theirs.json")
	os.WriteFile(theirsFile, []byte(fmt.Sprintf(`{"vm":%d,"stime":%d,"host":"elsewhere"}`, vm, readmeStime+1)), 0o600)
	c.Admin(t, "rados", "-p", c.Pool, "put", theirs, theirsFile)
	t.Cleanup(func() { c.Admin(t, "rados", "-p", c.Pool, "rm", theirs) })
	claims := filepath.Join(t.TempDir(), "rbdfence-claims")
	subst := strings.NewReplacer("one/one-7-42-0", img, "/etc/ceph/ceph.client.rbdfence-admin.keyring", c.RMUserKeyring,
		"10.0.0.5:0/3021474917", z.Addr, "node2", "node3", "/tmp/rbdfence-claims", claims)
	vm42 := regexp.MustCompile(`\b42\b`)
	bin := filepath.Dir(testenv.Bin(t, "rbdfence"))
	// onevm show ID -j as this installation's oned answers it: our VM's
	// STIME, no other VM.
	onevm := filepath.Join(t.TempDir(), "onevm")
	os.WriteFile(onevm, []byte(fmt.Sprintf("#!/bin/sh\n[ \"$1 $2 $3\" = \"show %d -j\" ] || { echo \"[VirtualMachineInfo] Error getting virtual machine [$2].\" >&2; exit 255; }\necho '{\"VM\":{\"ID\":\"%[1]d\",\"STIME\":\"%d\"}}'\n", vm, readmeStime)), 0o755)
	env := append(os.Environ(), "PATH="+bin+":"+filepath.Dir(onevm)+":"+os.Getenv("PATH"), "RBDFENCE_CONFIG="+cfg, "CEPH_ARGS=-c "+c.AdminConf)

	var bench *exec.Cmd
	checks := 0
	for _, cmd := range cmds {
		line := vm42.ReplaceAllString(subst.Replace(cmd), strconv.Itoa(vm))
		switch {
		case line == "make demo":
			demo(t)
			continue
		case strings.HasPrefix(line, "rbd bench"):
			// The walk-through's zombie, as client.libvirt.
			bench = exec.Command("bash", "-c", strings.TrimSuffix(line, "&"))
			bench.Env = append(env, "CEPH_ARGS=-c "+c.Conf+" --keyring "+c.Keyring)
			if err := bench.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { bench.Process.Kill(); bench.Wait() })
			waitOpen(t, c, img)
			continue
		case strings.HasPrefix(line, "for o in"):
			// The README's claim reset emptied our claim (an empty object
			// stays, as the README says): the VM starts once more, so
			// that the undo finds a claim of this installation's VM.
			req := hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 3, Host: "node1", Run: "readme3", Source: "frontend", Stime: readmeStime,
				Disks: []vmdisk.Disk{disk(img)}}
			if r, resp := hostStep(t, cfg, req); r.code != 0 {
				t.Fatalf("the start before the undo: exit %d %+v", r.code, resp)
			}
		case strings.Contains(line, "| xargs"):
			// Removes only this test's objects: the pool is shared.
			line = strings.Replace(line, "| xargs", "| grep -Fx -e "+ours[0]+" -e "+ours[1]+" | xargs", 1)
		}
		var r result
		if strings.HasPrefix(line, "rbdfence unfence") && !strings.Contains(line, "--yes") {
			r = onPTY(t, env, line, "y\n") // it asks
		} else {
			r = shell(t, env, line)
		}
		t.Logf("%s: exit %d", line, r.code)
		if r.code == 2 || strings.Contains(r.stderr, "unknown flag") || strings.Contains(r.stderr, "unexpected argument") {
			t.Errorf("README command %q (run as %q): refused as bad usage, exit %d\n%s%s", cmd, line, r.code, r.stdout, r.stderr)
		}
		switch {
		case strings.HasPrefix(line, "rbdfence check --vm") && bench != nil && checks == 0:
			// Before the start: the bench client would be fenced.
			checks++
			if r.code != 5 || !strings.Contains(r.stdout, "would-fence") {
				t.Errorf("check --vm with the README's zombie: exit %d, want 5\n%s%s", r.code, r.stdout, r.stderr)
			}
			// The start (onevm resume: here its host step) fences the bench.
			req := hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 2, Host: "node1", Run: "readme", Source: "frontend", Stime: readmeStime,
				Disks: []vmdisk.Disk{disk(img)}}
			if r, resp := hostStep(t, cfg, req); r.code != 0 || resp.Report.Fenced != 1 {
				t.Fatalf("the start: exit %d %+v", r.code, resp)
			}
			// The VM runs: its instance opens the image and is recorded
			// (the claim and the image record rbdfence.image.<name>).
			testenv.StartZombie(t, c, img, "idle")
			req.Op = hoststep.OpRecord
			if r, resp := hostStep(t, cfg, req); r.code != 0 {
				t.Fatalf("the record: exit %d %+v", r.code, resp)
			}
			sim.Put(onedsim.VM{ID: vm, Name: "readme", Host: "node1", Seq: 2, STime: readmeStime,
				Disks: []onedsim.Disk{{ID: 0, Source: img, Persistent: true, CephHost: c.Mon, CephUser: c.User, CephKey: c.Keyring}}})
			done := make(chan error, 1)
			go func() { done <- bench.Wait() }()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("rbd bench went on to a clean end after its fence")
				}
			case <-time.After(2 * time.Minute):
				t.Errorf("rbd bench still runs two minutes after its fence")
			}
		case strings.HasPrefix(line, "rados -p one ls") && !strings.Contains(line, "xargs"):
			if !strings.Contains(r.stdout, ours[1]+"\n") {
				t.Errorf("%q does not list the image record %s:\n%s", line, ours[1], r.stdout)
			}
		case strings.HasPrefix(line, "for o in"):
			if b, _ := os.ReadFile(claims); r.code != 0 || string(b) != ours[0]+"\n" {
				t.Errorf("%q: exit %d, listed %q: want this installation's claim %s alone", line, r.code, b, ours[0])
			}
		case strings.Contains(line, "xargs"):
			// The claims' line removes our claim, the records' line our
			// image record; the other installation's claim stays.
			gone, kept := ours[:1], []string{ours[1], theirs}
			if strings.Contains(line, "image") {
				gone, kept = ours, []string{theirs}
			}
			out := c.Admin(t, "rados", "-p", c.Pool, "ls")
			for _, o := range gone {
				if r.code != 0 || strings.Contains(out, o+"\n") {
					t.Errorf("%q: exit %d, left %s in:\n%s", line, r.code, o, out)
				}
			}
			for _, o := range kept {
				if !strings.Contains(out, o+"\n") {
					t.Errorf("%q removed %s", line, o)
				}
			}
		case strings.HasPrefix(line, "ceph osd blocklist rm"):
			if _, ok := c.BlocklistEntries(t)[z.Addr]; ok || r.code != 0 {
				t.Errorf("%q: exit %d, the entry is still there", line, r.code)
			}
		}
	}
	if checks != 1 {
		t.Errorf("the walk-through's check --vm did not run (%d)", checks)
	}
}

func shell(t *testing.T, env []string, line string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	cmd.Env = env
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return r
}

// onPTY runs line on a terminal (script(1)) with answer typed in.
func onPTY(t *testing.T, env []string, line, answer string) result {
	t.Helper()
	cmd := exec.Command("script", "-qfec", line, "/dev/null")
	cmd.Env, cmd.Stdin = env, strings.NewReader(answer)
	out, err := cmd.CombinedOutput()
	r := result{stdout: string(out), stderr: string(out)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return r
}

// waitOpen waits until img has a watcher (the bench opened it).
func waitOpen(t *testing.T, c *testenv.Ceph, img string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if strings.Contains(c.AsLibvirt(t, "rbd", "status", "--format", "json", img), `"address"`) {
			return
		}
	}
	t.Fatalf("rbd bench did not open %s", img)
}

// demo runs the README's `make demo` body (the Makefile's demo target is
// the demo's packages, the CLI's build, then test/demo.sh: this test checks
// that and runs the script) in the test root, on the demo port: 16799, or, with a private
// RBDFENCE_CEPH_PORT, that port + 50.
func demo(t *testing.T) {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join(testenv.Root(), "Makefile"))
	if err != nil || !regexp.MustCompile(`(?m)^demo:\n\tbash test/deps.sh --demo\n\t@mkdir -p \$\(BIN\)\n\t\$\(GO\) build \$\(GOFLAGS_CGO\) -o \$\(BIN\)/ ./cmd/rbdfence\n\tbash test/demo.sh$`).Match(mk) {
		t.Fatalf("the Makefile's demo target is not the demo's packages (deps.sh --demo), the CLI's build, then 'bash test/demo.sh' (%v)", err)
	}
	port := "16799"
	if p, err := strconv.Atoi(os.Getenv("RBDFENCE_CEPH_PORT")); err == nil {
		port = strconv.Itoa(p + 50)
	}
	cmd := exec.Command("bash", "test/demo.sh") // bin/ as make test builds it
	cmd.Dir = testenv.Root()
	cmd.Env = append(os.Environ(), "RBDFENCE_DEMO_DIR="+testenv.Dir("demo"), "RBDFENCE_DEMO_PORT="+port)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Demo done: the zombie was fenced") {
		t.Errorf("make demo (test/demo.sh): %v\n%s", err, out)
	}
	if _, err := os.Stat(testenv.Dir("demo")); err == nil {
		if b, _ := exec.Command("bash", filepath.Join(testenv.Root(), "test/ceph/cluster.sh"), "status", "--dir", testenv.Dir("demo")).CombinedOutput(); strings.Contains(string(b), "up") {
			t.Errorf("the demo left its cluster up: %s", b)
		}
	}
}
