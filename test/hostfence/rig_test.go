package hostfence_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// rig is one front-end with fence-host installed as an operator installs
// it, the oned stand-in and this process's own test cluster.
type rig struct {
	t         *testing.T
	c         *testenv.Ceph
	rbd       string
	dir       string
	prefix    string
	fenceHost string // the installed ft/fence_host.sh
	sim       *onedsim.Sim
	common    string // the YAML every config shares
	feCfg     string
	env       []string // the front-end's environment
}

func newRig(t *testing.T) *rig {
	t.Helper()
	g := &rig{t: t, c: testenv.StartCeph(t), rbd: testenv.Bin(t, "rbdfence"), dir: t.TempDir()}
	g.prefix = filepath.Join(g.dir, "root")
	for _, d := range []string{"var/lib/one/remotes/vmm/kvm", "var/lib/one/remotes/tm/ceph", "etc/one"} {
		if err := os.MkdirAll(filepath.Join(g.prefix, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(g.prefix, "etc/one/oned.conf"), "VM_MAD = [\n    NAME           = \"kvm\",\n    ARGUMENTS      = \"-t 15 -r 0 kvm\",\n]\n")
	inst := exec.Command("bash", filepath.Join(testenv.Root(), "install.sh"), "frontend", "--prefix", g.prefix)
	inst.Env = append(os.Environ(), "RBDFENCE_BIN="+filepath.Dir(g.rbd))
	if out, err := inst.CombinedOutput(); err != nil || !strings.Contains(string(out), "onehook create") {
		t.Fatalf("install.sh frontend: %v\n%s", err, out)
	}
	g.fenceHost = filepath.Join(g.prefix, "var/lib/one/remotes/hooks/rbdfence/fence_host.sh")
	g.sim = onedsim.New(auth)
	if err := g.sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.sim.Close() })
	write(t, filepath.Join(g.dir, "one_auth"), auth+"\n")
	g.common = fmt.Sprintf("ceph:\n  mon_host: %q\n  user: %s\n  keyring: %s\nfence:\n  expire: 15m\nopennebula:\n  endpoint: %s\n  auth_file: %s\n",
		g.c.Mon, g.c.User, g.c.Keyring, g.sim.URL(), filepath.Join(g.dir, "one_auth"))
	g.feCfg = filepath.Join(g.dir, "frontend.yaml")
	write(t, g.feCfg, g.common+fmt.Sprintf("audit_log: %s/fe-audit.log\nspool_dir: %s/fe-spool\nmetrics: %s/metrics.prom\n", g.dir, g.dir, g.dir))
	g.env = []string{"RBDFENCE_CONFIG=" + g.feCfg}
	return g
}

// hostCfg writes the config of the host step as it runs on a host whose
// Ceph clients come from ip, and returns its path.
func (g *rig) hostCfg(name, ip string) string {
	p := filepath.Join(g.dir, name+".yaml")
	write(g.t, p, g.common+fmt.Sprintf("audit_log: %[1]s/%[2]s-audit.log\nspool_dir: %[1]s/%[2]s-spool\nstate_dir: %[1]s/%[2]s-state\nhost_addresses: [%[3]s]\n", g.dir, name, ip))
	return p
}

// putHost registers h in oned; addrs, when given, is the address list its
// operator set in its template (opennebula.AttrHostAddresses).
func (g *rig) putHost(h onedsim.Host, addrs string) {
	g.t.Helper()
	if addrs != "" {
		tpl, err := onedsim.ParseTemplate(fmt.Sprintf("%s = %q\n", opennebula.AttrHostAddresses, addrs))
		if err != nil {
			g.t.Fatal(err)
		}
		h.Template = tpl
	}
	g.sim.PutHost(h)
}

// step runs one host step through the real host binary, with the host's
// config, and fails the test unless it succeeds.
func (g *rig) step(cfg string, req hoststep.Request) hoststep.Response {
	g.t.Helper()
	req.Local, req.Source = true, "frontend"
	if req.Run == "" {
		req.Run = fmt.Sprintf("%s-%d", req.Op, req.Seq)
	}
	b, _ := json.Marshal(req)
	r := run(g.t, nil, string(b), g.rbd, "host", "--config", cfg)
	var resp hoststep.Response
	if err := json.Unmarshal([]byte(r.stdout), &resp); err != nil || !resp.OK {
		g.t.Fatalf("host step %s on %s: exit %d %v\n%s%s", req.Op, req.Host, r.code, err, r.stdout, r.stderr)
	}
	return resp
}

// hookStdin is what host_error.rb gives ft/fence_host.sh: the host's XML,
// base64 (share/hooks/ft/host_error.rb:207-212 of release-7.4.0).
func (g *rig) hookStdin(id int) string {
	doc, ok := g.sim.HostXML(id)
	if !ok {
		g.t.Fatalf("host %d not in oned", id)
	}
	return base64.StdEncoding.EncodeToString([]byte(doc))
}
