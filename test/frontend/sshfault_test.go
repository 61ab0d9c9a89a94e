package frontend_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	libvirttest "github.com/rbdfence/rbdfence/test/libvirt"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// TestSSHHopFails: the host cannot be reached over ssh. The start is refused
// (fail closed) with one plain line, within the ssh timeout, and the remote
// deploy never runs; a failed migration whose destination cannot be
// reached fences the copy from the source.
func TestSSHHopFails(t *testing.T) {
	f := setup(t)
	const dead = "nosuchhost.invalid"
	vm, specs := f.newVM(dead, 0, "persistent")

	r := f.deployVM(vm, 0, dead, specs)
	wantRefused(t, f, r, 3, "rbdfence: refused, fencing unknown: ssh to "+dead+" failed; fix ssh, then retry | ssh to host "+dead+" failed")
	if r.took > 30*time.Second {
		t.Fatalf("refusal took %s", r.took)
	}

	// A failed migration whose destination can no longer be reached over
	// ssh (a partition that begins while the migration runs: the
	// destination answered before it, as the front-end asks it what runs
	// there) while the "failed" migration's copy runs there: the step falls
	// back to the source and fences every client that is not on it, once
	// the source's libvirt (the machine's libvirtd, over its socket) says
	// one-N runs there with no job (issue 18 item 2). The source is kept.
	lv := libvirttest.StartLibvirt(t)
	hostBin := filepath.Join(f.remotes, "rbdfence/rbdfence-host")
	f.write(f.path("rbdfence-host"), fmt.Sprintf("#!/bin/sh\nLIBVIRT_DEFAULT_URI=%s exec %s \"$@\"\n", lv.URI, hostBin), 0o755)
	f.write(f.cfgPath, strings.Replace(readFile(t, f.cfgPath), "host_binary: "+hostBin, "host_binary: "+f.path("rbdfence-host"), 1), 0o644)
	vm2, specs2 := f.newVM(f.hs.A.Name, 1, "persistent")
	if r := f.deployVM(vm2, 1, f.hs.A.Name, specs2); r.code != 0 {
		t.Fatalf("deploy: %d\n%s", r.code, r.stderr)
	}
	src := testenv.StartZombieOn(t, f.ceph, f.hs.A, specs2[0].image, "write")
	src.WaitWrite(t, true, 30*time.Second)
	unreachable := f.hs.B.Name
	cut := f.path("partition")
	f.write(f.path("ssh"), fmt.Sprintf("#!/bin/sh\n{ printf '%%s' \"$*\" | tr '\\n' ' '; echo; } >> %s\n"+
		"if [ -e %s ]; then for a; do [ \"$a\" = %s ] && { echo 'ssh: connect to host %[3]s port 22: No route to host' >&2; exit 255; }; done; fi\n"+
		"exec ssh -F %s \"$@\"\n", f.path("ssh.log"), cut, unreachable, f.hs.SSHConfig), 0o755)
	migrate := f.path("hostremotes/vmm/kvm/migrate")
	f.write(migrate+".orig", readFile(t, migrate), 0o755)
	f.write(migrate, "#!/bin/sh\ntouch "+cut+"\nexec "+migrate+".orig \"$@\"\n", 0o755)
	f.migrating(vm2, 1, f.hs.A.Name, unreachable, specs2)
	copyOnB := testenv.StartZombieOn(t, f.ceph, f.hs.B, specs2[0].image, "write")
	copyOnB.WaitWrite(t, true, 30*time.Second)
	f.write(f.path("remote-calls", "migrate.fail"), "", 0o644)

	// No one-N on the source: the migration may have completed onto the
	// destination (a retried migration's failmigrate while the first
	// attempt's virsh migrate went on): nothing is fenced, the step says
	// why and what to check; the action keeps the migration's exit 1.
	r, _ = f.migrateRun(vm2, f.hs.A.Name, unreachable)
	want := fmt.Sprintf("cannot tell whether the migration of one-%d from %s still runs: libvirt on %s says the domain is not running there", vm2, f.hs.A.Name, f.hs.A.Name)
	if r.code != 1 || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "nothing was fenced") || !strings.Contains(r.stderr, "domjobinfo") {
		t.Fatalf("failmigrate from the source without one-%d there: exit %d, want 1 saying %q\n%s", vm2, r.code, want, r.stderr)
	}
	copyOnB.WaitWrite(t, true, 30*time.Second)
	if _, ok := f.ceph.BlocklistEntries(t)[copyOnB.Addr]; ok {
		t.Fatal("the copy on the destination was fenced without the source's libvirt's word")
	}

	// one-N runs on the source with no job: the copy off it is fenced.
	// The destination answers again until this migration begins.
	if err := os.Remove(cut); err != nil {
		t.Fatal(err)
	}
	libvirttest.Create(t, libvirttest.DomainXML(fmt.Sprintf("one-%d", vm2), lv.DomType, nil))
	f.migrating(vm2, 1, f.hs.A.Name, unreachable, specs2)
	r, _ = f.migrateRun(vm2, f.hs.A.Name, unreachable)
	if r.code != 1 {
		t.Fatalf("failed migration with the source reachable: exit %d, want the migration's 1\n%s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "fencing from the source") {
		t.Fatalf("the fallback must be logged:\n%s", r.stderr)
	}
	if ev := copyOnB.WaitWrite(t, false, 30*time.Second); ev.Errno != 108 {
		t.Fatalf("the copy on the unreachable destination: errno %d, want 108", ev.Errno)
	}
	src.WaitWrite(t, true, 30*time.Second)
	if _, ok := f.ceph.BlocklistEntries(t)[src.Addr]; ok {
		t.Fatal("the source was fenced")
	}
}
