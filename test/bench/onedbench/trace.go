package main

// -trace: where the time of one deploy and one live migration goes, per
// process. perf records the kernel's sched_process_fork, _exec and _exit
// tracepoints machine-wide (no ptrace: the processes run at full speed)
// and every connect(2) (a TCP connection to a host's sshd, a Ceph monitor
// or OSD, oned's XML-RPC, libvirt's unix socket), with CLOCK_MONOTONIC
// timestamps; the report is the tree of processes that the front-end's
// oned and the hosts' libvirtd and sshd ran during the operation, each with
// its start (from the onevm command), its run time and its connects.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbdfence/rbdfence/test/oned"
	"github.com/rbdfence/rbdfence/test/testenv"
)

// monoNow is CLOCK_MONOTONIC, perf's -k CLOCK_MONOTONIC timestamps' clock.
func monoNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// recorder is one perf record run.
type recorder struct {
	cmd  *exec.Cmd
	data string
}

func startPerf(dir string) (*recorder, error) {
	data := filepath.Join(dir, "perf.data")
	cmd := exec.Command("perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-a", "-o", data,
		"-e", "sched:sched_process_fork,sched:sched_process_exec,sched:sched_process_exit,syscalls:sys_enter_connect")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("perf record (apt install linux-perf): %w", err)
	}
	// perf needs a moment before it records.
	time.Sleep(2 * time.Second)
	return &recorder{cmd: cmd, data: data}, nil
}

// stop ends the recording and returns perf script's text.
func (r *recorder) stop() ([]byte, error) {
	_ = r.cmd.Process.Signal(syscall.SIGINT)
	_ = r.cmd.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "perf", "script", "-i", r.data, "-F", "comm,pid,tid,time,event,trace").Output()
	if err != nil {
		return nil, fmt.Errorf("perf script: %w", err)
	}
	return out, nil
}

// tproc is one process (or thread) seen in the recording.
type tproc struct {
	pid, parent int
	start, end  time.Duration // fork (or first sight), exit; 0: not seen
	file        string        // the last exec's file name
	execAt      time.Duration
	connects    int
	thread      bool // a thread, not a process
	machine     string
	kids        []*tproc
}

var (
	reLine  = regexp.MustCompile(`^\s*(.+?)\s+(\d+)/(\d+)\s+(\d+\.\d+):\s+(\S+):\s*(.*)$`)
	reChild = regexp.MustCompile(`child_pid=(\d+)`)
	reFile  = regexp.MustCompile(`filename=(\S+)`)
)

// parsePerf reads perf script -F comm,pid,tid,time,event,trace output.
func parsePerf(out []byte) map[int]*tproc {
	procs := map[int]*tproc{}
	get := func(pid int, at time.Duration) *tproc {
		p := procs[pid]
		if p == nil {
			p = &tproc{pid: pid, start: at}
			procs[pid] = p
		}
		return p
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := reLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[2])
		tid, _ := strconv.Atoi(m[3])
		sec, _ := strconv.ParseFloat(m[4], 64)
		at := time.Duration(sec * 1e9)
		switch ev, rest := m[5], m[6]; ev {
		case "sched:sched_process_fork":
			if c := reChild.FindStringSubmatch(rest); c != nil {
				cp, _ := strconv.Atoi(c[1])
				k := get(cp, at)
				k.start, k.parent = at, pid // the forking process (a thread of it may fork)
			}
		case "sched:sched_process_exec":
			p := get(tid, at)
			if f := reFile.FindStringSubmatch(rest); f != nil {
				p.file, p.execAt = f[1], at
			}
		case "sched:sched_process_exit":
			// A process ends with its last thread (group_dead), whichever.
			if strings.Contains(rest, "group_dead=true") {
				get(pid, at).end = at
			}
			if tid != pid {
				get(tid, at).thread = true
			}
		case "syscalls:sys_enter_connect":
			get(pid, at).connects++
		}
	}
	for _, p := range procs {
		if q := procs[p.parent]; q != nil && q != p {
			q.kids = append(q.kids, p)
		}
	}
	for _, p := range procs {
		sort.Slice(p.kids, func(i, j int) bool { return p.kids[i].start < p.kids[j].start })
	}
	return procs
}

// nsPids are the pids of the processes in the mount namespace recorded in
// file (test/oned's <machine>/mntns).
func nsPids(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	mnt := strings.TrimSpace(string(b))
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns/mnt")); err == nil && l == mnt {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// span is one traced operation: its name and monotonic start and end.
type span struct {
	name       string
	start, end time.Duration
}

// traceRounds runs n rounds of the flavours under perf (the order
// alternating by round, the home host too): each a fresh VM's deploy on
// home, its live migration to the other host and back home (as in the
// timed rounds). It prints the process tree of each operation of the first
// round and, over the rounds, the time of the VMM action (actionTime) by flavour: what rbdfence adds
// without the noise of PROLOG (the Ceph clone) and of oned's queues.
func traceRounds(t testenv.T, s *oned.Stack, hooks []hookFile, img oned.Image, mode string, flavours []*flavour, n int) error {
	dir, err := os.MkdirTemp("", "onedbench-trace")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	type acts struct{ deploy, migrate, back, toRunD, toRunM, toRunB []time.Duration }
	got := map[string]*acts{}
	for r := 0; r < n; r++ {
		order := flavours
		if r%2 == 1 {
			order = []*flavour{flavours[1], flavours[0]}
		}
		home, away := s.Hosts[r%2], s.Hosts[1-r%2]
		for _, f := range order {
			spans, procs, err := traceOne(t, s, hooks, img, mode, f, home, away, dir, r)
			if err != nil {
				return err
			}
			a := got[f.name]
			if a == nil {
				a = &acts{}
				got[f.name] = a
			}
			a.deploy = append(a.deploy, actionTime(procs, spans[0]))
			a.migrate = append(a.migrate, actionTime(procs, spans[1]))
			a.toRunD = append(a.toRunD, spans[0].end-spans[0].start)
			a.toRunM = append(a.toRunM, spans[1].end-spans[1].start)
			a.back = append(a.back, actionTime(procs, spans[2]))
			a.toRunB = append(a.toRunB, spans[2].end-spans[2].start)
			fmt.Fprintf(os.Stderr, "traced ssh %s round %d/%d %s (home %s): VMM action / to RUNNING: deploy %s / %s, migrate %s / %s, back %s / %s\n",
				mode, r+1, n, f.name, home.Name, last(a.deploy, 1), last(a.toRunD, 1), last(a.migrate, 1), last(a.toRunM, 1), last(a.back, 1), last(a.toRunB, 1))
			if r == 0 {
				printTrees(procs, spans, f.name, mode, s, home, away)
			}
		}
	}
	w, b := got[flavours[0].name], got[flavours[1].name]
	fmt.Printf("\ntraced, ssh %s, %d rounds: the VMM action (deploy-rbdfence or the driver's remote deploy; migrate-rbdfence or the driver's migrate), medians\n", mode, n)
	reportAction("deploy action", w.deploy, b.deploy, b.toRunD)
	reportAction("live migration action", w.migrate, b.migrate, b.toRunM)
	reportAction("  and back home", w.back, b.back, b.toRunB)
	return nil
}

// reportAction prints the action's medians with and without rbdfence,
// their difference and the median of the rounds' differences, each also as
// a share of the baseline's median time to RUNNING in the same rounds.
func reportAction(name string, with, without, baseToRunning []time.Duration) {
	mw, mo, base := median(with), median(without), median(baseToRunning)
	var pair []time.Duration
	for i := range with {
		pair = append(pair, with[i]-without[i])
	}
	mp := median(pair)
	fmt.Printf("  %-22s with rbdfence %7s  without %7s  difference %+7s (%+.1f%% of the baseline's %s to RUNNING); median of the rounds' differences %+7s (%+.1f%%)\n",
		name, mw.Round(time.Millisecond), mo.Round(time.Millisecond), (mw - mo).Round(time.Millisecond), 100*float64(mw-mo)/float64(base),
		base.Round(time.Millisecond), mp.Round(time.Millisecond), 100*float64(mp)/float64(base))
}

// traceOne is one flavour's VM of round r under perf: its deploy on home,
// its live migration to away and back home, each after the settle pause as
// in the timed rounds, then its end (untraced).
func traceOne(t testenv.T, s *oned.Stack, hooks []hookFile, img oned.Image, mode string, f *flavour, home, away oned.Host, dir string, r int) ([]span, map[int]*tproc, error) {
	if err := use(t, s, hooks, f); err != nil {
		return nil, nil, err
	}
	vm := s.NewVM(t, oned.VMTemplate(fmt.Sprintf("trace-%s-%d-%s", mode, r, f.name), img))
	// After the timed rounds: ssh masters and caches as warm as theirs.
	time.Sleep(settle)
	rec, err := startPerf(dir)
	if err != nil {
		return nil, nil, err
	}
	var spans []span
	op := func(name string, fn func()) {
		if libvirtLog != "" {
			fmt.Fprintf(os.Stderr, "traced %s of VM %d (%s) starts at %s UTC\n", name, vm, f.name, time.Now().UTC().Format("15:04:05.000"))
		}
		t0 := monoNow()
		fn()
		spans = append(spans, span{name, t0, monoNow()})
	}
	op("onevm deploy", func() { deploy(t, s, vm, home) })
	time.Sleep(settle)
	op("onevm migrate --live", func() { migrate(t, s, vm, away) })
	jobInfo(s, f.name, "migrate", vm, away)
	time.Sleep(settle)
	op("onevm migrate --live back", func() { migrate(t, s, vm, home) })
	jobInfo(s, f.name, "back", vm, home)
	out, err := rec.stop()
	s.One(t, "onevm", "terminate", "--hard", strconv.Itoa(vm))
	s.WaitVM(t, vm, "DONE", 2*time.Minute, func(v *oned.VM) bool { return v.State == oned.StateDone })
	if err != nil {
		return nil, nil, err
	}
	return spans, parsePerf(out), nil
}

// jobInfo prints, on one line to stderr, what libvirt on the destination
// says of the migration it completed (virsh domjobinfo --completed): its
// time, setup, downtime, iterations and data, to tell the transfer from
// what is around it.
func jobInfo(s *oned.Stack, flavour, what string, vm int, dst oned.Host) {
	out, err := s.TryHost(dst, fmt.Sprintf("virsh domjobinfo --completed one-%d", vm))
	if err != nil {
		fmt.Fprintf(os.Stderr, "jobinfo %s %s on %s: %v\n", flavour, what, dst.Name, err)
		return
	}
	var kv []string
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch k = strings.TrimSpace(k); k {
		case "Time elapsed", "Time elapsed w/o network", "Setup time", "Total downtime", "Downtime w/o network", "Memory iterations", "Data processed", "Dirty rate", "Memory postcopy requests":
			kv = append(kv, k+"="+strings.Join(strings.Fields(v), ""))
		}
	}
	fmt.Fprintf(os.Stderr, "jobinfo %s %s on %s: %s\n", flavour, what, dst.Name, strings.Join(kv, " "))
}

// actionTime is the run time of the VMM action within sp: the longest
// process that one of oned's VMM drivers (one_vmm_exec.rb, found by its
// command line) forked during sp. For a deploy that is deploy-rbdfence, or
// the driver's ssh that runs the remote deploy; for a live migration
// migrate-rbdfence, or the driver's ssh that runs the remote migrate. The
// hooks run inside it (libvirtd waits for them).
func actionTime(procs map[int]*tproc, sp span) time.Duration {
	driver := map[int]bool{}
	var best time.Duration
	for _, p := range procs {
		if p.thread || p.end == 0 || p.start < sp.start || p.start > sp.end {
			continue
		}
		d, ok := driver[p.parent]
		if !ok {
			b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p.parent), "cmdline"))
			d = bytes.Contains(b, []byte("one_vmm_exec"))
			driver[p.parent] = d
		}
		if d && p.end-p.start > best {
			best = p.end - p.start
		}
	}
	return best
}

// printTrees prints the process tree of each traced operation.
func printTrees(procs map[int]*tproc, spans []span, flavour, mode string, s *oned.Stack, home, away oned.Host) {
	roots := map[int]string{}
	for _, m := range []string{s.FE, home.Name, away.Name} {
		pids, err := nsPids(filepath.Join(oned.Dir(), m, "mntns"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "onedbench: the processes of %s: %v\n", m, err)
		}
		for _, p := range pids {
			roots[p] = m
		}
	}
	self := os.Getpid()
	for _, sp := range spans {
		fmt.Printf("\n%s, %s, ssh %s: %s to RUNNING (polled every 20 ms)\n", sp.name, flavour, mode, (sp.end - sp.start).Round(time.Millisecond))
		fmt.Printf("  %8s %8s %4s  %s\n", "start", "ran", "conn", "machine: exec'd file (children indented)")
		var top []*tproc
		for _, p := range procs {
			if !p.shown(sp) {
				continue
			}
			// Top: no shown ancestor; from one of the stack's machines,
			// not from this program (its onevm polls).
			machine, isTop := "", true
			for q := procs[p.parent]; q != nil; q = procs[q.parent] {
				if q.pid == self {
					machine = ""
					break
				}
				if q.shown(sp) {
					isTop = false
				}
				if m, ok := roots[q.pid]; ok && machine == "" {
					machine = m
				}
				if q.parent == q.pid {
					break
				}
			}
			if m, ok := roots[p.parent]; ok && machine == "" {
				machine = m
			}
			if isTop && machine != "" {
				p.machine = machine
				top = append(top, p)
			}
		}
		sort.Slice(top, func(i, j int) bool { return top[i].start < top[j].start })
		for _, p := range top {
			printTree(p, p.machine, sp, 0)
		}
	}
}

// shown: p is a process that exec'd a file within sp.
func (p *tproc) shown(sp span) bool {
	return p.file != "" && !p.thread && p.execAt >= sp.start && p.execAt <= sp.end
}

// printTree prints p's descendants that exec'd within sp (p itself too),
// indented by depth; a forked child that exec'd nothing (a subshell, a
// thread) is looked through.
func printTree(p *tproc, machine string, sp span, depth int) {
	if p.shown(sp) {
		end := p.end
		ran := "running"
		if end > 0 {
			ran = fmt.Sprintf("%.0fms", float64(end-p.start)/1e6)
		}
		fmt.Printf("  %7.0fms %8s %4d  %s%s: %s\n", float64(p.start-sp.start)/1e6, ran, p.connects, strings.Repeat("  ", depth), machine, p.file)
		depth++
	}
	for _, k := range p.kids {
		printTree(k, machine, sp, depth)
	}
}
