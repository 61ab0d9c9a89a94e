package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/audit"
	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/internal/outcome"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestClaimResetAndGC (issue 11 item 10, issue 18 item 4) on the real
// cluster with the oned stand-in: gc collects only the claims of this
// installation's VMs that oned reports DONE (oned knows the VM with the
// claim's STIME) and changes nothing without --apply; a claim of a VM oned
// does not know, another installation's claim of a VM of the same id, and a
// claim an older version wrote that is not shown to be the VM's are never
// reset. reset refuses while a run holds the claim's lease, and otherwise
// empties this installation's VM's claim only, writes the audit log and
// raises an event on the VM; gc --apply resets what it collects.
func TestClaimResetAndGC(t *testing.T) {
	c := testenv.StartCeph(t)
	base := int(time.Now().UnixNano()%100000) * 10
	live, done, gone, shared, old := base+1, base+2, base+3, base+4, base+5
	const ours, theirs = int64(1714550000), int64(1760000000) // onedsim's STIME; another installation's
	sim := onedsim.New("oneadmin:claimpw")
	if err := sim.Put(onedsim.VM{ID: live, Host: "hostA", Seq: 4}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int{done, shared, old} {
		if err := sim.Put(onedsim.VM{ID: id, Host: "hostB", Seq: 2, State: onedsim.StateDone}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sim.Close() })
	dir := t.TempDir()
	auth, auditLog, cfg := filepath.Join(dir, "one_auth"), filepath.Join(dir, "audit.log"), filepath.Join(dir, "rbdfence.yaml")
	if err := os.WriteFile(auth, []byte("oneadmin:claimpw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("ceph:\n  mon_host: %s\n  user: %s\n  keyring: %s\nopennebula:\n  endpoint: %s\n  auth_file: %s\naudit_log: %s\nspool_dir: %s\nstate_dir: %s\n",
		c.Mon, c.User, c.Keyring, sim.URL(), auth, auditLog, filepath.Join(dir, "spool"), filepath.Join(dir, "state"))
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	cl, err := ceph.Connect(ctx, ceph.Config{MonHost: c.Mon, User: c.User, Keyring: c.Keyring, ConnectTimeout: 10 * time.Second, OpTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	eng := engine.New(cl, engine.Options{})
	for _, cl := range []engine.Claim{{VM: live, Stime: ours}, {VM: done, Stime: ours}, {VM: gone, Stime: ours}, {VM: shared, Stime: theirs}, {VM: old, Seq: 9, Host: "hostX"}} {
		w := engine.Who{VM: cl.VM, Seq: 2, Host: "hostB", Source: engine.SourceFrontend, Run: "t", Pool: c.Pool}
		if cl.Host == "" {
			cl.Seq, cl.Host = 2, "hostB"
		}
		cl.Source, cl.State = engine.SourceFrontend, engine.StateRunning
		if err := eng.WriteClaim(ctx, w, cl); err != nil {
			t.Fatal(err)
		}
	}
	claimOf := func(id int) *engine.Claim {
		t.Helper()
		got, err := eng.ReadClaim(ctx, c.Pool, id)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append(args, "--config", cfg), strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	gcList := func(args ...string) map[int]gcEntry {
		t.Helper()
		code, out, stderr := cli(append([]string{"claim", "gc", "--json"}, args...)...)
		// Exit 1 with --apply: a claim of another test's VM is leased
		// right now; this test's own entries are checked below.
		if code != 0 && (code != outcome.Failure.Code() || len(args) == 0) {
			t.Fatalf("claim gc %v: exit %d: %s\n%s", args, code, stderr, out)
		}
		var es []gcEntry
		if err := json.Unmarshal([]byte(out), &es); err != nil {
			t.Fatalf("claim gc --json: %v\n%s", err, out)
		}
		m := map[int]gcEntry{}
		for _, e := range es {
			m[e.VM] = e
		}
		return m
	}

	// Dry run: done to collect; gone and old listed, never collected;
	// live and shared (another installation's VM) not listed; nothing
	// changes.
	m := gcList()
	if m[done].Reason != "DONE in oned" || !m[done].Collect || m[done].Reset {
		t.Fatalf("gc dry run, a DONE VM's claim: %+v", m[done])
	}
	if !strings.Contains(m[gone].Reason, "unknown to this installation's oned") || m[gone].Collect ||
		!strings.Contains(m[old].Reason, "older rbdfence") || m[old].Collect {
		t.Fatalf("gc dry run must list, not collect, the unknown VM's and the older version's claims: %+v %+v", m[gone], m[old])
	}
	for _, id := range []int{live, shared} {
		if _, ok := m[id]; ok {
			t.Fatalf("gc listed VM %d's claim: %+v", id, m[id])
		}
	}
	if claimOf(done) == nil || claimOf(gone) == nil {
		t.Fatal("a dry run reset a claim")
	}
	// reset names this installation's VM: another installation's claim of
	// a VM of the same id is not touched.
	if code, out, stderr := cli("claim", "reset", "--vm", fmt.Sprint(shared)); code != 0 || !strings.Contains(out, "had no claim") {
		t.Fatalf("reset of VM %d, whose object holds another installation's claim: exit %d: %s%s", shared, code, out, stderr)
	}
	if got := claimOf(shared); got == nil || got.Stime != theirs {
		t.Fatalf("the other installation's claim was touched: %+v", got)
	}

	// A run holds live's lease: reset is refused (exit 4) and changes nothing.
	if err := cl.AcquireLease(ctx, c.Pool, engine.ClaimObject(live), "host=hostB run=busy seq=4", time.Minute); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := cli("claim", "reset", "--vm", fmt.Sprint(live))
	if code != outcome.Refused.Code() || !strings.Contains(stderr, "run=busy") {
		t.Fatalf("reset under a held lease: exit %d (want %d): %s", code, outcome.Refused.Code(), stderr)
	}
	if claimOf(live) == nil {
		t.Fatal("a refused reset removed the claim")
	}
	if err := cl.ReleaseLease(ctx, c.Pool, engine.ClaimObject(live), "host=hostB run=busy seq=4"); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := cli("claim", "reset", "--vm", fmt.Sprint(live))
	if code != 0 || !strings.Contains(out, "removed") {
		t.Fatalf("reset: exit %d: %s%s", code, out, stderr)
	}
	if got := claimOf(live); got != nil {
		t.Fatalf("claim after reset: %+v", got)
	}
	recs, _, err := audit.Read(auditLog)
	if err != nil || len(recs) != 2 || recs[1].VM == nil || *recs[1].VM != live || recs[1].Op != "claim-reset" || recs[1].Host != "hostB" {
		t.Fatalf("audit log after reset: %+v %v", recs, err)
	}
	ut, _ := sim.UserTemplate(live)
	var ev []onedsim.Attribute
	for _, a := range ut {
		if opennebula.IsEventAttr(a.Name) {
			ev = append(ev, a)
		}
	}
	if len(ev) != 1 || ev[0].Vector["ACTION"] != "claim-reset" {
		t.Fatalf("the reset must raise an event on VM %d: %s", live, ut.String())
	}

	// gc --apply resets what it collects, nothing else.
	m = gcList("--apply")
	if !m[done].Reset || m[gone].Reset || m[old].Reset {
		t.Fatalf("gc --apply: %+v", m)
	}
	if claimOf(done) != nil || claimOf(gone) == nil || claimOf(old) == nil || claimOf(shared) == nil {
		t.Fatal("gc --apply reset the wrong claims")
	}
	// The operator says the older version's claim is this installation's.
	if code, out, stderr := cli("claim", "reset", "--vm", fmt.Sprint(old), "--legacy"); code != 0 || !strings.Contains(out, "removed") || claimOf(old) != nil {
		t.Fatalf("reset --legacy: exit %d: %s%s", code, out, stderr)
	}
	if code, _, stderr := cli("claim", "reset", "--vm", fmt.Sprint(shared), "--legacy"); code != outcome.Usage.Code() || claimOf(shared) == nil {
		t.Fatalf("reset --legacy of a claim this version wrote: exit %d: %s", code, stderr)
	}
	for _, id := range []int{gone, shared} {
		_ = exec.Command("rados", "-c", c.AdminConf, "-p", c.Pool, "rm", engine.ClaimObject(id)).Run()
	}
	if code, _, stderr := cli("claim", "gc", "--vm", "1"); code != outcome.Usage.Code() {
		t.Fatalf("gc --vm: exit %d: %s", code, stderr)
	}
}
