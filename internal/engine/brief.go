package engine

import (
	"errors"
	"fmt"
)

// Briefer is a refusal that says in few words what happened and what to
// run: the part of a driver's message that oned keeps in the VM's ERROR.
// oned keeps the first 100 characters of "DEPLOY: " (or "MIGRATE: ",
// "ATTACHDISK: ") and the driver's message (src/vmm/
// VirtualMachineManagerProtocol.cc:43-58, src/vm/VirtualMachine.cc:
// 3092-3097 of release-7.4.0); rbdfence's headline "rbdfence: refused,
// nothing fenced: " takes 35 of them, so a brief fits in BriefMax with
// host names of 5 characters and deploy numbers of 2 digits.
type Briefer interface {
	Brief() string
}

// BriefMax bounds a Brief (TestBriefsFit).
const BriefMax = 50

// BriefOf is the Brief of the first Briefer in err's chain, "" if none.
func BriefOf(err error) string {
	var b Briefer
	if errors.As(err, &b) {
		return b.Brief()
	}
	return ""
}

func (e *ClaimHeldError) Brief() string { return "another run holds the claim; retry when it ends" }

func (e *NewerDeployError) Brief() string {
	return fmt.Sprintf("deploy #%d is older than #%d; rbdfence claim show", e.Ours, e.Recorded.Seq)
}

func (e *UnknownDeployError) Brief() string {
	return fmt.Sprintf("oned lost deploy #%d; see rbdfence claim show", e.Recorded.Seq)
}

func (e *ClaimedElsewhereError) Brief() string {
	return fmt.Sprintf("deploy #%d claimed by %s; rbdfence claim show", e.Recorded.Seq, e.Recorded.Host)
}

func (e *StartedAgainError) Brief() string {
	return fmt.Sprintf("#%d already started here; start it with onevm", e.Recorded.Seq)
}

func (e *NoHandoverError) Brief() string { return "no handover opened; use onevm migrate --live" }

func (e *AlreadyRunningError) Brief() string {
	return fmt.Sprintf("runs on %s already; use onevm recover --success", e.Host)
}

func (e *DomainUnknownError) Brief() string {
	return fmt.Sprintf("libvirt on %s silent; retry when it answers", e.Host)
}

func (e *MigrationUnknownError) Brief() string {
	return fmt.Sprintf("migration on %s may still run; retry or recover", e.Src)
}

func (e *OtherVMError) Brief() string { return "claim is another VM's; see rbdfence claim show" }

func (e *MigrationOpenError) Brief() string {
	return fmt.Sprintf("migration %s->%s open; run onevm recover", e.Recorded.Window.Src, e.Recorded.Window.Dst)
}

func (e *BehindNATError) Brief() string {
	return fmt.Sprintf("%s behind NAT toward Ceph; see README: NAT", e.Host)
}

func (e *SharedAddressError) Brief() string {
	return fmt.Sprintf("%s, %s share a Ceph address; README: NAT", e.Hosts[0], e.Hosts[1])
}

func (e *UnknownClaimError) Brief() string { return "old claim not shown ours; rbdfence claim show" }

func (e *ClaimFormatError) Brief() string { return "a host reads an older claim format; upgrade it" }

func (e *LeaseHeldError) Brief() string { return "claim lease held by another run; retry later" }

func (e *IncompleteError) Brief() string {
	what := "fence"
	if e.DryRun {
		what = "check"
	}
	return fmt.Sprintf("%s incomplete (%d problems); see the VM log", what, len(e.Problems))
}
