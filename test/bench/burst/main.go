// Command burst is the host-failure benchmark: 100 OpenNebula VMs with 4 RBD
// disks each are restarted at once on a new host, as oned drives them after
// a host failure, through the real libvirt hook binary (argv and domain XML
// as libvirtd passes them), with a live zombie writer on a third of them. It
// reports the total time, the per-VM median and p99, and checks that every
// zombie was fenced, no other client was, and every event reached the oned
// stand-in exactly once.
//
//	go run -tags pacific ./test/bench/burst [-vms 100] [-disks 4]
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rbdfence/rbdfence/internal/opennebula"
	"github.com/rbdfence/rbdfence/test/libvirt"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

func main() {
	vms := flag.Int("vms", 100, "VMs restarted at once")
	disks := flag.Int("disks", 4, "RBD disks per VM")
	flag.Parse()
	if *vms < 3 || *disks < 1 {
		fmt.Fprintln(os.Stderr, "burst: want -vms >= 3 and -disks >= 1")
		os.Exit(2)
	}
	if err := testenv.RunProgram(func(t testenv.T) error { return run(t, *vms, *disks) }); err != nil {
		fmt.Fprintln(os.Stderr, "burst:", err)
		os.Exit(1)
	}
}

func run(t testenv.T, nVM, nDisk int) error {
	c := testenv.StartCeph(t)
	hook := testenv.Bin(t, "rbdfence-hook")
	dir, err := os.MkdirTemp("", "burst-")
	if err != nil {
		return err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	// Images, kept between runs (rbd create is the slow part of set-up).
	var names []string
	for v := 0; v < nVM; v++ {
		for d := 0; d < nDisk; d++ {
			names = append(names, fmt.Sprintf("burst-%03d-%d", v, d))
		}
	}
	c.EnsureImages(t, names, "8M")

	// The oned stand-in knows every VM; events go there.
	sim := onedsim.New("oneadmin:burst")
	base := 700000 + os.Getpid()%10000*10
	for v := 0; v < nVM; v++ {
		if err := sim.Put(onedsim.VM{ID: base + v, Name: fmt.Sprintf("burst-%d", v), Host: "new-host", Seq: 1}); err != nil {
			return err
		}
	}
	if err := sim.Start("127.0.0.1:0"); err != nil {
		return err
	}
	t.Cleanup(func() { sim.Close() })
	auth := filepath.Join(dir, "one_auth")
	os.WriteFile(auth, []byte("oneadmin:burst\n"), 0o600)
	cfg := filepath.Join(dir, "rbdfence.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("ceph:\n  mon_host: %q\n  user: %s\n  keyring: %s\naudit_log: %s/audit.log\nspool_dir: %s/spool\nstate_dir: %s/state\nhost_name: new-host\nopennebula:\n  endpoint: %s\n  auth_file: %s\ntimeouts:\n  total: 60s\n",
		c.Mon, c.User, c.Keyring, dir, dir, dir, sim.URL(), auth)), 0o600)

	// Zombies: a third of the VMs keep a writer on their first disk.
	zombies := map[int]*testenv.Zombie{}
	for v := 0; v < nVM; v += 3 {
		zombies[v] = testenv.StartZombie(t, c, fmt.Sprintf("%s/burst-%03d-0", c.Pool, v), "write")
	}
	for _, z := range zombies {
		z.WaitWrite(t, true, 30*time.Second)
	}
	before := c.BlocklistEntries(t)

	// The burst.
	xmls := make([]string, nVM)
	for v := 0; v < nVM; v++ {
		var ds []libvirttest.RBDDisk
		for d := 0; d < nDisk; d++ {
			ds = append(ds, libvirttest.RBDDisk{Image: fmt.Sprintf("%s/burst-%03d-%d", c.Pool, v, d), Mon: c.Mon, User: c.User,
				SecretUUID: "5b2f3a0e-6a5e-4d0e-9b66-0f1e8c4f6d21"})
		}
		xmls[v] = libvirttest.DomainXML(fmt.Sprintf("one-%d", base+v), "kvm", ds)
	}
	var wg sync.WaitGroup
	durs := make([]time.Duration, nVM)
	errs := make([]error, nVM)
	start := time.Now()
	for v := 0; v < nVM; v++ {
		wg.Add(1)
		go func(v int) {
			defer wg.Done()
			cmd := exec.Command(hook, "--config", cfg, fmt.Sprintf("one-%d", base+v), "prepare", "begin", "-")
			cmd.Stdin = strings.NewReader(xmls[v])
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			s := time.Now()
			if err := cmd.Run(); err != nil {
				errs[v] = fmt.Errorf("one-%d: %v: %s", base+v, err, strings.TrimSpace(stderr.String()))
			}
			durs[v] = time.Since(s)
		}(v)
	}
	wg.Wait()
	total := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}

	// Checks: every zombie fenced, nothing else, every event once.
	after := c.BlocklistEntries(t)
	want := map[string]bool{}
	for _, z := range zombies {
		want[z.Addr] = true
		if _, ok := after[z.Addr]; !ok {
			return fmt.Errorf("zombie %s was not fenced", z.Addr)
		}
	}
	for a := range after {
		if _, old := before[a]; !old && !want[a] {
			return fmt.Errorf("%s was blocklisted but is no zombie", a)
		}
	}
	for v := 0; v < nVM; v++ {
		ut, _ := sim.UserTemplate(base + v)
		n := 0
		for _, a := range ut {
			if opennebula.IsEventAttr(a.Name) {
				n++
			}
		}
		if w := map[bool]int{true: 1, false: 0}[zombies[v] != nil]; n != w {
			return fmt.Errorf("VM %d has %d events, want %d", base+v, n, w)
		}
	}
	for _, z := range zombies {
		if ev := z.WaitWrite(t, false, 10*time.Second); ev.Errno != 108 {
			return fmt.Errorf("zombie %s: next write errno %d, want 108", z.Addr, ev.Errno)
		}
	}

	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	p99 := durs[(len(durs)*99+99)/100-1]
	fmt.Printf("host-failure burst: %d VMs x %d RBD disks restarted at once through the libvirt hook, %d live zombies\n", nVM, nDisk, len(zombies))
	fmt.Printf("total %.2f s   per-VM median %.0f ms   p99 %.0f ms   max %.0f ms\n",
		total.Seconds(), ms(durs[len(durs)/2]), ms(p99), ms(durs[len(durs)-1]))
	fmt.Printf("checked: %d zombies fenced (next write errno 108), no other client blocklisted, %d events delivered exactly once\n",
		len(zombies), len(zombies))
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
