package ceph

import (
	"context"
	"sort"

	"github.com/rbdfence/rbdfence/internal/engine"
)

// ClaimObjects returns the names of the claim objects in pool, sorted:
// every VM's object (engine.ClaimObject) and every object of a VM's
// identity (engine.ClaimObjectOf).
// Similar To: rados -p POOL ls | grep '^rbdfence.vm.'
func (c *Cluster) ClaimObjects(ctx context.Context, pool string) ([]string, error) {
	return call(ctx, func() ([]string, error) {
		io, err := c.conn.OpenIOContext(pool)
		if err != nil {
			return nil, err
		}
		defer io.Destroy()
		var out []string
		err = io.ListObjects(func(oid string) {
			if _, _, ok := engine.ParseClaimObject(oid); ok {
				out = append(out, oid)
			}
		})
		sort.Strings(out)
		return out, err
	})
}
