// Package hostaddrs says which addresses identify an OpenNebula host's Ceph
// clients as the front-end can know them without asking the host: the
// addresses an operator gives (fence-host --host-addr), else those set once
// in the host's template (opennebula.AttrHostAddresses, which OpenNebula's
// HA hook passes with the host's XML), else the host's name resolved. It is
// pure Go: fence-host and doctor share it.
package hostaddrs

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/rbdfence/rbdfence/internal/opennebula"
)

// Sources of a host's addresses, as Of reports them.
const (
	FromFlag     = "--host-addr"
	FromTemplate = "the host's " + opennebula.AttrHostAddresses
	FromName     = "its name resolved"
	FromNothing  = "nothing"
)

// ResolveTimeout bounds a name lookup.
const ResolveTimeout = 2 * time.Second

// Of returns the addresses of host h's Ceph clients and where they came
// from: given when any (the operator's word for this run), else the host
// template's addresses, else h's name resolved. A template attribute that
// is not a list of IP addresses is an error (nothing is guessed in its
// place); a name that does not resolve gives none (FromNothing).
func Of(ctx context.Context, h *opennebula.HostInfo, given []netip.Addr) ([]netip.Addr, string, error) {
	if len(given) > 0 {
		return given, FromFlag, nil
	}
	ips, err := h.HostAddresses()
	if err != nil {
		return nil, "", err
	}
	if len(ips) > 0 {
		return ips, FromTemplate, nil
	}
	if ips := Resolve(ctx, h.Name); len(ips) > 0 {
		return ips, FromName, nil
	}
	return nil, FromNothing, nil
}

// Resolve returns the addresses of a host name (an IP address is its own),
// bounded by ResolveTimeout; none when it does not resolve. Only global
// unicast and private addresses identify a host's clients.
func Resolve(ctx context.Context, name string) []netip.Addr {
	if ip, err := netip.ParseAddr(name); err == nil {
		return []netip.Addr{ip.Unmap()}
	}
	ctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ip := range ips {
		if ip = ip.Unmap(); ip.IsGlobalUnicast() || ip.IsPrivate() {
			out = append(out, ip)
		}
	}
	return out
}
