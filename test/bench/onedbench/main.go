// Command onedbench measures what rbdfence's front-end local actions cost a
// real deploy and a real live migration: OpenNebula 7.4.0's oned built from
// source (test/oned), two KVM hosts with their own libvirtd, VMs with an RBD
// disk on the suite's Ceph cluster.
//
// The same oned runs both: VM_MAD "kvm" with rbdfence's local actions, as
// `install.sh frontend --apply` leaves it, and VM_MAD "kvmbase", the same
// driver line without them (added by this program). One host is registered
// with each; the other guard, the libvirt hook, is on both hosts. Rounds
// alternate: a deploy (`onevm deploy` to RUNNING, PROLOG included: OpenNebula
// clones the image in Ceph) on the rbdfence host, then one on the plain host,
// each of a fresh VM; then each VM is live migrated to the other host and
// back (the driver of the destination's VM_MAD runs the migration,
// src/vmm/VirtualMachineManager.cc:1187 in 7.4.0). Halfway through the hosts
// swap their VM_MADs, so that a difference between the two hosts cancels
// out. It prints the medians, their difference and rbdfence's share.
//
// Not yet working (Dec 2): the hook on the kvmbase host refuses the
// migration of a VM that rbdfence deployed, as it must ("no migration
// window is open", exit 4; no migrate-rbdfence announced it), so the first
// round stops there. The baseline's migrations need hosts without the hook
// (docs/PERFORMANCE.md).
//
//	go run -tags pacific ./test/bench/onedbench -rounds 10
//
// Needs root; it builds (cached) and starts the suite's stack and leaves it
// running (make test-clean stops it).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rbdfence/rbdfence/test/oned"
	"github.com/rbdfence/rbdfence/test/testenv"
)

func main() {
	rounds := flag.Int("rounds", 10, "rounds (each: a deploy and two live migrations per flavour)")
	flag.Parse()
	if *rounds < 2 {
		fmt.Fprintln(os.Stderr, "onedbench: -rounds must be at least 2")
		os.Exit(2)
	}
	if err := testenv.RunProgram(func(t testenv.T) error { return run(t, *rounds) }); err != nil {
		fmt.Fprintln(os.Stderr, "onedbench:", err)
		os.Exit(1)
	}
}

type sample struct{ deploy, migrate []time.Duration }

func run(t testenv.T, rounds int) error {
	s := oned.Start(t, "fe74")
	if err := addPlainVMMAD(t, s); err != nil {
		return err
	}
	a, b := s.Hosts[0], s.Hosts[1]
	img := s.NewImage(t, "bench", false)
	with, without := &sample{}, &sample{}
	rbdHost, plainHost := a, b
	setHosts(t, s, rbdHost, plainHost)
	load0 := loadavg()
	for r := 0; r < rounds; r++ {
		if r == rounds/2 {
			rbdHost, plainHost = b, a
			setHosts(t, s, rbdHost, plainHost)
		}
		for _, f := range []struct {
			host, other oned.Host
			into        *sample
		}{{rbdHost, plainHost, with}, {plainHost, rbdHost, without}} {
			vm := s.NewVM(t, oned.VMTemplate(fmt.Sprintf("bench-%d", r), img))
			d := timeIt(func() { deploy(t, s, vm, f.host) })
			f.into.deploy = append(f.into.deploy, d)
			// to the other host (its flavour) and back (this one's)
			m1 := timeIt(func() { migrate(t, s, vm, f.other) })
			m2 := timeIt(func() { migrate(t, s, vm, f.host) })
			other := without
			if f.into == without {
				other = with
			}
			other.migrate = append(other.migrate, m1)
			f.into.migrate = append(f.into.migrate, m2)
			s.One(t, "onevm", "terminate", "--hard", strconv.Itoa(vm))
			s.WaitVM(t, vm, "DONE", 2*time.Minute, func(v *oned.VM) bool { return v.State == oned.StateDone })
		}
		fmt.Fprintf(os.Stderr, "round %d/%d: deploy %s / %s, migrate %s / %s (with / without)\n", r+1, rounds,
			last(with.deploy), last(without.deploy), last(with.migrate), last(without.migrate))
	}
	fmt.Printf("onedbench %s, %d rounds, OpenNebula %s, VM_MAD %s; load average at the start %s, at the end %s\n",
		time.Now().UTC().Format("2006-01-02 15:04Z"), rounds, s.Version, s.Hypervisor, load0, loadavg())
	report("onevm deploy -> RUNNING", with.deploy, without.deploy)
	report("onevm migrate --live -> RUNNING", with.migrate, without.migrate)
	return nil
}

// loadavg is /proc/loadavg's 1, 5 and 15 minute figures.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func timeIt(f func()) time.Duration { t0 := time.Now(); f(); return time.Since(t0) }

func last(d []time.Duration) time.Duration { return d[len(d)-1].Round(time.Millisecond) }

func deploy(t testenv.T, s *oned.Stack, vm int, to oned.Host) {
	s.One(t, "onevm", "deploy", strconv.Itoa(vm), to.Name, strconv.Itoa(s.SystemDS))
	waitRunningOn(t, s, vm, to)
}

func migrate(t testenv.T, s *oned.Stack, vm int, to oned.Host) {
	s.One(t, "onevm", "migrate", "--live", strconv.Itoa(vm), to.Name)
	waitRunningOn(t, s, vm, to)
}

// waitRunningOn polls one.vm.info every 20 ms (the tests' WaitVM polls
// twice a second: its step would hide a difference of tens of ms) until the
// VM is RUNNING on to (MigratedTo: after a deploy as after a migration,
// the record of to has its RSTIME); a VM that leaves ACTIVE or a failure fails the run.
func waitRunningOn(t testenv.T, s *oned.Stack, vm int, to oned.Host) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		v := s.ShowVM(t, vm)
		if v.MigratedTo(to.Name) {
			return
		}
		if v.State != oned.StateActive && v.State != oned.StatePending && v.State != oned.StateHold {
			t.Fatalf("VM %d left ACTIVE on its way to RUNNING on %s: %s\n%s", vm, to.Name, v, s.VMLog(t, vm))
		}
		if time.Now().After(deadline) {
			t.Fatalf("VM %d is not RUNNING on %s: %s\n%s", vm, to.Name, v, s.VMLog(t, vm))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func median(d []time.Duration) time.Duration {
	c := append([]time.Duration(nil), d...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

// report prints the medians of both flavours, their difference and
// rbdfence's share of the plain median, and the median of the differences
// within each round (with and without ran one after the other there, under
// the same load).
func report(name string, with, without []time.Duration) {
	mw, mo := median(with), median(without)
	var pair []time.Duration
	for i := range with {
		pair = append(pair, with[i]-without[i])
	}
	mp := median(pair)
	fmt.Printf("%-34s with rbdfence %7s  without %7s  difference %+7s  rbdfence's share %+.1f%%  (medians of %d); median of the rounds' differences %+7s (%+.1f%%)\n",
		name, mw.Round(time.Millisecond), mo.Round(time.Millisecond), (mw - mo).Round(time.Millisecond),
		100*float64(mw-mo)/float64(mo), len(with), mp.Round(time.Millisecond), 100*float64(mp)/float64(mo))
}

// addPlainVMMAD adds VM_MAD "kvmbase": the kvm VM_MAD's driver line
// without rbdfence's -l actions, then restarts oned.
func addPlainVMMAD(t testenv.T, s *oned.Stack) error {
	conf := s.One(t, "cat", "/etc/one/oned.conf")
	if strings.Contains(conf, `NAME           = "kvmbase"`) {
		return nil
	}
	tpl := fmt.Sprintf(`
# onedbench: the kvm driver without rbdfence's local actions
VM_MAD = [
    NAME           = "kvmbase",
    EXECUTABLE     = "one_vmm_exec",
    ARGUMENTS      = "-t 15 -r 0 kvm -p",
    DEFAULT        = "vmm_exec/vmm_exec_kvm.conf",
    TYPE           = "%s",
    KEEP_SNAPSHOTS = "yes",
    LIVE_RESIZE    = "yes",
    SUPPORT_SHAREABLE = "yes"
]
`, s.Hypervisor)
	s.One(t, "bash", "-c", "cat >>/etc/one/oned.conf <<'EOF'"+tpl+"EOF")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return s.Restart(ctx)
}

// setHosts registers rbd with VM_MAD kvm (rbdfence) and plain with kvmbase.
func setHosts(t testenv.T, s *oned.Stack, rbd, plain oned.Host) {
	for _, h := range []struct {
		host oned.Host
		mad  string
	}{{rbd, s.Hypervisor}, {plain, "kvmbase"}} {
		out := s.One(t, "onehost", "show", "-x", h.host.Name)
		if strings.Contains(out, "<VM_MAD><![CDATA["+h.mad+"]]></VM_MAD>") {
			continue
		}
		s.ReplaceHost(t, h.host.Name, h.mad)
	}
}
