package security_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/libvirt"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

const onedPassword = "S3cr3t-oned-pass"

type env struct {
	c      *testenv.Ceph
	sim    *onedsim.Sim
	dir    string
	cfg    string
	output bytes.Buffer // every stdout and stderr of every run
}

func setup(t *testing.T) *env {
	c := testenv.StartCeph(t)
	e := &env{c: c, dir: t.TempDir(), sim: onedsim.New("oneadmin:" + onedPassword)}
	if err := e.sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.sim.Close() })
	auth := filepath.Join(e.dir, "one_auth")
	os.WriteFile(auth, []byte("oneadmin:"+onedPassword+"\n"), 0o600)
	e.cfg = e.config(t, "cfg.yaml", c.Mon, c.Keyring, e.sim.URL())
	return e
}

func (e *env) config(t *testing.T, name, mon, keyring, endpoint string) string {
	p := filepath.Join(e.dir, name)
	os.WriteFile(p, []byte(fmt.Sprintf(`ceph:
  mon_host: %s
  user: %s
  keyring: %s
timeouts:
  connect: 3s
  oned: 2s
audit_log: %s/log/audit.log
spool_dir: %s/spool
state_dir: %s/state
metrics: %s/metrics.prom
host_name: sechost
opennebula:
  endpoint: %s
  auth_file: %s/one_auth
`, mon, e.c.User, keyring, e.dir, e.dir, e.dir, e.dir, endpoint, e.dir)), 0o600)
	return p
}

func (e *env) run(t *testing.T, stdin, bin string, args ...string) int {
	cmd := exec.Command(testenv.Bin(t, bin), args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = &e.output, &e.output
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

// keySecrets returns the base64 keys of every keyring of the test cluster.
func keySecrets(t *testing.T, c *testenv.Ceph) []string {
	var out []string
	for _, p := range []string{c.Keyring, c.AdminKeyring, c.RMUserKeyring} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`key = (\S+)`).FindAllStringSubmatch(string(b), -1) {
			out = append(out, m[1])
		}
	}
	if len(out) < 3 {
		t.Fatalf("found %d keys", len(out))
	}
	return out
}

// TestNoSecretsAnywhere runs fences, claims, refusals and failures, then
// scans everything rbdfence wrote (stdout, stderr, audit log, spool, metrics,
// what oned received) for key material and the oned password.
func TestNoSecretsAnywhere(t *testing.T) {
	e := setup(t)
	c := e.c
	img := c.NewImage(t, "sec")
	pool, name, _ := strings.Cut(img, "/")
	const vm = 5150
	e.sim.Put(onedsim.VM{ID: vm, Host: "sechost", Seq: 1})
	z := testenv.StartZombie(t, c, img, "write")
	z.WaitWrite(t, true, 10*time.Second)
	req, _ := json.Marshal(hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 1, Host: "sechost", Run: "sec1", Source: "hook",
		Disks: []vmdisk.Disk{{ID: "0", Pool: pool, Name: name}}})
	if code := e.run(t, string(req), "rbdfence", "host", "--config", e.cfg); code != 0 {
		t.Fatalf("host step: %d\n%s", code, e.output.String())
	}
	badKey := filepath.Join(e.dir, "bad.keyring")
	os.WriteFile(badKey, []byte("[client.libvirt]\n\tkey = AQBnP0hlAAAAABAAq8bD4W0KQd1Iem1Hh7mYgg==\n"), 0o600)
	// MonHost names the monitor's v1 address, so a bad key is refused at once
	// (a bare IP:PORT on a non-default port reads a refusal as a timeout).
	e.run(t, "", "rbdfence", "check", "--config", e.config(t, "badkey.yaml", c.MonHost, badKey, e.sim.URL()), "--image", img)
	e.run(t, "", "rbdfence", "check", "--config", e.config(t, "deadmon.yaml", "127.0.0.1:1", c.Keyring, e.sim.URL()), "--image", img)
	e.run(t, "", "rbdfence", "check", "--config", e.cfg, "--vm", fmt.Sprint(vm))
	e.run(t, "", "rbdfence", "events", "--config", e.config(t, "deadoned.yaml", c.Mon, c.Keyring, "http://127.0.0.1:1/RPC2"))
	e.run(t, "", "rbdfence", "doctor", "--config", e.cfg, "--role", "all", "--root", e.dir)
	e.run(t, "", "rbdfence", "unfence", z.Addr, "--yes", "--config", e.cfg)
	xml := libvirttest.DomainXML(fmt.Sprintf("one-%d", vm), "kvm", []libvirttest.RBDDisk{{Image: img, Mon: c.Mon, User: c.User, SecretUUID: "5b2f3a0e-6a5e-4d0e-9b66-0f1e8c4f6d21"}})
	e.run(t, xml, "rbdfence-hook", "--config", e.cfg, fmt.Sprintf("one-%d", vm), "prepare", "begin", "-")
	e.run(t, xml, "rbdfence-hook", "--config", e.config(t, "hookbad.yaml", c.Mon, badKey, e.sim.URL()), fmt.Sprintf("one-%d", vm), "prepare", "begin", "-")

	corpus := e.output.String()
	filepath.Walk(e.dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && !strings.HasSuffix(p, ".keyring") && !strings.HasSuffix(p, ".yaml") && filepath.Base(p) != "one_auth" {
			b, _ := os.ReadFile(p)
			corpus += "\n" + string(b)
		}
		return nil
	})
	for _, u := range e.sim.Updates() {
		corpus += "\n" + u.Template
	}
	if !strings.Contains(corpus, z.Addr) || !strings.Contains(corpus, "refused client.libvirt") {
		t.Fatalf("the scan must see real output (fence and refusal):\n%s", corpus)
	}
	for _, s := range append(keySecrets(t, c), "AQBnP0hlAAAAABAAq8bD4W0KQd1Iem1Hh7mYgg==", onedPassword) {
		if strings.Contains(corpus, s) {
			t.Errorf("secret %.6s... found in rbdfence's output", s)
		}
	}
}

// TestFileModes checks the modes of what rbdfence creates.
func TestFileModes(t *testing.T) {
	e := setup(t)
	c := e.c
	img := c.NewImage(t, "modes")
	pool, name, _ := strings.Cut(img, "/")
	const vm = 5151
	e.sim.SetDown(true) // events must be spooled
	testenv.StartZombie(t, c, img, "idle")
	req, _ := json.Marshal(hoststep.Request{Op: hoststep.OpStart, VM: vm, Seq: 1, Host: "sechost", Run: "modes", Source: "hook",
		Disks: []vmdisk.Disk{{ID: "0", Pool: pool, Name: name}}})
	if code := e.run(t, string(req), "rbdfence", "host", "--config", e.cfg); code != 0 {
		t.Fatalf("host step: %d\n%s", code, e.output.String())
	}
	// A domain that is not an OpenNebula VM: its incoming migration is
	// marked without a claim (an OpenNebula VM's needs the front-end's
	// window, issue 11 item 1).
	xml := libvirttest.DomainXML("web-5151", "kvm", []libvirttest.RBDDisk{{Image: img, Mon: c.Mon, User: c.User, SecretUUID: "5b2f3a0e-6a5e-4d0e-9b66-0f1e8c4f6d21"}})
	e.run(t, xml, "rbdfence-hook", "--config", e.cfg, "web-5151", "migrate", "begin", "-")
	spooled, _ := filepath.Glob(filepath.Join(e.dir, "spool", "*.json"))
	marks, _ := filepath.Glob(filepath.Join(e.dir, "state", "*", "*"))
	if len(spooled) == 0 || len(marks) == 0 {
		t.Fatalf("want spooled events and a migration mark: %v %v\n%s", spooled, marks, e.output.String())
	}
	want := map[string]os.FileMode{
		filepath.Join(e.dir, "log"):           0o750,
		filepath.Join(e.dir, "log/audit.log"): 0o640,
		filepath.Join(e.dir, "spool"):         0o700,
		spooled[0]:                            0o600,
		filepath.Dir(marks[0]):                0o700,
		marks[0]:                              0o600,
		filepath.Join(e.dir, "metrics.prom"):  0o644,
	}
	for p, m := range want {
		st, err := os.Stat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if got := st.Mode().Perm(); got != m {
			t.Errorf("%s: mode %o, want %o", p, got, m)
		}
	}
}
