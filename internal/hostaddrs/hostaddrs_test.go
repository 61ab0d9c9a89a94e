package hostaddrs_test

import (
	"context"
	"fmt"
	"net/netip"
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
