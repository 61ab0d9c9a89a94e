package doctor

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// checkCephAddress compares, on a host, the addresses Ceph learned for our
// client (the ones every client of this host shows Ceph, seen: global
// unicast only) with the host's own (own: host_addresses when configured,
// else its interfaces). An address Ceph sees that the host does not have
// (NAT toward Ceph, or host_addresses that are not what Ceph sees) does not
// identify the host, and a failmigrate here refuses: the other host may
// show Ceph the same address (README: Hosts behind NAT).
func checkCephAddress(own, seen []netip.Addr, configured bool) Result {
	r := Result{Check: "ceph-address"}
	v := engine.HostView{Own: own, Seen: seen}
	whose := "its interfaces"
	if configured {
		whose = "host_addresses"
	}
	switch behind := v.Behind(); {
	case len(seen) == 0:
		r.OK = true
		r.Detail = "Ceph sees this host's clients at no global address (a cluster on this machine): hosts are told apart by name"
	case len(behind) > 0:
		r.Detail = fmt.Sprintf("Ceph sees this host's clients as %s, not an address of this host (%s: %s): NAT toward Ceph, or host_addresses that are not what Ceph sees; "+
			"failmigrate refuses here and the address does not identify the host (README: Hosts behind NAT)", addrList(behind), whose, addrList(own))
		r.Fix = "reach Ceph without NAT; or, if " + addrList(behind) + " is this host's alone, add it to host_addresses in the config (with every address Ceph may see for this host)"
	default:
		r.OK = true
		r.Detail = fmt.Sprintf("Ceph sees this host's clients as %s, its own (%s)", addrList(seen), whose)
	}
	return r
}

func addrList(as []netip.Addr) string {
	ss := make([]string, len(as))
	for i, a := range as {
		ss[i] = a.String()
	}
	return strings.Join(ss, ", ")
}
