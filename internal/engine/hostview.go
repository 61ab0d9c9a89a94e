package engine

import (
	"net/netip"
	"slices"
)

// HostView is what a host step knows of its own host's addresses: Own are
// the addresses the host has (host_addresses, else its interfaces); Seen
// are those Ceph learned for the step's own client, the addresses every
// client of this host shows Ceph (only global unicast ones identify a
// host). Behind NAT toward Ceph, or with host_addresses that are not the
// addresses Ceph sees, Seen holds an address that Own does not, and that
// address may be another host's as well.
type HostView struct {
	Own, Seen []netip.Addr
}

// Identity is what tells this host apart from others in claims (Who.HostIPs):
// the addresses Ceph sees for its clients that are the host's own. An
// address Ceph sees that the host does not have is no identity: two hosts
// behind one NAT show Ceph the same one.
func (v HostView) Identity() []netip.Addr {
	var out []netip.Addr
	for _, a := range v.Seen {
		if slices.Contains(v.Own, a) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// Behind are the addresses Ceph sees for this host's clients that are not
// its own (Who.Behind): none on a host that reaches Ceph directly.
func (v HostView) Behind() []netip.Addr {
	var out []netip.Addr
	for _, a := range v.Seen {
		if !slices.Contains(v.Own, a) && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// Scope is the addresses this host's clients may show Ceph: its own and
// those Ceph sees for its clients (the scope of a record and of the close
// of a live migration's window).
func (v HostView) Scope() []netip.Addr {
	out := slices.Clone(v.Own)
	for _, a := range v.Seen {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// SeenIPs are the IPs of own, the addresses Ceph learned for a client, as a
// HostView's Seen: global unicast only (the loopback of a cluster on this
// machine identifies no host), once each, IPv4 in its 4-byte form, sorted.
func SeenIPs(own []Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range own {
		if ip := a.IP.Unmap(); ip.IsGlobalUnicast() && !slices.Contains(out, ip) {
			out = append(out, ip)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// ErrSeenUnknown: librados gave no address for the step's own client, so
// the address Ceph sees for this host's clients is not known; a close of a
// live migration's window, which fences by address, refuses rather than
// fence on the host's interfaces alone (behind NAT toward Ceph that would
// fence the VM: the close would take an interface address for its own
// clients' and every client, the live one too, for another host's).
var ErrSeenUnknown error = &seenUnknownError{}

type seenUnknownError struct{}

func (*seenUnknownError) Error() string {
	return "refused, nothing fenced: librados gave no address for this host's Ceph client, so the address Ceph sees for its clients is unknown: retry the step"
}

// Brief says it within engine.BriefMax.
func (*seenUnknownError) Brief() string { return "librados gave no own address; retry the step" }

// SeenKnown is ErrSeenUnknown for the close of a window (closing: the
// steps postmigrate and failmigrate) when librados gave no address for the
// step's own client (own), else nil. A pure rule: the host step and the
// model both apply it.
func SeenKnown(closing bool, own []Addr) error {
	if closing && len(own) == 0 {
		return ErrSeenUnknown
	}
	return nil
}
