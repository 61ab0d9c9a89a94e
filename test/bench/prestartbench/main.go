// Command prestartbench times the front-end prestart driver for a VM with 4
// RBD disks (persistent, clone, volatile, shareable), as oned would run it
// before a deploy: read the VM from oned (the stand-in, over XML-RPC), ssh
// to the test host rbdf-a, run the host step there against the test Ceph
// cluster, publish events. It prints the median of -reps runs, for a clean
// start and for a start that fences two foreign clients (zombies on rbdf-b),
// with the ssh round trip and the bare host step for context.
//
// It also times a whole deploy through deploy-rbdfence against the plain
// deploy the driver would run (one ssh session: mkdir, vm.xml, ds.xml,
// vmm/kvm/deploy), interleaved in the same run, both over a warm ssh master
// connection configured as OpenNebula configures oneadmin's ssh
// (share/ssh/etc/config of release-7.4.0: ControlMaster no, ControlPersist
// 70s, ControlPath; the drivers' ssh wrapper adds -o ControlMaster=auto,
// share/ssh/bin/ssh:98). The deploy stand-in on the host reads the domain
// and prints a DEPLOY_ID.
//
//	go run -tags pacific ./test/bench/prestartbench -reps 9
//
// Needs root (network namespaces); it starts the test hosts and cluster.
package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/internal/hoststep"
	"github.com/rbdfence/rbdfence/internal/vmdisk"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

func main() {
	reps := flag.Int("reps", 9, "runs per measurement (the median is reported)")
	compare := flag.String("compare", "", "another build's deploy-rbdfence, timed in the same rounds (its host steps run this build's host binary)")
	flag.Parse()
	if err := testenv.RunProgram(func(t testenv.T) error { return run(t, *reps, *compare) }); err != nil {
		fmt.Fprintln(os.Stderr, "prestartbench:", err)
		os.Exit(1)
	}
}

func run(tb testenv.T, reps int, compare string) error {
	hs := testenv.StartHosts(tb)
	c := testenv.StartCephNet(tb)
	prestart, host := testenv.Bin(tb, "prestart"), testenv.Bin(tb, "rbdfence")
	dir, err := os.MkdirTemp("", "prestartbench-")
	if err != nil {
		return err
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })

	sim := onedsim.New("oneadmin:bench")
	if err := sim.Start("127.0.0.1:0"); err != nil {
		return err
	}
	tb.Cleanup(func() { sim.Close() })

	vm := 200000 + rand.IntN(700000)*10
	kinds := []string{"persistent", "clone", "volatile", "shareable"}
	var disks []onedsim.Disk
	var vdisks []vmdisk.Disk
	var images []string
	for i, k := range kinds {
		d := onedsim.Disk{ID: i, ImageID: vm*10 + i, CephHost: c.Mon, CephKey: c.Keyring}
		img := fmt.Sprintf("one-%d", d.ImageID)
		switch k {
		case "persistent":
			d.Persistent = true
		case "clone":
			img = fmt.Sprintf("one-%d-%d-%d", d.ImageID, vm, i)
		case "volatile":
			d.Volatile = true
			img = fmt.Sprintf("one-sys-%d-%d", vm, i)
		case "shareable":
			d.Shareable = true
		}
		if out, err := exec.Command("rbd", "-c", c.AdminConf, "create", "one/"+img, "--size", "16M").CombinedOutput(); err != nil {
			return fmt.Errorf("rbd create: %v %s", err, out)
		}
		spec := "one/" + img
		tb.Cleanup(func() { _ = exec.Command("rbd", "-c", c.AdminConf, "rm", "--no-progress", spec).Run() })
		images = append(images, spec)
		disks = append(disks, d)
		vdisks = append(vdisks, vmdisk.Disk{ID: fmt.Sprint(i), Pool: "one", Name: img, Monitors: []string{c.Mon}, User: c.User, Keyring: c.Keyring, Shareable: k == "shareable"})
	}
	tb.Cleanup(func() { _ = exec.Command("rados", "-c", c.AdminConf, "-p", "one", "rm", engine.ClaimObject(vm)).Run() })
	seq := 1
	put := func() {
		if err := sim.Put(onedsim.VM{ID: vm, Host: hs.A.Name, HostID: 1, Seq: seq, Disks: disks}); err != nil {
			tb.Fatal(err)
		}
	}
	put()

	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			tb.Fatal(err)
		}
		return p
	}
	// Every path under dir: the netns hosts share this machine's files, and
	// the defaults (/var/lib/one/rbdfence/spool, /var/lib/rbdfence) are the
	// real install's.
	hostCfg := write("host.yaml", fmt.Sprintf("ceph:\n  mon_host: %s\n  user: %s\n  keyring: %s\nfence:\n  expire: 1h\naudit_log: %[4]s/host-audit.log\nspool_dir: %[4]s/host-spool\nstate_dir: %[4]s/host-state\n",
		c.Mon, c.User, c.Keyring, dir))
	auth := write("one_auth", "oneadmin:bench\n")
	cfg := write("rbdfence.yaml", fmt.Sprintf(`opennebula:
  endpoint: %s
  auth_file: %s
  ssh: ssh -F %s
  ssh_persist: 0s
  host_binary: %s
  host_package_binary: ""
  host_config: %s
timeouts: {connect: 5s, ceph_op: 10s, oned: 3s, ssh: 60s, total: 90s}
audit_log: %s/audit.log
spool_dir: %s/spool
`, sim.URL(), auth, hs.SSHConfig, host, hostCfg, dir, dir))

	timeIt := func(cmd *exec.Cmd) time.Duration {
		var errb bytes.Buffer
		cmd.Stderr = &errb
		start := time.Now()
		if err := cmd.Run(); err != nil {
			tb.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, errb.String())
		}
		return time.Since(start)
	}
	runPrestart := func() time.Duration {
		cmd := exec.Command(prestart, fmt.Sprint(vm), hs.A.Name)
		cmd.Env = append(os.Environ(), "RBDFENCE_CONFIG="+cfg)
		return timeIt(cmd)
	}

	fmt.Printf("prestart for VM %d with 4 RBD disks (%s) on %s, %d runs each\n", vm, strings.Join(kinds, ", "), hs.A, reps)
	runPrestart() // the first start writes the claim
	var clean, fencing, sshRT, step []time.Duration
	for i := 0; i < reps; i++ {
		clean = append(clean, runPrestart())
	}
	for i := 0; i < reps; i++ {
		z1 := testenv.StartZombieOn(tb, c, hs.B, images[0], "write")
		z2 := testenv.StartZombieOn(tb, c, hs.B, images[2], "idle")
		seq++
		put()
		fencing = append(fencing, runPrestart())
		z1.Stop()
		z2.Stop()
	}
	req, _ := json.Marshal(hoststep.Request{Op: hoststep.OpCheck, VM: vm, Seq: seq, Host: hs.A.Name, Run: "bench", Source: "cli", Disks: vdisks})
	for i := 0; i < reps; i++ {
		sshRT = append(sshRT, timeIt(exec.Command("ssh", "-F", hs.SSHConfig, "-o", "BatchMode=yes", hs.A.Name, "true")))
		cmd := hs.A.Command(host, "host", "--config", hostCfg)
		cmd.Stdin = bytes.NewReader(req)
		step = append(step, timeIt(cmd))
	}
	row := func(name string, d []time.Duration) {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		fmt.Printf("  %-44s median %7s  min %7s  max %7s\n", name, d[len(d)/2].Round(time.Millisecond), d[0].Round(time.Millisecond), d[len(d)-1].Round(time.Millisecond))
	}
	// A whole deploy, plain and through deploy-rbdfence, over a warm master.
	sshCfg := write("ssh_config", fmt.Sprintf("Include %s\nHost *\n  ControlMaster no\n  ControlPersist 70s\n  ControlPath %s/ctl-M-%%C.sock\n", hs.SSHConfig, dir))
	remotes := filepath.Join(dir, "hostremotes")
	if err := os.MkdirAll(filepath.Join(remotes, "vmm/kvm"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(remotes, "vmm/kvm/deploy"), []byte("#!/bin/sh\ncat >/dev/null\necho one-bench\n"), 0o755); err != nil {
		return err
	}
	sysDir := filepath.Join(dir, "datastores/0", fmt.Sprint(vm))
	domain := fmt.Sprintf("<domain type='kvm'><name>one-%d</name><devices/><metadata><one:vm xmlns:one=\"http://opennebula.org/xmlns/libvirt/1.0\"><one:system_datastore><![CDATA[%s]]></one:system_datastore></one:vm></metadata></domain>", vm, sysDir)
	vmXML, dsXML := fmt.Sprintf("<VM><ID>%d</ID></VM>", vm), "<DATASTORE><ID>0</ID></DATASTORE>"
	local := filepath.Join(dir, "vms", fmt.Sprint(vm), fmt.Sprintf("deployment.%d", seq+1)) // the deploy after the ones above
	if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(local, []byte(domain), 0o644); err != nil {
		return err
	}
	if err := onedsim.WriteLocalDeployFiles(filepath.Dir(local), vmXML, dsXML); err != nil {
		return err
	}
	deployCfg := write("deploy.yaml", fmt.Sprintf(`opennebula:
  endpoint: %s
  auth_file: %s
  ssh: ssh -F %s
  host_binary: %s
  host_package_binary: ""
  host_config: %s
  remote_dir: %s
timeouts: {connect: 5s, ceph_op: 10s, oned: 3s, ssh: 60s, total: 90s}
audit_log: %s/audit.log
spool_dir: %s/spool
`, sim.URL(), auth, sshCfg, host, hostCfg, remotes, dir, dir))
	seq++
	put()
	plainDeploy := func() time.Duration {
		// What the driver's ssh stream runs for a non-local deploy, in one
		// session (one_vmm_exec.rb:443-470 of release-7.4.0).
		script := fmt.Sprintf("mkdir -p %[1]s && printf '%%s' '%[2]s' > %[1]s/vm.xml && printf '%%s' '%[3]s' > %[1]s/ds.xml && %[4]s/vmm/kvm/deploy %[1]s/%[5]s %[6]s %[7]d %[6]s",
			sysDir, vmXML, dsXML, remotes, filepath.Base(local), hs.A.Name, vm)
		cmd := exec.Command("ssh", "-F", sshCfg, "-o", "ControlMaster=auto", "-o", "BatchMode=yes", hs.A.Name, script)
		cmd.Stdin = strings.NewReader(domain)
		return timeIt(cmd)
	}
	deployWith := func(bin string) time.Duration {
		cmd := exec.Command(bin, local, hs.A.Name, fmt.Sprint(vm), hs.A.Name)
		cmd.Env = append(os.Environ(), "RBDFENCE_CONFIG="+deployCfg)
		cmd.Stdin = strings.NewReader(base64.StdEncoding.EncodeToString([]byte(domain)))
		return timeIt(cmd)
	}
	ours := testenv.Bin(tb, "deploy-rbdfence")
	plainDeploy()    // warms the master connection
	deployWith(ours) // the first start writes the claim
	var plain, wrapped, other []time.Duration
	for i := 0; i < reps; i++ {
		plain = append(plain, plainDeploy())
		wrapped = append(wrapped, deployWith(ours))
		if compare != "" {
			other = append(other, deployWith(compare))
		}
	}
	median := func(d []time.Duration) time.Duration {
		c := append([]time.Duration(nil), d...)
		sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
		return c[len(c)/2]
	}
	extra := median(wrapped) - median(plain)
	_ = exec.Command("ssh", "-F", sshCfg, "-O", "exit", hs.A.Name).Run()

	row("prestart, nothing to fence", clean)
	row("prestart, fencing 2 foreign clients", fencing)
	row("context: ssh round trip (ssh host true)", sshRT)
	row("context: host step alone (check, no ssh)", step)
	row("plain deploy, warm ssh master", plain)
	row("deploy-rbdfence, nothing to fence, warm master", wrapped)
	fmt.Printf("  %-44s %7s (median of deploy-rbdfence minus median of the plain deploy; ratio %.2fx)\n", "added by rbdfence to a start", extra.Round(time.Millisecond),
		float64(median(wrapped))/float64(median(plain)))
	if compare != "" {
		row("deploy-rbdfence of "+filepath.Base(filepath.Dir(compare)), other)
		fmt.Printf("  %-44s %7s (ratio %.2fx)\n", "added by the compared build", (median(other) - median(plain)).Round(time.Millisecond),
			float64(median(other))/float64(median(plain)))
	}
	return nil
}
