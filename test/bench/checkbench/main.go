// Command checkbench times `rbdfence check` on 1, 4, 16 and 64 images side
// by side, in one run, with the shell baseline an operator would write
// (`rbd lock ls` plus `rbd status` per image), and prints medians and ratios.
// It uses the test cluster (test/ceph/cluster.sh) and client.libvirt.
//
//	make bench            # or: go run -tags pacific ./test/bench/checkbench -reps 7
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/test/testenv"
)

func main() {
	reps := flag.Int("reps", 7, "repetitions per size (medians are reported)")
	bin := flag.String("rbdfence", "bin/rbdfence", "rbdfence binary")
	flag.Parse()
	if err := run(*reps, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "checkbench:", err)
		os.Exit(1)
	}
}

func run(reps int, bin string) error {
	var c *testenv.Ceph
	if err := testenv.RunProgram(func(t testenv.T) error { c = testenv.StartCeph(t); return nil }); err != nil {
		return err
	}
	sizes := []int{1, 4, 16, 64}
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
	cfg := filepath.Join(dir, "rbdfence.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("ceph:\n  mon_host: \"%s\"\n  user: %s\n  keyring: %s\naudit_log: %s/audit.log\n",
		c.MonHost, c.User, c.Keyring, dir)), 0o600)

	fmt.Printf("rbdfence check vs shell baseline (rbd lock ls + rbd status per image), %d reps, medians\n", reps)
	fmt.Printf("%-7s %-16s %-16s %s\n", "images", "rbdfence check", "baseline", "speed-up")
	for _, n := range sizes {
		imgs := images[:n]
		ours := []string{"check", "--config", cfg}
		for _, im := range imgs {
			ours = append(ours, "--image", im)
		}
		var script strings.Builder
		for _, im := range imgs {
			fmt.Fprintf(&script, "rbd -c %s --id %s --keyring %s lock ls %s >/dev/null && rbd -c %s --id %s --keyring %s status %s >/dev/null || exit 1\n",
				c.Conf, c.User, c.Keyring, im, c.Conf, c.User, c.Keyring, im)
		}
		var a, b []time.Duration
		for i := 0; i < reps; i++ { // interleaved: both see the same noise
			d, err := timeIt(exec.Command(bin, ours...))
			if err != nil {
				return err
			}
			a = append(a, d)
			d, err = timeIt(exec.Command("bash", "-c", script.String()))
			if err != nil {
				return err
			}
			b = append(b, d)
		}
		ma, mb := median(a), median(b)
		fmt.Printf("%-7d %-16s %-16s %.1fx\n", n, ma.Round(time.Millisecond), mb.Round(time.Millisecond), float64(mb)/float64(ma))
	}
	return nil
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
