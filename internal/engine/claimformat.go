package engine

import "fmt"

// ClaimFormat is the version of the claim: the layout of the claim object
// (its name, pool and fields) and the rules a reader applies to it. Every
// rbdfence binary that reads or writes claims (the libvirt hook, the host
// step, the CLI) is built with one ClaimFormat and reports it
// (`rbdfence-hook --version`, the host step's versions). A reader of an
// older format misreads a newer claim: it drops fields it does not know on
// a rewrite, sees no window or identity, or finds no claim at all where the
// newer one keeps it, and would then admit, or fence, what the claim
// forbids. So a start or migration is refused on a host whose hook or host
// step is older than the front-end's ClaimFormat (CheckClaimFormat).
//
//	1  the claims of rbdfence up to 0300e58: its binaries report no claim
//	   format (a reader that reports none is format 1)
//	2  the first format with a number: the per-VM claim of issue 18 (the
//	   instance identity, the window fields, one installation's claims)
//
// Bump it, here and only here, in the change that makes a claim written by
// the new code misread by the previous format's reader.
const ClaimFormat = 2

// ClaimFormatError says that a reader (a host's hook or host step) is
// older than the claim format this code writes.
type ClaimFormatError struct {
	Who    string // e.g. "the libvirt hook /usr/lib/rbdfence/bin/rbdfence-hook on kvm1"
	Format int    // the reader's claim format; 1 when it reports none
	Need   int    // the format this code needs
}

func (e *ClaimFormatError) Error() string {
	return fmt.Sprintf("%s reads claim format %d, older than claim format %d", e.Who, e.Format, e.Need)
}

// CheckClaimFormat returns a *ClaimFormatError when format, the claim
// format a reader reports (0: it reports none, format 1), is older than
// need (ClaimFormat, or a peer's newer one).
func CheckClaimFormat(who string, format, need int) error {
	if format <= 0 {
		format = 1
	}
	if format >= need {
		return nil
	}
	return &ClaimFormatError{Who: who, Format: format, Need: need}
}
