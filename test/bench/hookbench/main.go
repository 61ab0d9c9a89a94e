// Command hookbench measures the libvirt qemu hook's latency as libvirtd
// sees it: the hook installed by `install.sh host` (into a scratch prefix:
// the qemu.d wrapper script, then the binary) is run with libvirt's argv
// `<domain> prepare begin -`, the domain XML on stdin and libvirt's minimal
// environment, for an OpenNebula domain with 0, 1 and 8 RBD disks on clean
// images of the test cluster (test/ceph/cluster.sh), as client.libvirt.
// With RBD disks every run is a full prestart: connect, take and write the
// VM's claim, list lockers and watchers of every image. Then the floors
// under it, as C programs built with cc: an empty process, one with
// librados loaded, one that also connects (issue 30: what a resident
// per-host process could save at most).
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
	return floor(c, dir, n)
}

// floorSrc are the process floors a hook run stands on, as C programs:
// an empty process; one linked with librados (its load and C++ static
// initialisation, which every process of rbdfence's pays); one that also
// connects to the cluster as the hook does (rados_create2, the monitor
// address and keyring, rados_connect with cephx, rados_shutdown). What a
// resident per-host process would save per hook call is at most the last
// one's time less the first one's (issue 30).
var floorSrc = []struct{ name, src string }{
	{"empty process", "int main(void) { return 0; }\n"},
	{"librados loaded", "#include <rados/librados.h>\nint main(int c, char **v) { if (c > 99) rados_create(0, 0); return 0; }\n"},
	{"librados connected", connectSrc("rados_shutdown(r);\n\treturn 0;")},
	{"connected, exit without shutdown", connectSrc("_exit(0);")},
}

// connectSrc is the C program that connects as the hook does and then
// ends with end: a clean rados_shutdown, or _exit without it (what the
// shutdown itself costs).
func connectSrc(end string) string {
	return `#include <rados/librados.h>
#include <stdio.h>
#include <unistd.h>
int main(int c, char **v) {
	rados_t r;
	if (c != 4 || rados_create2(&r, "ceph", v[1], 0) < 0) return 2;
	rados_conf_set(r, "mon_host", v[2]);
	rados_conf_set(r, "keyring", v[3]);
	rados_conf_set(r, "log_to_stderr", "false");
	if (rados_connect(r) < 0) { fprintf(stderr, "rados_connect failed\n"); return 1; }
	` + end + `
}
`
}

// floor builds floorSrc with cc and times each program n times, the three
// interleaved in every round, and prints their medians and differences.
func floor(c *testenv.Ceph, dir string, n int) error {
	var bins []string
	for i, f := range floorSrc {
		src, bin := filepath.Join(dir, fmt.Sprintf("floor%d.c", i)), filepath.Join(dir, fmt.Sprintf("floor%d", i))
		if err := os.WriteFile(src, []byte(f.src), 0o600); err != nil {
			return err
		}
		if out, err := exec.Command("cc", "-O2", "-o", bin, src, "-lrados").CombinedOutput(); err != nil {
			return fmt.Errorf("cc %s: %v\n%s", f.name, err, out)
		}
		bins = append(bins, bin)
	}
	ds := make([][]time.Duration, len(bins))
	for round := 0; round <= n; round++ { // round 0 warms the page cache
		for i, bin := range bins {
			cmd := exec.Command(bin, "client."+c.User, c.Mon, c.Keyring)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			start := time.Now()
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s: %v: %s", floorSrc[i].name, err, strings.TrimSpace(stderr.String()))
			}
			if round > 0 {
				ds[i] = append(ds[i], time.Since(start))
			}
		}
	}
	fmt.Printf("\nprocess floors (C, %d interleaved rounds)\n%-34s %-10s %-10s\n", n, "program", "median", "over the empty process")
	med := make([]time.Duration, len(ds))
	for i := range ds {
		sort.Slice(ds[i], func(a, b int) bool { return ds[i][a] < ds[i][b] })
		med[i] = ds[i][len(ds[i])/2]
		fmt.Printf("%-34s %-10s %-10s\n", floorSrc[i].name, ms(med[i]), ms(med[i]-med[0]))
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
