package engine

import (
	"net/netip"
	"slices"
	"testing"
)

func TestHostView(t *testing.T) {
	ips := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, tc := range []struct {
		name                    string
		own, seen               []netip.Addr
		identity, behind, scope []netip.Addr
	}{
		{"direct", ips("10.0.0.1", "192.168.122.1"), ips("10.0.0.1"), ips("10.0.0.1"), nil, ips("10.0.0.1", "192.168.122.1")},
		{"NAT toward Ceph", ips("10.0.0.1"), ips("203.0.113.9"), nil, ips("203.0.113.9"), ips("10.0.0.1", "203.0.113.9")},
		{"host_addresses not what Ceph sees", ips("10.0.0.7"), ips("10.0.1.7"), nil, ips("10.0.1.7"), ips("10.0.0.7", "10.0.1.7")},
		{"Ceph saw nothing global", ips("10.0.0.1"), nil, nil, nil, ips("10.0.0.1")},
		{"both families", ips("10.0.0.1", "fd00::1"), ips("10.0.0.1", "fd00::1", "10.0.0.1"), ips("10.0.0.1", "fd00::1"), nil, ips("10.0.0.1", "fd00::1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := HostView{Own: tc.own, Seen: tc.seen}
			if got := v.Identity(); !slices.Equal(got, tc.identity) {
				t.Errorf("Identity = %v, want %v", got, tc.identity)
			}
			if got := v.Behind(); !slices.Equal(got, tc.behind) {
				t.Errorf("Behind = %v, want %v", got, tc.behind)
			}
			if got := v.Scope(); !slices.Equal(got, tc.scope) {
				t.Errorf("Scope = %v, want %v", got, tc.scope)
			}
		})
	}
}
