//go:build cgo

package ceph

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/rbdfence/rbdfence/internal/engine"
)

var _ engine.WholeAddressBlocklister = (*Cluster)(nil)

// BlocklistIP blocklists every client of ip (the entry ip:0/0, which the
// OSDs match against any port and nonce of that address). Only a host
// fence that the operator asked to cover whole addresses uses it: on a
// hyper-converged host it also cuts off the host's OSDs and monitors.
// Similar To: ceph osd blocklist add IP:0/0 EXPIRE
func (c *Cluster) BlocklistIP(ctx context.Context, ip netip.Addr, expire time.Duration) error {
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsLoopback() {
		return fmt.Errorf("refusing to blocklist the whole address %v", ip)
	}
	return c.addBlocklist(ctx, engine.Addr{IP: ip}, expire)
}
