// Command checkbench times `rbdfence check` on 1, 4, 16 and 64 images side
// by side, in one run, with two baselines, and prints medians and ratios:
//
//   - the floor: test/bench/floor/floor.cc, a C++ program built here with g++
//     that does only the reads check needs on one librados connection
//     (every rbd_id read at once, then every header's cls lock get_info and
//     list_watchers at once), with no librbd, no config file and no logging;
//   - the shell loop an operator would write (`rbd lock ls` plus
//     `rbd status` per image).
//
// `rbdfence version` (start-up alone, no Ceph) is timed in the same rounds.
// Each round runs every program once, the fast ones in an order that rotates
// from round to round, so that all see the same noise, the rbd CLI loop last
// (its seconds of load would otherwise fall on whichever program follows). It uses the test cluster
// (test/ceph/cluster.sh) and client.libvirt.
//
//	make bench            # or: go run -tags pacific ./test/bench/checkbench -reps 9
//	go run -tags pacific ./test/bench/checkbench -shell=false -sizes 16,64 -reps 21
//	go run -tags pacific ./test/bench/checkbench -compare /tmp/rbdfence-main   # before/after in one run
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

func main() {
	reps := flag.Int("reps", 7, "repetitions per size (medians are reported)")
	bin := flag.String("rbdfence", "bin/rbdfence", "rbdfence binary")
	sizes := flag.String("sizes", "1,4,16,64", "image counts, comma-separated (at most 64)")
	shell := flag.Bool("shell", true, "also time the rbd CLI loop (slow: seconds per round at 64 images)")
	other := flag.String("compare", "", "another rbdfence binary (e.g. built from main) timed in the same rounds")
	flag.Parse()
	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 64 {
			fmt.Fprintf(os.Stderr, "checkbench: -sizes: %q is not a count from 1 to 64\n", s)
			os.Exit(2)
		}
		ns = append(ns, n)
	}
	if *reps < 1 {
		fmt.Fprintln(os.Stderr, "checkbench: -reps must be at least 1")
		os.Exit(2)
	}
	if err := run(*reps, *bin, *other, ns, *shell); err != nil {
		fmt.Fprintln(os.Stderr, "checkbench:", err)
		os.Exit(1)
	}
}

// buildFloor compiles floor.cc into dir and returns the program's path.
func buildFloor(dir string) (string, error) {
	src := filepath.Join(testenv.Root(), "test/bench/floor/floor.cc")
	out := filepath.Join(dir, "floor")
	cmd := exec.Command("g++", "-O2", "-std=c++17", "-o", out, src, "-lrados")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the floor program (g++, libradospp-dev): %v\n%s", err, b)
	}
	return out, nil
}

// prog is one timed program of a round.
type prog struct {
	name string
	cmd  func() *exec.Cmd
	d    []time.Duration
}

func run(reps int, bin, other string, sizes []int, shell bool) error {
	var c *testenv.Ceph
	if err := testenv.RunProgram(func(t testenv.T) error { c = testenv.StartCeph(t); return nil }); err != nil {
		return err
	}
	var names []string
	for i := 0; i < 64; i++ {
		names = append(names, fmt.Sprintf("bench-%02d", i))
	}
	var images []string
	if err := testenv.RunProgram(func(t testenv.T) error { images = c.EnsureImages(t, names, "16M"); return nil }); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "checkbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	floor, err := buildFloor(dir)
	if err != nil {
		return err
	}
	cfg := filepath.Join(dir, "rbdfence.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("ceph:\n  mon_host: \"%s\"\n  user: %s\n  keyring: %s\naudit_log: %s/audit.log\n",
		c.MonHost, c.User, c.Keyring, dir)), 0o600); err != nil {
		return err
	}

	fmt.Printf("rbdfence check vs the floor (%s) and the rbd CLI loop (rbd lock ls + rbd status per image);\n", "test/bench/floor")
	fmt.Printf("%d rounds, each program once per round (rotating order, the rbd CLI loop last), medians;\n", reps)
	fmt.Printf("paired: the median of the rounds' own check/floor ratios (robust to load that changes between rounds)\n")
	fmt.Printf("%-7s %-10s %-10s %-12s %-8s %-12s %s\n", "images", "check", "floor", "check/floor", "paired", "rbd CLI", "CLI/check")
	var versions, otherVersions []time.Duration
	for _, n := range sizes {
		imgs := images[:n]
		ours := []string{"check", "--config", cfg}
		fl := []string{"--mon-host", c.MonHost, "--id", c.User, "--keyring", c.Keyring}
		for _, im := range imgs {
			ours = append(ours, "--image", im)
			fl = append(fl, im)
		}
		var script strings.Builder
		for _, im := range imgs {
			fmt.Fprintf(&script, "rbd -c %s --id %s --keyring %s lock ls %s >/dev/null && rbd -c %s --id %s --keyring %s status %s >/dev/null || exit 1\n",
				c.Conf, c.User, c.Keyring, im, c.Conf, c.User, c.Keyring, im)
		}
		progs := []*prog{
			{name: "check", cmd: func() *exec.Cmd { return exec.Command(bin, ours...) }},
			{name: "floor", cmd: func() *exec.Cmd { return exec.Command(floor, fl...) }},
			{name: "version", cmd: func() *exec.Cmd { return exec.Command(bin, "version") }},
		}
		cli, cmp := -1, -1
		if shell {
			cli = len(progs)
			progs = append(progs, &prog{name: "rbd CLI", cmd: func() *exec.Cmd { return exec.Command("bash", "-c", script.String()) }})
		}
		if other != "" {
			cmp = len(progs)
			progs = append(progs, &prog{name: "compare check", cmd: func() *exec.Cmd { return exec.Command(other, ours...) }},
				&prog{name: "compare version", cmd: func() *exec.Cmd { return exec.Command(other, "version") }})
		}
		// The fast programs run in an order that rotates from round to round;
		// the rbd CLI loop (seconds of load on both cores) runs last, then
		// the cluster gets a moment before the next round.
		var fast []*prog
		for k, p := range progs {
			if k != cli {
				fast = append(fast, p)
			}
		}
		for i := 0; i < reps; i++ {
			order := append([]*prog{}, fast[i%len(fast):]...)
			order = append(order, fast[:i%len(fast)]...)
			if cli >= 0 {
				order = append(order, progs[cli])
			}
			for _, p := range order {
				d, err := timeIt(p.cmd())
				if err != nil {
					return err
				}
				p.d = append(p.d, d)
			}
			if cli >= 0 {
				time.Sleep(200 * time.Millisecond)
			}
		}
		versions = append(versions, progs[2].d...)
		mc, mf := median(progs[0].d), median(progs[1].d)
		clis, speed := "-", "-"
		if cli >= 0 {
			mcli := median(progs[cli].d)
			clis, speed = mcli.Round(time.Millisecond).String(), fmt.Sprintf("%.1fx", float64(mcli)/float64(mc))
		}
		var ratios []float64
		for i := range progs[0].d {
			ratios = append(ratios, float64(progs[0].d[i])/float64(progs[1].d[i]))
		}
		sort.Float64s(ratios)
		fmt.Printf("%-7d %-10s %-10s %-12s %-8s %-12s %s\n", n, ms(mc), ms(mf), fmt.Sprintf("%.2fx", float64(mc)/float64(mf)),
			fmt.Sprintf("%.2fx", ratios[len(ratios)/2]), clis, speed)
		if cmp >= 0 {
			mo := median(progs[cmp].d)
			var oratios []float64
			for i := range progs[cmp].d {
				oratios = append(oratios, float64(progs[cmp].d[i])/float64(progs[1].d[i]))
			}
			sort.Float64s(oratios)
			fmt.Printf("%-7s %-10s %-10s %-12s %-8s (%s, same rounds)\n", "", ms(mo), "", fmt.Sprintf("%.2fx", float64(mo)/float64(mf)),
				fmt.Sprintf("%.2fx", oratios[len(oratios)/2]), other)
			otherVersions = append(otherVersions, progs[cmp+1].d...)
		}
	}
	fmt.Printf("rbdfence version (start-up alone), same rounds: %s\n", ms(median(versions)))
	if other != "" {
		fmt.Printf("%s version, same rounds: %s\n", other, ms(median(otherVersions)))
	}
	return nil
}

// ms prints d in milliseconds with one decimal.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

func timeIt(cmd *exec.Cmd) (time.Duration, error) {
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args[:2], " "), err, out)
	}
	return time.Since(start), nil
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
