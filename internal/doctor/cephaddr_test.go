package doctor

import (
	"net/netip"
	"strings"
	"testing"
)

func TestCheckCephAddress(t *testing.T) {
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		name       string
		own, seen  []netip.Addr
		configured bool
		ok         bool
		says       string
	}{
		{"direct", []netip.Addr{ip("10.0.0.1"), ip("192.168.122.1")}, []netip.Addr{ip("10.0.0.1")}, false, true, "10.0.0.1, its own (its interfaces)"},
		{"NAT toward Ceph", []netip.Addr{ip("10.0.0.1")}, []netip.Addr{ip("203.0.113.9")}, false, false, "as 203.0.113.9, not an address of this host (its interfaces: 10.0.0.1)"},
		{"host_addresses not what Ceph sees", []netip.Addr{ip("10.0.0.7")}, []netip.Addr{ip("10.0.1.7")}, true, false, "(host_addresses: 10.0.0.7)"},
		{"the NAT's address given in host_addresses", []netip.Addr{ip("203.0.113.9")}, []netip.Addr{ip("203.0.113.9")}, true, true, "its own (host_addresses)"},
		{"a cluster on this machine", []netip.Addr{ip("127.0.0.1")}, nil, false, true, "no global address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkCephAddress(tc.own, tc.seen, tc.configured)
			if r.OK != tc.ok || !strings.Contains(r.Detail, tc.says) || (r.OK == (r.Fix != "")) {
				t.Fatalf("got %+v, want ok=%v and a detail with %q (a fix only when failing)", r, tc.ok, tc.says)
			}
		})
	}
}
