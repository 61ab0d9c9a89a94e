package engine

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// ClaimHeldError: another run holds the VM's claim lease right now.
type ClaimHeldError struct {
	VM     int
	Holder string
}

func (e *ClaimHeldError) Error() string {
	return fmt.Sprintf("VM %d is being started or migrated by another run (%s); not starting a second copy: retry when it has finished", e.VM, e.Holder)
}

// NewerDeployError: the claim records a newer deploy than ours.
type NewerDeployError struct {
	VM       int
	Ours     int
	Recorded Claim
}

func (e *NewerDeployError) Error() string {
	return fmt.Sprintf("refused, nothing fenced: VM %d's deploy #%d is older than deploy #%d claimed by host %s at %s; "+
		"if oned's database was restored from a backup, check where VM %d runs; once no copy of it runs on %s, 'rbdfence claim reset --vm %d'",
		e.VM, e.Ours, e.Recorded.Seq, e.Recorded.Host, e.Recorded.Updated.Format(time.RFC3339), e.VM, e.Recorded.Host, e.VM)
}

// UnknownDeployError: a front-end start while the claim says the VM runs
// (or starts) as a deploy that oned's history of the VM does not hold:
// oned lost it (its database restored from a backup taken before it), so
// the deploy oned starts now, whatever its SEQ (each recover --recreate
// raises it), is no knowledge that the claim's instance is gone. Nothing
// is fenced until the operator has checked and reset the claim.
type UnknownDeployError struct {
	VM       int
	Ours     int
	Recorded Claim
}

func (e *UnknownDeployError) Error() string {
	return fmt.Sprintf("refused, nothing fenced: VM %d's claim holds deploy #%d on %s (%s), which oned's history does not (database restored?): "+
		"check where VM %d runs; once no copy of it runs on %s, 'rbdfence claim reset --vm %d', then retry deploy #%d",
		e.VM, e.Recorded.Seq, e.Recorded.Host, e.Recorded.Updated.Format(time.RFC3339), e.VM, e.Recorded.Host, e.VM, e.Ours)
}

// ClaimedElsewhereError: the same deploy is claimed by another host, or the
// front-end assigned the VM to another host.
type ClaimedElsewhereError struct {
	VM       int
	Host     string
	Recorded Claim
}

func (e *ClaimedElsewhereError) Error() string {
	return fmt.Sprintf("VM %d: deploy #%d was claimed by host %s (%s) at %s, not by %s; refusing a second copy",
		e.VM, e.Recorded.Seq, e.Recorded.Host, e.Recorded.Source, e.Recorded.Updated.Format(time.RFC3339), e.Host)
}

// StartedAgainError: the libvirt hook meets a start, on the claim's host,
// of the deploy the front-end claimed whose instance already started there
// (the claim records it running, no migration open). Every start OpenNebula
// makes goes through the front-end first, which marks the claim starting
// (deploy, resume, restore, recover --retry), so this is a domain started
// by hand: above all the stale domain of a VM terminated on that host,
// whose images may be another VM's by now (the soak, seed 29). Fencing
// would blocklist their writers, so nothing is fenced.
type StartedAgainError struct {
	VM       int
	Host     string
	Recorded Claim
}

func (e *StartedAgainError) Error() string {
	return fmt.Sprintf("VM %d: deploy #%d already started on %s (claim written %s) and no OpenNebula start followed; "+
		"refusing a copy started by hand (start VMs with onevm resume or deploy; if the VM is gone, its images may be another VM's)",
		e.VM, e.Recorded.Seq, e.Host, e.Recorded.Updated.Format(time.RFC3339))
}

// NoHandoverError: an incoming live migration (or the start or record that
// follows it) that the claim does not show as the handover the front-end
// opened for the VM's current deploy, from its host to this one.
type NoHandoverError struct {
	VM       int
	Host     string
	Why      string
	Recorded *Claim
}

func (e *NoHandoverError) Error() string {
	cl := "no claim"
	if c := e.Recorded; c != nil {
		cl = fmt.Sprintf("the claim holds deploy #%d on host %s (%s, %s)", c.Seq, c.Host, c.Source, c.Updated.Format(time.RFC3339))
	}
	return fmt.Sprintf("VM %d: no live migration to %s was opened by the front-end for the current deploy: %s; %s. "+
		"Migrate the VM with onevm migrate --live, not with virsh", e.VM, e.Host, e.Why, cl)
}

// AlreadyRunningError: the VM's domain already runs on the host the start is
// for (a resume of a VM in UNKNOWN that in fact runs, a recover --retry of a
// deploy that did start). The start would fail ("domain already exists");
// fencing first would make the running VM I/O-dead, so nothing is fenced.
type AlreadyRunningError struct {
	VM     int
	Host   string
	Domain string
	State  string
}

func (e *AlreadyRunningError) Error() string {
	return fmt.Sprintf("VM %d: domain %s is already %s on host %s; not fencing it and not starting a second copy. "+
		"If oned shows the VM in UNKNOWN or failed, it is running: use 'onevm recover --success' instead of a new start",
		e.VM, e.Domain, e.State, e.Host)
}

// DomainUnknownError: a start of the claim's own deploy on the claim's own
// host, while libvirt gave no answer about the VM's domain there (an error,
// a timeout, opennebula.remote: local). The recorded instance may be the
// running VM (libvirtd restarting or hung while QEMU runs: the host goes
// ERROR, the VM UNKNOWN, and `onevm resume` deploys again under the same
// HISTORY): nothing is fenced and the start is refused until libvirt
// answers.
type DomainUnknownError struct {
	VM     int
	Host   string
	Domain string
	Said   string // libvirt's non-answer
}

func (e *DomainUnknownError) Error() string {
	return fmt.Sprintf("VM %d: cannot tell whether %s still runs on %s: libvirt %s; not fencing its recorded instance and not starting another copy: retry once libvirt answers on %s ('virsh -r domstate %s')",
		e.VM, e.Domain, e.Host, e.Said, e.Host, e.Domain)
}

// MigrationUnknownError: a failmigrate (on the destination, or on the
// source when the destination cannot be reached) while the source's
// libvirt did not say that the VM's domain runs there with no job: the
// migration it closes, or an earlier attempt's, may still run or have
// completed onto the destination, whose copy would then be the only one.
// Nothing is fenced; the claim and its window stay.
type MigrationUnknownError struct {
	VM       int
	Src, Dst string
	Domain   string
	Said     string // the source's libvirt's answer, in words
}

func (e *MigrationUnknownError) Error() string {
	return fmt.Sprintf("VM %d: cannot tell whether the migration of %s from %s still runs: libvirt on %s %s; nothing was fenced and the claim's window stays open: "+
		"check 'virsh -r domjobinfo %s' and 'virsh -r list --all' on %s and on %s, then retry ('onevm recover --retry', or --success / --failure by where the VM runs)",
		e.VM, e.Domain, e.Src, e.Src, e.Said, e.Domain, e.Src, e.Dst)
}

// OtherVMError: the claim read is another VM's of the same id (another
// OpenNebula installation sharing the claim pool, an earlier database of
// the same front-end): not this VM's. The engine then uses the object of
// this VM's identity (ClaimObjectOf); an operator sees it from claim reset.
type OtherVMError struct {
	VM       int
	Stime    int64
	Recorded Claim
}

func (e *OtherVMError) Error() string {
	other := "written by an older rbdfence before this VM existed"
	if e.Recorded.Stime != 0 {
		other = "of the VM " + strconv.Itoa(e.VM) + " created at " + deployTime(e.Recorded.Stime)
	}
	return fmt.Sprintf("VM %d (created at %s): the claim in its object is another VM's (%s; deploy #%d on %s): another OpenNebula installation sharing the claim pool, or an earlier database; it is not read, fenced from or reset as this VM's",
		e.VM, deployTime(e.Stime), other, e.Recorded.Seq, e.Recorded.Host)
}

// MigrationOpenError: a start by the hook (no deploy known) while the claim
// holds a live migration's window that this start is not the handover of:
// either copy may be the VM, so nothing is fenced.
type MigrationOpenError struct {
	VM       int
	Host     string
	Recorded Claim
}

func (e *MigrationOpenError) Error() string {
	w := e.Recorded.Window
	return fmt.Sprintf("VM %d: a live migration %s -> %s (deploy #%d) is open in its claim and this start on %s is not its handover: not fencing either copy and not starting another; "+
		"if the migration ended, the next OpenNebula action on the VM settles it (or run 'onevm recover')", e.VM, w.Src, w.Dst, w.Seq, e.Host)
}

// BehindNATError: a failmigrate on a host whose Ceph clients show Ceph an
// address that is not the host's own (NAT toward Ceph, or host_addresses
// that are not what Ceph sees): its clients cannot be told from the other
// host's by address, so nothing is fenced and the claim's window stays.
type BehindNATError struct {
	VM       int
	Host     string
	Seen     []netip.Addr // the addresses Ceph sees that are not Host's
	Src, Dst string
}

func (e *BehindNATError) Error() string {
	return fmt.Sprintf("refused, nothing fenced: Ceph sees %s as %s, not its own address (NAT?); VM %d's copies on %s and %s cannot be told apart: "+
		"check 'virsh -r list --all' on both, stop the copy that must not run, then 'onevm recover' by where it runs (README: Hosts behind NAT)",
		e.Host, joinAddrs(e.Seen), e.VM, e.Src, e.Dst)
}

// SharedAddressError: the two hosts of a live migration show Ceph one
// address, so the fence that closes its window cannot tell their clients
// apart: nothing is fenced and the claim's window stays.
type SharedAddressError struct {
	VM    int
	Hosts [2]string // the host the step runs on, the other
	Addr  netip.Addr
}

func (e *SharedAddressError) Error() string {
	return fmt.Sprintf("refused, nothing fenced: hosts %s and %s both show Ceph %s; VM %d's copies on them cannot be told apart: "+
		"give each host its own address toward Ceph (README: Hosts behind NAT), then 'onevm recover' by where the VM runs",
		e.Hosts[0], e.Hosts[1], e.Addr, e.VM)
}

func joinAddrs(as []netip.Addr) string {
	var ss []string
	for _, a := range as {
		ss = append(ss, a.String())
	}
	return strings.Join(ss, ", ")
}

// UnknownClaimError: the claim in the VM's object was written by an older
// rbdfence (no STIME) and nothing shows it to be this VM's or another's
// (Claim.Belonging): after a restore of oned's database, say, a start
// that read it as "no claim" would fence every client of the disks, the
// VM's own instance running where the claim says among them. Nothing is
// fenced; the operator checks where the VM runs and resets the claim.
type UnknownClaimError struct {
	VM       int
	Recorded Claim
}

func (e *UnknownClaimError) Error() string {
	return fmt.Sprintf("refused, nothing fenced: VM %d's claim from an older rbdfence (deploy #%d on %s) is not shown to be its own: "+
		"it is this VM's from before a restore of oned's database, or another installation's sharing the claim pool (its next step adopts it); "+
		"check where VM %d runs ('rbdfence claim show --vm %d'); if %s is this installation's host and no copy of the VM runs there, 'rbdfence claim reset --vm %d --legacy'",
		e.VM, e.Recorded.Seq, orDash(e.Recorded.Host), e.VM, e.VM, orDash(e.Recorded.Host), e.VM)
}
