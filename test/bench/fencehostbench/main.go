// Command fencehostbench measures rbdfence fence-host, OpenNebula's HA hook
// fence: a failed host with 50 VMs x 4 RBD disks, every disk with a client
// instance recorded in the VM's claim (as the deploy records them), of which
// -live per VM are live librbd writers on the "failed host" (127.0.0.2) that
// keep writing. Per repetition it runs the real rbdfence binary as the hook
// does (the host's XML, base64, on stdin) against the oned stand-in and the
// test cluster, and reports the time from the start of fence-host to the last
// live writer blocked (its first write failing with errno 108) and to the
// exit of fence-host, medians over the repetitions. It checks that every
// recorded instance is blocklisted and nothing else.
//
//	go run -tags pacific ./test/bench/fencehostbench [-vms 50] [-disks 4] [-live 1] [-reps 5]
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rbdfence/rbdfence/internal/ceph"
	"github.com/rbdfence/rbdfence/internal/engine"
	"github.com/rbdfence/rbdfence/test/onedsim"
	"github.com/rbdfence/rbdfence/test/testenv"
)

const (
	failedHost = "failed-host"
	failedIP   = "127.0.0.2"
	auth       = "oneadmin:fencehost"
)

func main() {
	vms := flag.Int("vms", 50, "VMs on the failed host")
	disks := flag.Int("disks", 4, "RBD disks per VM")
	live := flag.Int("live", 1, "live writers per VM (its first disks); the other instances are recorded only")
	reps := flag.Int("reps", 5, "repetitions")
	flag.Parse()
	if *vms < 1 || *disks < 1 || *live < 0 || *live > *disks || *reps < 1 {
		fmt.Fprintln(os.Stderr, "fencehostbench: want -vms >= 1, -disks >= 1, 0 <= -live <= -disks, -reps >= 1")
		os.Exit(2)
	}
	if err := testenv.RunProgram(func(t testenv.T) error { return run(t, *vms, *disks, *live, *reps) }); err != nil {
		fmt.Fprintln(os.Stderr, "fencehostbench:", err)
		os.Exit(1)
	}
}

type rep struct {
	lastBlocked, exit time.Duration
}

func run(t testenv.T, nVM, nDisk, nLive, nRep int) error {
	c := testenv.StartCeph(t)
	rbd := testenv.Bin(t, "rbdfence")
	dir, err := os.MkdirTemp("", "fencehostbench-")
	if err != nil {
		return err
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var names []string
	for v := 0; v < nVM; v++ {
		for d := 0; d < nDisk; d++ {
			names = append(names, fmt.Sprintf("fencehost-%03d-%d", v, d))
		}
	}
	c.EnsureImages(t, names, "8M")

	sim := onedsim.New(auth)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		return err
	}
	t.Cleanup(func() { sim.Close() })
	authFile := filepath.Join(dir, "one_auth")
	if err := os.WriteFile(authFile, []byte(auth+"\n"), 0o600); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "rbdfence.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("ceph:\n  mon_host: %q\n  user: %s\n  keyring: %s\nfence:\n  expire: 15m\naudit_log: %s/audit.log\nspool_dir: %s/spool\nstate_dir: %s/state\nopennebula:\n  endpoint: %s\n  auth_file: %s\ntimeouts:\n  total: 120s\n",
		c.Mon, c.User, c.Keyring, dir, dir, dir, sim.URL(), authFile)), 0o600); err != nil {
		return err
	}
	cl, err := ceph.Connect(context.Background(), ceph.Config{MonHost: c.Mon, User: c.User, Keyring: c.Keyring, ConnectTimeout: 10 * time.Second, OpTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	t.Cleanup(cl.Close)
	eng := engine.New(cl, engine.Options{})

	var results []rep
	for r := 0; r < nRep; r++ {
		base := 600000 + os.Getpid()%1000*1000 + r*100 + rand.IntN(50)*10000
		// The VMs, placed on the failed host (deploy 1).
		for v := 0; v < nVM; v++ {
			var ds []onedsim.Disk
			for d := 0; d < nDisk; d++ {
				ds = append(ds, onedsim.Disk{ID: d, ImageID: 0, Source: fmt.Sprintf("%s/fencehost-%03d-%d", c.Pool, v, d), Persistent: true, CephHost: c.Mon, CephKey: c.Keyring})
			}
			if err := sim.Put(onedsim.VM{ID: base + v, Host: failedHost, HostID: 9, Seq: 1, Disks: ds}); err != nil {
				return err
			}
		}
		sim.PutHost(onedsim.Host{ID: 9, Name: failedHost, State: onedsim.HostError, LastMonitored: time.Now().Add(-10 * time.Minute)})

		// Live writers on the failed host, and every instance recorded.
		var zs []*testenv.Zombie
		var zmu sync.Mutex
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		claims := make([]engine.Claim, nVM)
		for v := 0; v < nVM; v++ {
			claims[v] = engine.Claim{Seq: 1, Host: failedHost, Source: engine.SourceFrontend, State: engine.StateRunning, Images: map[string][]engine.Addr{}}
			for d := 0; d < nDisk; d++ {
				img := fmt.Sprintf("%s/fencehost-%03d-%d", c.Pool, v, d)
				if d < nLive {
					wg.Add(1)
					go func(v int, img string) {
						defer wg.Done()
						sem <- struct{}{}
						defer func() { <-sem }()
						z := testenv.StartZombie(t, c, img, "write", "--bind", failedIP, "--interval", "20ms")
						a, err := engine.ParseAddr(z.Addr)
						if err != nil {
							t.Fatal(err)
						}
						zmu.Lock()
						zs = append(zs, z)
						claims[v].Images[img] = []engine.Addr{a}
						claims[v].Addrs = append(claims[v].Addrs, a)
						zmu.Unlock()
					}(v, img)
					continue
				}
				// A recorded instance that is not visible (cut off from Ceph).
				a := engine.Addr{IP: netip.MustParseAddr(failedIP), Port: 0, Nonce: rand.Uint32N(1<<31) + 1}
				claims[v].Images[img] = []engine.Addr{a}
				claims[v].Addrs = append(claims[v].Addrs, a)
			}
		}
		wg.Wait()
		for v := 0; v < nVM; v++ {
			w := engine.Who{VM: base + v, Seq: 1, Host: failedHost, Source: engine.SourceFrontend, Run: "bench", Pool: c.Pool}
			if err := eng.WriteClaim(context.Background(), w, claims[v]); err != nil {
				return err
			}
		}
		for _, z := range zs {
			z.WaitWrite(t, true, 30*time.Second)
		}
		before := c.BlocklistEntries(t)

		// fence-host, as host_error.rb runs ft/fence_host.sh.
		doc, _ := sim.HostXML(9)
		cmd := exec.Command(rbd, "fence-host", "--config", cfg, "--host-addr", failedIP, "-v")
		cmd.Stdin = strings.NewReader(base64.StdEncoding.EncodeToString([]byte(doc)))
		var stderr, stdout bytes.Buffer
		cmd.Stderr, cmd.Stdout = &stderr, &stdout
		blocked := make([]time.Duration, len(zs))
		start := time.Now()
		if err := cmd.Start(); err != nil {
			return err
		}
		var bw sync.WaitGroup
		errs := make([]error, len(zs))
		for i, z := range zs {
			bw.Add(1)
			go func(i int, z *testenv.Zombie) {
				defer bw.Done()
				ev := z.WaitWrite(t, false, 60*time.Second)
				blocked[i] = time.Since(start)
				if ev.Errno != 108 {
					errs[i] = fmt.Errorf("writer %s: errno %d (%s), want 108", z.Addr, ev.Errno, ev.Error)
				}
			}(i, z)
		}
		err := cmd.Wait()
		exit := time.Since(start)
		if err != nil {
			return fmt.Errorf("fence-host: %v\n%s", err, stderr.String())
		}
		bw.Wait()
		for _, e := range errs {
			if e != nil {
				return e
			}
		}
		after := c.BlocklistEntries(t)
		want := map[string]bool{}
		var missing []string
		for v := range claims {
			for _, a := range claims[v].Addrs {
				want[a.String()] = true
				if _, ok := after[a.String()]; !ok {
					missing = append(missing, fmt.Sprintf("%s (VM %d)", a, base+v))
				}
			}
		}
		if len(missing) > 0 {
			time.Sleep(3 * time.Second)
			later := c.BlocklistEntries(t)
			still := 0
			for v := range claims {
				for _, a := range claims[v].Addrs {
					if _, ok := later[a.String()]; !ok {
						still++
					}
				}
			}
			return fmt.Errorf("%d recorded instance(s) not blocklisted (%d still after 3 s): %s; fence-host said:\n%s%s", len(missing), still, strings.Join(missing, ", "), stdout.String(), stderr.String())
		}
		for a := range after {
			if _, old := before[a]; !old && !want[a] {
				return fmt.Errorf("%s was blocklisted but is not a client of the failed host", a)
			}
		}
		sort.Slice(blocked, func(i, j int) bool { return blocked[i] < blocked[j] })
		res := rep{exit: exit}
		if len(blocked) > 0 {
			res.lastBlocked = blocked[len(blocked)-1]
		}
		results = append(results, res)
		phases := ""
		for _, l := range strings.Split(stderr.String(), "\n") {
			if strings.Contains(l, "read in") || strings.Contains(l, "took map") {
				if i := strings.Index(l, "msg=\""); i >= 0 {
					phases += " [" + strings.SplitN(l[i+5:], "\"", 2)[0] + "]"
				}
			}
		}
		fmt.Printf("rep %d: %d client instances fenced (%d live writers): last writer blocked %.2f s, fence-host exit %.2f s;%s\n",
			r+1, len(want), len(zs), res.lastBlocked.Seconds(), exit.Seconds(), phases)
		for _, z := range zs {
			z.Stop()
		}
		for v := 0; v < nVM; v++ {
			sim.RemoveVM(base + v) // the next repetition's host has only its own VMs
		}
	}
	med := func(f func(rep) time.Duration) time.Duration {
		ds := make([]time.Duration, len(results))
		for i, r := range results {
			ds[i] = f(r)
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	fmt.Printf("fence-host: %d VMs x %d RBD disks on a failed host (%d live writers per VM), %d reps, medians: last writer blocked %.2f s, fence-host exit %.2f s (monitor %s)\n",
		nVM, nDisk, nLive, nRep, med(func(r rep) time.Duration { return r.lastBlocked }).Seconds(), med(func(r rep) time.Duration { return r.exit }).Seconds(), c.Mon)
	return nil
}
