package frontend_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// attachAction is the driver action document oned gives attach_disk: the
// VM with DISK diskID marked ATTACH=YES (one_vmm_exec.rb, release-7.4.0,
// src/vmm_mad/exec/one_vmm_exec.rb:712) and the hotplug data.
func (f *fe) attachAction(vm, diskID int, host string) string {
	f.t.Helper()
	doc, ok := f.sim.VMXML(vm)
	if !ok {
		f.t.Fatalf("VM %d not in oned", vm)
	}
	id := fmt.Sprintf("<DISK_ID><![CDATA[%d]]></DISK_ID>", diskID)
	if strings.Count(doc, id) != 1 {
		f.t.Fatalf("VM %d's XML has no single %s:\n%s", vm, id, doc)
	}
	doc = strings.Replace(doc, id, "<ATTACH><![CDATA[YES]]></ATTACH>"+id, 1)
	return "<VMM_DRIVER_ACTION_DATA><HOST>" + host + "</HOST><DEPLOY_ID>one-" + fmt.Sprint(vm) + "</DEPLOY_ID>" +
		"<DISK_TARGET_PATH>/var/lib/one/datastores/0/" + fmt.Sprint(vm) + "/disk.1</DISK_TARGET_PATH>" + doc + "</VMM_DRIVER_ACTION_DATA>"
}

// TestAttachFencesAndRecords: the case. Persistent image P was VM
// Y's on host B, which was cut off (Y's client still writes); Y is gone and
// P is hot-attached to VM X running on host A. The attach_disk wrapper,
// run as oned runs a local attach_disk, fences Y's client before the
// remote attach_disk runs on A, runs it with oned's arguments and stdin,
// and records X's new client of P in the claim and with the image.
func TestAttachFencesAndRecords(t *testing.T) {
	f := setup(t)
	a, b := f.hs.A, f.hs.B
	prog := f.vmm("attach-rbdfence")
	bin, err := os.ReadFile(testenv.Bin(t, "attach-rbdfence"))
	if err != nil {
		t.Fatal(err)
	}
	f.write(prog, string(bin), 0o755)
	rec := f.path("remote-calls")
	f.write(f.path("hostremotes/vmm/kvm/attach_disk"), fmt.Sprintf(`#!/bin/bash
n=$(date +%%s%%N)
mkdir -p %[1]s
printf '%%s\n' "$@" > %[1]s/attach-$n.args
cat > %[1]s/attach-$n.stdin
ip -4 -o addr show > %[1]s/attach-$n.where
if [ -s %[1]s/attach-starts ]; then
	setsid %[2]s --mon %[3]s --id %[4]s --keyring %[5]s --image "$(cat %[1]s/attach-starts)" --mode idle </dev/null >%[1]s/qemu-$n.out 2>&1 &
	echo $! >> %[1]s/qemu.pids
	for i in $(seq 300); do grep -qs '"ready"' %[1]s/qemu-$n.out && break; sleep 0.1; done
fi
`, rec, testenv.Bin(t, "zombie"), f.ceph.Mon, f.ceph.User, f.ceph.Keyring), 0o755)

	const seq = 2
	vm, specs := f.newVM(a.Name, seq, "clone", "persistent")
	p := specs[1].image
	pool, name, _ := strings.Cut(p, "/")
	t.Cleanup(func() {
		_ = exec.Command("rados", "-c", f.ceph.AdminConf, "-p", pool, "rm", engine.ImageRecordObject(engine.Image{Pool: pool, Name: name})).Run()
	})
	disks := []onedsim.Disk{specs[0].disk, specs[1].disk}
	if err := f.sim.Put(onedsim.VM{ID: vm, Host: a.Name, HostID: 1, Seq: seq, State: onedsim.StateActive, LCMState: onedsim.LCMRunning, Disks: disks}); err != nil {
		t.Fatal(err)
	}
	ghost := testenv.StartZombieOn(t, f.ceph, b, p, "write") // Y's client on the cut-off host
	ghost.WaitWrite(t, true, 30*time.Second)
	f.write(f.path("remote-calls", "attach-starts"), p, 0o644) // X's QEMU opens P

	action := f.attachAction(vm, 1, a.Name)
	drv := base64.StdEncoding.EncodeToString([]byte(action))
	args := []string{"one-" + fmt.Sprint(vm), "/var/lib/one/datastores/0/" + fmt.Sprint(vm) + "/disk.1", "vdb", "1", drv, fmt.Sprint(vm), a.Name}
	r := f.run(prog, drv, args...)
	t.Logf("attach-rbdfence took %s\n%s", r.took, r.stderr)
	if r.code != 0 {
		t.Fatalf("attach-rbdfence: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if ev := ghost.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("Y's client's next write: errno %d, want 108", ev.Errno)
	}
	if _, ok := f.ceph.BlocklistEntries(t)[ghost.Addr]; !ok {
		t.Fatalf("Y's client %s is not in the blocklist", ghost.Addr)
	}

	calls, _ := filepath.Glob(filepath.Join(rec, "attach-*.args"))
	if len(calls) != 1 {
		t.Fatalf("remote attach_disk ran %d times", len(calls))
	}
	call := strings.TrimSuffix(calls[0], ".args")
	if got, want := readFile(t, call+".args"), strings.Join(args, "\n")+"\n"; got != want {
		t.Errorf("remote attach_disk args %q, want %q", got, want)
	}
	if got := readFile(t, call+".stdin"); got != action {
		t.Errorf("remote attach_disk stdin is not the driver action XML:\n%s", got)
	}
	if where := readFile(t, call+".where"); !strings.Contains(where, " "+a.IP+"/") {
		t.Errorf("remote attach_disk did not run on %s:\n%s", a.Name, where)
	}

	// X's new client of P is recorded, in the claim and with the image.
	c := f.claim(vm)
	got := c.Images[p]
	if len(got) != 1 || !strings.HasPrefix(got[0].String(), a.IP+":") {
		t.Fatalf("claim's record of %s: %v (claim %+v), want X's client on %s", p, got, c, a.IP)
	}
	out := f.ceph.Admin(t, "rados", "-p", pool, "get", engine.ImageRecordObject(engine.Image{Pool: pool, Name: name}), "/dev/stdout")
	var ir engine.ImageRecord
	if err := json.Unmarshal([]byte(out), &ir); err != nil || ir.VM != vm || len(ir.Addrs) != 1 || ir.Addrs[0] != got[0] {
		t.Fatalf("image record of %s: %q (%v), want VM %d with %s", p, out, err, vm, got[0])
	}
}
