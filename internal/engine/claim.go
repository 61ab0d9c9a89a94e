package engine

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ClaimObject is the RADOS object that holds VM vm's claim: the VM's
// object, in the claim pool. It holds the claim of one VM vm (Claim.Stime
// says which: another OpenNebula installation sharing the claim pool, or an
// earlier database of the same front-end, has a VM vm too); a VM whose
// object holds another VM's claim keeps its own in ClaimObjectOf.
func ClaimObject(vm int) string { return "rbdfence.vm." + strconv.Itoa(vm) }

// ClaimObjectOf is the object of the claim of VM vm created at stime (its
// STIME in oned), used when ClaimObject holds another VM's claim.
func ClaimObjectOf(vm int, stime int64) string {
	return ClaimObject(vm) + "." + strconv.FormatInt(stime, 10)
}

// ParseClaimObject returns the VM id and STIME (0 for ClaimObject) a claim
// object's name is for; ok is false for any other object.
func ParseClaimObject(oid string) (vm int, stime int64, ok bool) {
	rest, found := strings.CutPrefix(oid, "rbdfence.vm.")
	if !found {
		return 0, 0, false
	}
	id, st, two := strings.Cut(rest, ".")
	vm, err := strconv.Atoi(id)
	if err != nil || vm < 0 || strconv.Itoa(vm) != id {
		return 0, 0, false
	}
	if !two {
		return vm, 0, true
	}
	stime, err = strconv.ParseInt(st, 10, 64)
	if err != nil || stime <= 0 || strconv.FormatInt(stime, 10) != st {
		return 0, 0, false
	}
	return vm, stime, true
}

// Claim is the per-VM record kept in the claim object: which deploy of the VM
// may run, where, and the client addresses of the instance that runs.
type Claim struct {
	VM int `json:"vm"`
	// Stime identifies the VM the claim is for with VM: its STIME, when
	// oned created it (release-7.4.0 src/vm/VirtualMachine.cc:56, constant
	// for the VM's life), as oned reports it (/VM/STIME) and writes it into
	// every deployment file (<one:stime>, src/vmm/LibVirtDriverKVM.cc:
	// 2826-2828; release-6.10.5 :2315-2317). VM ids are per oned: another
	// installation sharing the claim pool, or the same front-end rebuilt
	// with a fresh database, has a VM of the same id with another STIME.
	// 0: written by a version (or a step) that did not know it.
	Stime int64 `json:"stime,omitempty"`
	// Seq is OpenNebula's HISTORY SEQ of the deploy; -1 when unknown (hook only).
	Seq int `json:"seq"`
	// SeqStime is the STIME of oned's HISTORY record Seq (oned's clock,
	// release-7.4.0 src/vm/History.cc:306), when the front-end that wrote
	// the deploy knew it; 0 when unknown. It tells the record apart from one
	// with the same SEQ that oned makes again after its database was
	// restored from an older backup (see unknownDeploy).
	SeqStime int64 `json:"seq_stime,omitempty"`
	// Host is where the admitted instance runs (or is starting).
	Host string `json:"host"`
	// HostAddrs are Host's own addresses, recorded when the step ran on Host:
	// the libvirt hook recognises its host by them even when OpenNebula
	// names the host differently (an IP, an FQDN) from its host_name.
	HostAddrs []netip.Addr `json:"host_addrs,omitempty"`
	// Source is who wrote the claim: "frontend", "hook" or "cli".
	Source string `json:"source"`
	// State is "starting", "running" or "migrating".
	State string `json:"state"`
	// Addrs are the client addresses of the admitted instance, recorded after it
	// started; the next start elsewhere blocklists them even if not visible.
	Addrs []Addr `json:"addrs,omitempty"`
	// Images are the recorded addresses per image ("pool/name"), for the
	// images the instance writes exclusively (not shareable, not
	// read-only); Addrs is their union. A disk's entry stays when it is
	// detached or recorded through another Ceph access.
	Images map[string][]Addr `json:"images,omitempty"`
	// Instance identifies the admitted instance by the deployment file it
	// runs: the `<one:deployment_time>` OpenNebula writes into every
	// deployment file (time(0) when oned generates it: release-7.4.0
	// src/vmm/LibVirtDriverKVM.cc:2831-2833, release-6.10.5 :2318-2320).
	// Every new deploy, resume from POWEROFF or UNKNOWN, recover --retry
	// or --recreate and reschedule generates a new file, so a new value; a
	// live migration carries the source domain's XML unchanged (`virsh
	// migrate --live` without --xml: release-7.4.0
	// src/vmm_mad/remotes/lib/kvm/opennebula_vm.rb:302-303, called from
	// src/vmm_mad/remotes/kvm/migrate:306) and a restore reuses the
	// checkpoint's embedded XML (src/vmm_mad/remotes/kvm/restore:79,105
	// of both releases), so both keep it. 0 when unknown: the instance
	// started before rbdfence recorded it, the hook's record failed
	// open, or its XML has no OpenNebula metadata. Older rbdfence
	// versions ignore the field (and drop it when they rewrite the claim).
	Instance int64 `json:"instance,omitempty"`
	// Earlier are client addresses recorded for earlier instances or
	// copies of the VM that no step has fenced: the source of a migration
	// (its QEMU may outlive it, cut off from Ceph), a window's destination
	// copy, an address a record no longer sees. The next start fences them
	// with the instance's (Transition's carry rule: a rewrite keeps every
	// address it does not fence).
	Earlier []Addr    `json:"earlier,omitempty"`
	Window  *Window   `json:"window,omitempty"`
	Run     string    `json:"run"`
	Updated time.Time `json:"updated"`
}

// Window is an open live-migration handover of the claim's deploy from Src
// to Dst. Only the incoming migration it was opened for is admitted on Dst
// without a fence: the hook's `migrate begin` checks the window and keeps
// it in its mark, and the `prepare` that follows is a handover only while
// the claim still holds that very window (Same). Any other start on Dst is
// judged as a start: a newer deploy fences the source, anything else is
// refused.
type Window struct {
	Src string `json:"src"`
	Dst string `json:"dst"`
	// Seq is the migration's deploy: the destination's HISTORY SEQ, which
	// oned adds before the migrate driver runs (-1 when unknown).
	Seq int `json:"seq"`
	// From is the deploy that runs on Src (the claim's Seq when opened).
	From int `json:"from"`
	// Instance is the identity (Claim.Instance) of the instance the window
	// hands over: the claim's when the window was opened, 0 when unknown.
	// The incoming migration must carry it (see handover).
	Instance int64 `json:"instance,omitempty"`
	// Run is the premigrate run that opened the window: the same in every
	// cluster's claim of the VM (see Same).
	Run     string    `json:"run,omitempty"`
	Opened  time.Time `json:"opened"`
	Expires time.Time `json:"expires"`
	// DstAddrs are the client addresses of the instance started on Dst by
	// the migration, recorded by the hook at `started`: until postmigrate
	// says which copy won, a start elsewhere fences both.
	DstAddrs []Addr `json:"dst_addrs,omitempty"`
}

// Recorded returns every client address c records: the instance's (per
// image and in Addrs), earlier instances' not fenced yet (Earlier), and an
// open window's destination copy. A start of a newer instance fences them
// all.
func (c *Claim) Recorded() []Addr {
	if c == nil {
		return nil
	}
	var out []Addr
	add := func(as []Addr) {
		for _, a := range as {
			out = appendUnique(out, a)
		}
	}
	add(c.Addrs)
	keys := make([]string, 0, len(c.Images))
	for k := range c.Images {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		add(c.Images[k])
	}
	add(c.Earlier)
	if c.Window != nil {
		add(c.Window.DstAddrs)
	}
	return out
}

// Same reports whether w and o are the same handover (one premigrate): the
// same migration, opened by the same premigrate run. A
// VM with disks in several clusters has a window in each cluster's claim,
// each opened at its own time by that one run: the hook's mark keeps one of
// them and every cluster's claim must hold its own window of that run.
// Windows of versions that did not record the run compare their open time.
func (w *Window) Same(o *Window) bool {
	if w == nil || o == nil || w.Src != o.Src || w.Dst != o.Dst || w.Seq != o.Seq {
		return false
	}
	if w.Run != "" && o.Run != "" {
		// The claims of two clusters may hold different deploys (a close
		// step that ended after one cluster): From is each claim's own,
		// checked against it by handover.
		return w.Run == o.Run
	}
	return w.From == o.From && w.Opened.Equal(o.Opened)
}

// Claim states.
const (
	StateStarting  = "starting"
	StateRunning   = "running"
	StateMigrating = "migrating"
)

// Claim sources.
const (
	SourceFrontend = "frontend"
	SourceHook     = "hook"
	SourceCLI      = "cli"
)

// Who identifies the party acting on a claim.
type Who struct {
	VM     int
	Seq    int // -1 when unknown
	Host   string
	Source string
	Run    string // unique id of this run
	Pool   string // pool that holds the claim object
	// HostIPs are the addresses Ceph sees for clients of the machine running
	// this step when it is Host itself (empty when the step runs elsewhere,
	// e.g. on the front-end). Only global unicast addresses identify a host.
	HostIPs []netip.Addr
	// Behind are the addresses Ceph sees for the clients of the machine
	// running this step that are not the machine's own (HostView.Behind):
	// NAT toward Ceph, or host_addresses that are not what Ceph sees. Its
	// clients cannot then be told from another host's by address.
	Behind []netip.Addr
	// Incoming is the handover this start or record belongs to: the window
	// the hook's `migrate begin` accepted, kept in its incoming-migration
	// mark. nil for every other start (the front-end's always).
	Incoming *Window
	// Instance is the identity (Claim.Instance, the deployment_time) of the
	// domain this step is about: the hook's domain XML, the front-end's
	// deployment file; 0 when unknown.
	Instance int64
	// Domain is what libvirt said about the VM's domain on Host: the host
	// step asks it for the front-end's start. The hook's own start leaves
	// it unasked: libvirt is starting the domain, so it does not run there.
	// For a failmigrate (Failed, FailedFromSource) it is what libvirt on
	// the migration's source said, with the domain's job: a failmigrate
	// fences only when the VM runs there and no job of it does.
	Domain Domain
	// Restore: the start is OpenNebula's restore (`onevm resume` of a
	// SUSPENDED VM), which only wakes a guest that suspended itself to RAM.
	Restore bool
	// Stime is the VM's STIME (Claim.Stime): the front-end's from oned or
	// the deployment file, the hook's from the domain XML; 0 when unknown.
	Stime int64
	// History is the VM's placements as oned has them (its HISTORY
	// records), when the front-end knows them: a claim an older version
	// wrote is the VM's when one of them is the claim's deploy on the
	// claim's host (see belongs).
	History []Placement
}

// Placement is one HISTORY record of a VM: deploy Seq on Host, started at
// Stime (its STIME; 0 when unknown).
type Placement struct {
	Seq   int    `json:"seq"`
	Host  string `json:"host"`
	Stime int64  `json:"stime,omitempty"`
}

// Domain is libvirt's answer about the VM's domain (one-<VM>) on a host.
type Domain struct {
	Seen DomainSeen `json:"seen"`
	// Said is libvirt's words: the state virsh printed, or why there was
	// no answer.
	Said string `json:"said,omitempty"`
	// Job is what libvirt said about the domain's job (virsh domjobinfo),
	// asked only for a failmigrate, on the source: whether the migration
	// that failmigrate would fence the destination of may still run.
	Job JobSeen `json:"job"`
	// JobSaid is libvirt's words about the job.
	JobSaid string `json:"job_said,omitempty"`
}

// JobSeen is what libvirt said about a domain's job: only JobNone is
// knowledge that no migration of it runs.
type JobSeen int

// What libvirt said about the job.
const (
	// JobUnasked: nobody asked (every step but failmigrate on the source,
	// or the domain was not active there).
	JobUnasked JobSeen = iota
	// JobNone: "Job type: None": no job of the domain runs.
	JobNone
	// JobRunning: a job runs (an outgoing migration among them).
	JobRunning
	// JobNoAnswer: libvirt could not be asked about the job (an error, a
	// timeout, the domain vanished between the two questions).
	JobNoAnswer
)

// DomainSeen is what libvirt's answer says: only Absent is knowledge that
// no instance of the VM runs on the host under libvirt.
type DomainSeen int

// What libvirt said.
const (
	// DomainUnasked: nobody asked (the hook's own start; a check).
	DomainUnasked DomainSeen = iota
	// DomainAbsent: no such domain, or shut off or crashed: no QEMU.
	DomainAbsent
	// DomainActive: the domain runs (running, paused, ...): its QEMU does.
	DomainActive
	// DomainAsleep: the guest suspended itself to RAM (pmsuspended); its
	// QEMU runs. OpenNebula shows it SUSPENDED; its restore wakes it.
	DomainAsleep
	// DomainNoAnswer: libvirt could not be asked: an error, a timeout, or
	// the step does not run on the host (opennebula.remote: local).
	DomainNoAnswer
)

// sameHost reports whether the claim's host is the host w runs on.
func sameHost(c *Claim, w Who) bool {
	return c != nil && isHost(c.Host, c.HostAddrs, w)
}

// isHost reports whether the host called name, with recorded addresses
// addrs, is the host w runs on: exactly the same name (case-insensitive; a
// first label is no identity: kvm1.dc1 and kvm1.dc2 are two hosts), a name
// that is an IP address Ceph sees for w's clients, or a shared recorded
// address. Only global unicast addresses identify a host.
func isHost(name string, addrs []netip.Addr, w Who) bool {
	if name != "" && strings.EqualFold(name, w.Host) {
		return true
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		addrs = append([]netip.Addr{ip.Unmap()}, addrs...)
	}
	for _, a := range addrs {
		for _, b := range w.HostIPs {
			if a == b && a.IsGlobalUnicast() {
				return true
			}
		}
	}
	return false
}

// mark records w's addresses in c when c's host is w's own, keeping those
// recorded before (the front-end's step on the host, the hook's).
func (w Who) mark(c *Claim) {
	if len(w.HostIPs) == 0 || !isHost(c.Host, c.HostAddrs, w) {
		return
	}
	for _, a := range w.HostIPs {
		if !slices.Contains(c.HostAddrs, a) {
			c.HostAddrs = append(c.HostAddrs, a)
		}
	}
}

func (w Who) cookie() string {
	return fmt.Sprintf("host=%s source=%s run=%s seq=%d", w.Host, w.Source, w.Run, w.Seq)
}
