package hostaddrs_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/rbdfence/rbdfence/internal/hostaddrs"
	"github.com/rbdfence/rbdfence/internal/opennebula"
)

func TestOf(t *testing.T) {
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		name, host, attr string
		given            []netip.Addr
		want             string
		from             string
		err              string
	}{
		{name: "given wins", host: "node1.invalid", attr: "10.0.1.5", given: []netip.Addr{ip("10.9.9.9")}, want: "[10.9.9.9]", from: hostaddrs.FromFlag},
		{name: "template", host: "node1.invalid", attr: " 10.0.1.5, fd00::5 10.0.1.5 ", want: "[10.0.1.5 fd00::5]", from: hostaddrs.FromTemplate},
		{name: "template mapped", host: "node1.invalid", attr: "::ffff:10.0.1.6", want: "[10.0.1.6]", from: hostaddrs.FromTemplate},
		{name: "bad template", host: "node1.invalid", attr: "10.0.1.5 node1", err: `RBDFENCE_HOST_ADDRESSES "10.0.1.5 node1": "node1" is not an IP address (fix it with: onehost update node1.invalid --append)`},
		{name: "unspecified", host: "node1.invalid", attr: "0.0.0.0", err: "is not an IP address"},
		{name: "name is an IP", host: "10.0.2.7", want: "[10.0.2.7]", from: hostaddrs.FromName},
		{name: "nothing", host: "node1.invalid", want: "[]", from: hostaddrs.FromNothing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &opennebula.HostInfo{Name: tc.host, Addresses: tc.attr}
			got, from, err := hostaddrs.Of(context.Background(), h, tc.given)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != tc.want || from != tc.from {
				t.Fatalf("got %v from %q (%v), want %s from %q", got, from, err, tc.want, tc.from)
			}
		})
	}
}

func TestShared(t *testing.T) {
	ip := netip.MustParseAddr
	for _, tc := range []struct {
		name   string
		in     map[string][]netip.Addr
		a, b   string
		shared string // "" when none
	}{
		{"distinct", map[string][]netip.Addr{"kvm1": {ip("10.0.0.1")}, "kvm2": {ip("10.0.0.2")}}, "", "", ""},
		{"one NAT", map[string][]netip.Addr{"kvm2": {ip("10.0.0.2"), ip("203.0.113.9")}, "kvm1": {ip("203.0.113.9")}, "kvm3": {ip("10.0.0.3")}}, "kvm1", "kvm2", "203.0.113.9"},
		{"a host without addresses", map[string][]netip.Addr{"kvm1": nil, "kvm2": nil}, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, x, ok := hostaddrs.Shared(tc.in)
			if ok != (tc.shared != "") || (ok && (a != tc.a || b != tc.b || x.String() != tc.shared)) {
				t.Fatalf("Shared = %s %s %v %v, want %s %s %s", a, b, x, ok, tc.a, tc.b, tc.shared)
			}
		})
	}
}

func TestOwn(t *testing.T) {
	got, err := hostaddrs.Own([]string{"::ffff:10.0.0.2", "fd00::2"})
	if err != nil || len(got) != 2 || got[0] != netip.MustParseAddr("10.0.0.2") {
		t.Fatalf("Own(host_addresses) = %v, %v", got, err)
	}
	if _, err := hostaddrs.Own([]string{"node1"}); err == nil || !strings.Contains(err.Error(), "host_addresses") {
		t.Fatalf("a name in host_addresses: %v", err)
	}
	got, err = hostaddrs.Own(nil)
	if err != nil || !slices.Contains(got, netip.MustParseAddr("127.0.0.1")) {
		t.Fatalf("Own(nil) = %v, %v: want the interfaces' addresses, loopback among them", got, err)
	}
}
