//go:build cgo

package hook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/outcome"
)

// deadMon is a monitor address nothing listens on: a run that reaches for
// Ceph fails (kind ceph) within the 1s connect timeout of testConfig.
const deadMon = "127.0.0.1:1"

func testConfig(t *testing.T, extra string) (path, stateDir string) {
	t.Helper()
	dir := t.TempDir()
	stateDir = filepath.Join(dir, "state")
	// A well-formed keyring (a made-up key): the connect really goes out.
	keyring := filepath.Join(dir, "keyring")
	if err := os.WriteFile(keyring, []byte("[client.libvirt]\n\tkey = AQC1Qg1r+rovKRAAzgVjzGGaHOGLmUQ+WbcxfQ==\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`ceph:
  mon_host: %s
  keyring: %s
timeouts:
  connect: 1s
  ceph_op: 1s
  oned: 1s
  total: 10s
audit_log: %s
spool_dir: %s
state_dir: %s
host_name: node1
%s`, deadMon, keyring, filepath.Join(dir, "audit.log"), filepath.Join(dir, "spool"), stateDir, extra)
	path = filepath.Join(dir, "rbdfence.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, stateDir
}

func domainXML(name string, rbd bool) string {
	disk := ""
	if rbd {
		disk = `<disk type='network' device='disk'><driver name='qemu' type='raw'/>
<source protocol='rbd' name='one/one-7-42-0'><host name='127.0.0.1' port='1'/></source>
<auth username='libvirt'><secret type='ceph' uuid='5b2f3a0e-6a5e-4d0e-9b66-0f1e8c4f6d21'/></auth>
<target dev='vda' bus='virtio'/></disk>`
	}
	return fmt.Sprintf(`<domain type='kvm'><name>%s</name><memory>65536</memory><devices>%s</devices></domain>`, name, disk)
}

func TestRunWithoutCeph(t *testing.T) {
	type step struct {
		args    string // domain op subop extra
		xml     string
		wantErr string // "" = nil; else substring, and Kind below
		kind    outcome.Kind
	}
	tests := []struct {
		name    string
		cfg     string // extra config lines
		missing bool   // explicit config path that does not exist
		domains string
		steps   []step
		mark    bool   // the domain markDom is marked at the end
		markDom string // "" means one-42
	}{
		{name: "other ops exit at once", steps: []step{
			{args: "one-42 start begin -", xml: domainXML("one-42", true)},
			{args: "one-42 restore begin -", xml: domainXML("one-42", true)},
			{args: "one-42 reconnect begin -", xml: "not xml at all"},
		}},
		{name: "no RBD disk: no Ceph, no config needed", missing: true, steps: []step{
			{args: "one-42 prepare begin -", xml: domainXML("one-42", false)},
			{args: "web prepare begin -", xml: domainXML("web", false)},
		}},
		{name: "RBD disk, Ceph unreachable: fail closed", steps: []step{
			{args: "one-42 prepare begin -", xml: domainXML("one-42", true), wantErr: "not starting one-42: cannot reach Ceph monitors 127.0.0.1:1", kind: outcome.Unavailable},
			{args: "web prepare begin -", xml: domainXML("web", true), wantErr: "fail closed", kind: outcome.Unavailable},
		}},
		{name: "RBD disk, Ceph unreachable: fail open", cfg: "fence:\n  fail_open: true\n", steps: []step{
			{args: "one-42 prepare begin -", xml: domainXML("one-42", true)},
		}},
		{name: "incoming migration of a VM: checked against the claim, fail closed", steps: []step{
			{args: "one-42 migrate begin -", xml: domainXML("one-42", true), wantErr: "not accepting the incoming migration of one-42: cannot reach Ceph monitors", kind: outcome.Unavailable},
		}},
		{name: "incoming migration of a VM, fail open: marked without a window", cfg: "fence:\n  fail_open: true\n", steps: []step{
			{args: "one-42 migrate begin -", xml: domainXML("one-42", true)},
		}, mark: true},
		{name: "incoming migration of another domain: prepare leaves Ceph alone", markDom: "web", steps: []step{
			{args: "web migrate begin -", xml: domainXML("web", true)},
			{args: "web prepare begin -", xml: domainXML("web", true)},
			{args: "web start begin -", xml: domainXML("web", true)},
		}, mark: true},
		{name: "incoming migration: started clears the mark", markDom: "web", steps: []step{
			{args: "web migrate begin -", xml: domainXML("web", true)},
			{args: "web prepare begin -", xml: domainXML("web", true)},
			{args: "web start begin -", xml: domainXML("web", true)},
			{args: "web started begin -", xml: domainXML("web", true)},
			{args: "web prepare begin -", xml: domainXML("web", true), wantErr: "Ceph", kind: outcome.Unavailable},
		}},
		// A mark is the handover of one prepare: a second prepare while it
		// lives (the migration aborted, libvirtd died before `release end`,
		// the domain started by hand) is judged as a start (issue 18: found
		// by the model).
		{name: "a mark serves one prepare", markDom: "web", steps: []step{
			{args: "web migrate begin -", xml: domainXML("web", true)},
			{args: "web prepare begin -", xml: domainXML("web", true)},
			{args: "web prepare begin -", xml: domainXML("web", true), wantErr: "Ceph", kind: outcome.Unavailable},
		}, mark: true},
		{name: "mark cleared on release: prepare reaches for Ceph again", markDom: "web", steps: []step{
			{args: "web migrate begin -", xml: domainXML("web", true)},
			{args: "web release end -", xml: domainXML("web", true)},
			{args: "web prepare begin -", xml: domainXML("web", true), wantErr: "Ceph", kind: outcome.Unavailable},
		}},
		{name: "mark cleared on stopped", markDom: "web", steps: []step{
			{args: "web migrate begin -", xml: domainXML("web", true)},
			{args: "web stopped end -", xml: domainXML("web", true)},
		}},
		{name: "mark of another domain does not count", markDom: "web", steps: []step{
			{args: "db migrate begin -", xml: domainXML("db", true)},
			{args: "web prepare begin -", xml: domainXML("web", true), wantErr: "Ceph", kind: outcome.Unavailable},
		}},
		{name: "migration of a domain without RBD disks: no mark", steps: []step{
			{args: "one-42 migrate begin -", xml: domainXML("one-42", false)},
		}},
		// started fails closed when the instance cannot be recorded (model-A:
		// an unrecorded instance could not be fenced once it is invisible);
		// libvirt then stops the domain before its vCPUs run.
		{name: "started: Ceph unreachable fails closed", steps: []step{
			{args: "one-42 started begin -", xml: domainXML("one-42", true), wantErr: "cannot record this instance's Ceph clients", kind: outcome.Unavailable},
			{args: "one-42 started begin -", xml: "<garbage"},
		}},
		{name: "started: fail open logs and goes on", cfg: "fence:\n  fail_open: true\n", steps: []step{
			{args: "one-42 started begin -", xml: domainXML("one-42", true)},
		}},
		{name: "bad input stops the start", steps: []step{
			{args: "one-42 prepare begin -", xml: "<garbage", wantErr: "domain XML", kind: outcome.Usage},
			{args: "one-42 prepare begin -", xml: domainXML("one-43", true), wantErr: `is for "one-43", not "one-42"`, kind: outcome.Usage},
			{args: "one-42 migrate begin -", xml: "", wantErr: "not accepting the incoming migration of one-42", kind: outcome.Usage},
		}},
		{name: "missing explicit config stops an RBD start", missing: true, steps: []step{
			{args: "one-42 prepare begin -", xml: domainXML("one-42", true), wantErr: "no such file", kind: outcome.Usage},
			{args: "one-42 release end -", xml: ""},
		}},
		{name: "domains filter leaves others alone", domains: `^one-4[0-9]$`, steps: []step{
			{args: "web prepare begin -", xml: domainXML("web", true)},
			{args: "one-100 prepare begin -", xml: "<garbage"},
			{args: "one-42 prepare begin -", xml: domainXML("one-42", true), wantErr: "Ceph", kind: outcome.Unavailable},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, state := testConfig(t, tt.cfg)
			if tt.missing {
				cfg = filepath.Join(t.TempDir(), "absent.yaml")
			}
			for _, st := range tt.steps {
				var logs bytes.Buffer
				o := Options{ConfigPath: cfg, Stdin: strings.NewReader(st.xml), Log: NewLogger(&logs, false)}
				if tt.domains != "" {
					o.Domains = regexp.MustCompile(tt.domains)
				}
				inv, err := ParseArgs(strings.Fields(st.args))
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				err = Run(context.Background(), inv, o)
				took := time.Since(start)
				if took > 8*time.Second {
					t.Errorf("%s took %s", st.args, took)
				}
				if st.wantErr == "" {
					if err != nil {
						t.Fatalf("%s: %v\nlogs:\n%s", st.args, err, logs.String())
					}
					continue
				}
				var he *Error
				if !errors.As(err, &he) || !strings.Contains(err.Error(), st.wantErr) || he.Kind != st.kind {
					t.Fatalf("%s: err %v (%T), want %s error containing %q", st.args, err, err, st.kind, st.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("%s: error is not one line: %q", st.args, err)
				}
			}
			m := Marks{Dir: filepath.Join(state, MarkDir), Window: time.Hour}
			dom := tt.markDom
			if dom == "" {
				dom = "one-42"
			}
			if fresh, _, _ := m.Fresh(dom); fresh != tt.mark {
				t.Fatalf("%s marked = %v, want %v", dom, fresh, tt.mark)
			}
		})
	}
}
