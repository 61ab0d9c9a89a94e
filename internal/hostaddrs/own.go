package hostaddrs

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"

	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// Own returns this machine's own addresses as a host step counts them: the
// configured host_addresses when any, else every address on its
// interfaces. IPv4 addresses are in their 4-byte form.
func Own(hostAddresses []string) ([]netip.Addr, error) {
	var out []netip.Addr
	if len(hostAddresses) > 0 {
		for _, s := range hostAddresses {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("host_addresses: %q: %v", s, err)
			}
			out = append(out, a.Unmap())
		}
		return out, nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("listing this host's addresses: %w", err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out, nil
}

// Shared finds two hosts of byHost that have one address: the first such
// pair in name order, and the address. A fence or a decision by address
// cannot tell them apart (two hosts behind one NAT toward Ceph, or an
// address given to both).
func Shared(byHost map[string][]netip.Addr) (a, b string, ip netip.Addr, ok bool) {
	names := make([]string, 0, len(byHost))
	for n := range byHost {
		names = append(names, n)
	}
	slices.Sort(names)
	for i, n := range names {
		for _, m := range names[i+1:] {
			for _, x := range byHost[n] {
				if x.IsValid() && slices.Contains(byHost[m], x) {
					return n, m, x, true
				}
			}
		}
	}
	return "", "", netip.Addr{}, false
}

// SharedWith finds another host of pool whose template's addresses
// (opennebula.AttrHostAddresses) hold one of ips, host name's addresses:
// the other host, and the address. A template that does not parse is
// skipped (doctor reports it).
func SharedWith(name string, ips []netip.Addr, pool []opennebula.PoolHost) (string, netip.Addr, bool) {
	for i := range pool {
		h := &pool[i].HostInfo
		if h.Name == name {
			continue
		}
		theirs, err := h.HostAddresses()
		if err != nil {
			continue
		}
		for _, a := range theirs {
			if slices.Contains(ips, a) {
				return h.Name, a, true
			}
		}
	}
	return "", netip.Addr{}, false
}
