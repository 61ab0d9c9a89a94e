// Command hookbench measures the libvirt qemu hook's latency as libvirtd
// sees it: the hook installed by `install.sh host` (into a scratch prefix:
// the qemu.d wrapper script, then the binary) is run with libvirt's argv
// `<domain> prepare begin -`, the domain XML on stdin and libvirt's minimal
// environment, for an OpenNebula domain with 0, 1 and 8 RBD disks on clean
// images of the test cluster (test/ceph/cluster.sh), as client.libvirt.
// With RBD disks every run is a full prestart: connect, take and write the
// VM's claim, list lockers and watchers of every image.
//
//	go run -tags pacific ./test/bench/hookbench [-n 21]
//
// It prints the median, minimum and 90th percentile of N runs per case.
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
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/test/libvirt"
	"github.com/rbdfence/rbdfence/test/testenv"
)

func main() {
	n := flag.Int("n", 21, "runs per case (the median is the result)")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "hookbench:", err)
		os.Exit(1)
	}
}

// setup starts the cluster and builds the binaries through testenv.
func setup() (c *testenv.Ceph, hookBin string, err error) {
	err = testenv.RunProgram(func(t testenv.T) error {
		c, hookBin = testenv.StartCeph(t), testenv.Bin(t, "rbdfence-hook")
		return nil
	})
	return c, hookBin, err
}

type benchCase struct {
	name  string
	op    string
	disks int
}

func run(n int) error {
	if n < 1 {
		return fmt.Errorf("-n must be at least 1")
	}
	c, hookBin, err := setup()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "hookbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// Clean images, kept between runs like checkbench's.
	var names []string
	for i := 0; i < 8; i++ {
		names = append(names, fmt.Sprintf("hookbench-%d", i))
	}
	var images []string
	if err := testenv.RunProgram(func(t testenv.T) error { images = c.EnsureImages(t, names, "16M"); return nil }); err != nil {
		return err
	}

	cfg := filepath.Join(dir, "rbdfence.yaml")
	cfgText := fmt.Sprintf("ceph:\n  mon_host: %q\n  user: %s\n  keyring: %s\naudit_log: %s\nspool_dir: %s\nstate_dir: %s\nhost_name: hookbench\n",
		c.Mon, c.User, c.Keyring, filepath.Join(dir, "audit.log"), filepath.Join(dir, "spool"), filepath.Join(dir, "state"))
	if err := os.WriteFile(cfg, []byte(cfgText), 0o600); err != nil {
		return err
	}
	prefix := filepath.Join(dir, "root")
	inst := exec.Command("bash", filepath.Join(testenv.Root(), "install.sh"), "host", "--prefix", prefix, "--config", cfg)
	inst.Env = append(os.Environ(), "RBDFENCE_BIN="+filepath.Dir(hookBin))
	if out, err := inst.CombinedOutput(); err != nil {
		return fmt.Errorf("install.sh host: %v\n%s", err, out)
	}
	entry := filepath.Join(prefix, "etc/libvirt/hooks/qemu.d/10-rbdfence")

	vm := 900000 + os.Getpid()%90000
	defer func() {
		_ = exec.Command("rados", "-c", c.AdminConf, "-p", c.Pool, "rm", engine.ClaimObject(vm)).Run()
	}()
	cases := []benchCase{
		{"no RBD disk", "prepare", 0},
		{"1 RBD disk", "prepare", 1},
		{"8 RBD disks", "prepare", 8},
		{"8 RBD disks, start begin (no-op)", "start", 8},
	}
	fmt.Printf("rbdfence-hook as libvirtd runs it (qemu.d wrapper + binary, <domain> <op> begin -, XML on stdin), %d runs each\n", n)
	fmt.Printf("%-34s %-10s %-10s %-10s\n", "case (prepare begin)", "median", "min", "p90")
	for _, bc := range cases {
		var disks []libvirttest.RBDDisk
		for i := 0; i < bc.disks; i++ {
			disks = append(disks, libvirttest.RBDDisk{Image: images[i], Mon: c.Mon, User: c.User,
				SecretUUID: "5b2f3a0e-6a5e-4d0e-9b66-0f1e8c4f6d21"})
		}
		xml := libvirttest.DomainXML(fmt.Sprintf("one-%d", vm), "kvm", disks)
		var ds []time.Duration
		for i := 0; i <= n; i++ { // the first run warms the page cache and is dropped
			d, err := callHook(entry, xml, fmt.Sprintf("one-%d", vm), bc.op)
			if err != nil {
				return fmt.Errorf("%s: %v", bc.name, err)
			}
			if i > 0 {
				ds = append(ds, d)
			}
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		p90 := ds[(len(ds)*9+9)/10-1]
		fmt.Printf("%-34s %-10s %-10s %-10s\n", bc.name, ms(ds[len(ds)/2]), ms(ds[0]), ms(p90))
	}
	return nil
}

// callHook runs the hook once as libvirtd does and times it.
func callHook(entry, xml, domain, op string) (time.Duration, error) {
	cmd := exec.Command(entry, domain, op, "begin", "-")
	cmd.Env = []string{"LC_ALL=C", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	cmd.Stdin = strings.NewReader(xml)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return d, fmt.Errorf("%v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return d, nil
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}
